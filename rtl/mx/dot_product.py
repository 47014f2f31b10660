"""Exact 32-element E2M1 dot product of two MX blocks, with the block exponent of their scales."""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.layouts import BLOCK_SIZE, E2M1, E8M0, MXBlock, ScaledDot

__all__ = ["DotProduct", "ProductMapping", "LUT_PRODUCTS", "E2M1_HALVES", "condition_operand"]

E2M1_HALVES = (0, 1, 2, 3, 4, 6, 8, 12)
"""Twice the magnitude of each E2M1 magnitude code 0..7 (``S E1 E0 M`` without the sign)."""

_SIGNED_HALVES = E2M1_HALVES + tuple(-h for h in E2M1_HALVES)

# Magnitude of the product in quarters, indexed by (b magnitude code << 3) | a magnitude code.
_PRODUCT_TABLE = Const(sum((E2M1_HALVES[i & 7] * E2M1_HALVES[i >> 3]) << (8 * i) for i in range(64)),
                       64 * 8)
# Signed product in quarters, indexed by (b code << 4) | a code: the block-RAM table.
_ROM_TABLE = [_SIGNED_HALVES[i & 15] * _SIGNED_HALVES[i >> 4] for i in range(256)]
# Two signed halves packed as hi * 2**10 + lo; a product of two such words carries the two-element
# dot product in bits 10..19 (plus bit 9 as a rounding carry), see DotProduct.
_PACK_SHIFT = 10
_PACKED = signed(15)


@dataclass(frozen=True)
class ProductMapping:
    """How the 32 element products of a :class:`DotProduct` are built.

    * ``dsp_pairs`` pairs of elements (elements ``0 .. 2*dsp_pairs-1``) share one 18x18 multiplier
      (ECP5 ``MULT18X18D``): each operand packs two signed values as ``hi * 2**10 + lo``.
    * ``rom_pairs`` pairs (the next ``2*rom_pairs`` elements) read a 256-entry product table in one
      dual-port block RAM (``DP16KD``), one element per port.
    * The remaining elements use a LUT table on the magnitude codes and the XOR of the signs.

    All three compute the same exact integers; the mapping trades LUTs for the FPGA's hard blocks.
    """

    dsp_pairs: int = 0
    rom_pairs: int = 0

    def __post_init__(self):
        for name in ("dsp_pairs", "rom_pairs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if 2 * (self.dsp_pairs + self.rom_pairs) > BLOCK_SIZE:
            raise ValueError(f"dsp_pairs + rom_pairs = {self.dsp_pairs + self.rom_pairs} exceeds "
                             f"{BLOCK_SIZE // 2} element pairs")

    @property
    def lut_elements(self):
        return BLOCK_SIZE - 2 * (self.dsp_pairs + self.rom_pairs)

    @property
    def operand(self):
        """Layout of one conditioned operand block (:class:`MXBlock` when no DSP pairs are used)."""
        if not self.dsp_pairs:
            return MXBlock
        return data.StructLayout({
            "codes": data.ArrayLayout(E2M1, BLOCK_SIZE - 2 * self.dsp_pairs),
            "packed": data.ArrayLayout(_PACKED, self.dsp_pairs),
            "scale": E8M0,
        })


LUT_PRODUCTS = ProductMapping()
"""The default mapping: every product from LUT tables (no multipliers, no block RAM)."""


def condition_operand(m, block, mapping, side, name):
    """Convert an :class:`MXBlock` into ``mapping.operand`` (combinational): pack the DSP pairs.

    ``side`` is ``"a"`` or ``"b"``: A packs ``(element 2p+1, element 2p)`` as ``(hi, lo)``, B packs
    ``(2p, 2p+1)``, so the middle term of their product is the two-element dot product.
    """
    out = Signal(mapping.operand, name=name)
    if not mapping.dsp_pairs:
        m.d.comb += out.eq(block)
        return out
    halves = Signal(data.ArrayLayout(signed(5), 2 * mapping.dsp_pairs), name=f"{name}_halves")
    for i in range(2 * mapping.dsp_pairs):
        with m.Switch(block.codes[i]):
            for code in range(16):
                with m.Case(code):
                    m.d.comb += halves[i].eq(_SIGNED_HALVES[code])
    for p in range(mapping.dsp_pairs):
        hi, lo = (halves[2 * p + 1], halves[2 * p]) if side == "a" else (halves[2 * p], halves[2 * p + 1])
        m.d.comb += out.packed[p].eq((hi << _PACK_SHIFT) + lo)
    for i in range(BLOCK_SIZE - 2 * mapping.dsp_pairs):
        m.d.comb += out.codes[i].eq(block.codes[2 * mapping.dsp_pairs + i])
    m.d.comb += out.scale.eq(block.scale)
    return out


class DotProduct(wiring.Component):
    """Dot product of the E2M1 codes of two MX blocks, in quarters, and their block exponent.

    Products (see :class:`ProductMapping`): by default every one of the 32 products is a LUT table
    look-up: the two 3-bit magnitude codes select the magnitude of ``halves(a) * halves(b)`` (at most
    144 quarters, 8 bits) and the XOR of the sign bits makes it negative. A negative LUT product
    enters the adder tree as its one's complement, and the missing ``+1`` rides in on the carry-in of
    a tree adder (``(x << 1 | 1) + (y << 1 | c)`` drops to ``x + y + c``), so no product needs its own
    negation. Element pairs mapped to a multiplier contribute bits 10..19 of ``A_packed * B_packed``
    (the two-element dot product, at most 288 in magnitude) plus bit 9 as a carry-in; pairs mapped to
    block RAM read signed products directly. The sum is exact: ``|dot| <= 4608`` fits the 14-bit
    signed ``dot``.

    The block exponent is ``(sa - 127) + (sb - 127)``; ``nan`` is set when either scale is 0xFF.

    Parameters
    ----------
    mapping : ProductMapping
        Which products use multipliers, block RAM or LUTs (default: all LUTs).

    Interface attributes
    --------------------
    a, b : ``In(mapping.operand)``
        The two blocks (``MXBlock`` for an all-LUT mapping; otherwise as produced by
        :func:`condition_operand`).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register (and of the product RAMs' read ports).
    term : ``Out(ScaledDot)``
        ``dot`` (signed quarters), ``exp`` and ``nan``, :attr:`latency` enabled cycles after the
        inputs.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles: products (plus a register for block-RAM data), then two tree
    levels per register stage; one block pair per cycle. No handshake: a caller with backpressure
    holds the pipeline with ``en``.
    """

    def __init__(self, mapping=LUT_PRODUCTS):
        if not isinstance(mapping, ProductMapping):
            raise parameter_error(self, TypeError, f"mapping must be a ProductMapping, got {mapping!r}")
        self._mapping = mapping
        super().__init__({
            "a": In(mapping.operand),
            "b": In(mapping.operand),
            "en": In(1, init=1),
            "term": Out(ScaledDot),
        })

    @property
    def mapping(self):
        return self._mapping

    @property
    def latency(self):
        return self.latency_for(self._mapping)

    @staticmethod
    def latency_for(mapping):
        """:attr:`latency` of a dot product with ``mapping``: 4 cycles, 5 with block-RAM products."""
        return 4 + (mapping.rom_pairs > 0)

    def elaborate(self, platform):
        m = Module()
        mapping = self._mapping

        def register(value, name):
            reg = Signal(value.shape(), name=name, reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- stage 1: products, block exponent ------------------------------------------------
        leaves, carries = [], []
        for p in range(mapping.dsp_pairs):
            product = Signal(signed(30), name=f"dsp{p}")
            m.d.comb += product.eq(self.a.packed[p] * self.b.packed[p])
            leaves.append(register(product[_PACK_SHIFT:_PACK_SHIFT + 10].as_signed(), f"pair{p}"))
            carries.append(register(product[_PACK_SHIFT - 1], f"pair{p}_round"))
        codes_a, codes_b = self.a.codes, self.b.codes
        for p in range(mapping.rom_pairs):
            rom = Memory(shape=signed(9), depth=256, init=_ROM_TABLE, attrs={"ram_style": "block"})
            m.submodules[f"rom{p}"] = rom
            for k in range(2):
                i = 2 * p + k
                port = rom.read_port(domain="sync")
                m.d.comb += [port.addr.eq(Cat(codes_a[i], codes_b[i])), port.en.eq(self.en)]
                leaves.append(port.data)
        first_lut = 2 * mapping.rom_pairs
        spare = (len(leaves) + mapping.lut_elements - 1) - (len(carries) + mapping.lut_elements)
        for i in range(first_lut, first_lut + mapping.lut_elements):
            ca, cb = codes_a[i], codes_b[i]
            magnitude = Signal(8, name=f"mag{i}")
            m.d.comb += magnitude.eq(_PRODUCT_TABLE.word_select(Cat(ca[:3], cb[:3]), 8))
            sign = ca[3] ^ cb[3]
            if spare < 0:
                # More carries than tree adders: this product is negated outright.
                leaves.append(register(Mux(sign, -magnitude, magnitude), f"leaf{i}"))
                spare += 1
            else:
                leaves.append(register((Cat(magnitude, Const(0, 1)) ^ sign.replicate(9)).as_signed(),
                                       f"leaf{i}"))
                carries.append(register(sign, f"sign{i}"))
        sa, sb = self.a.scale, self.b.scale
        exp = register((Cat(sa, Const(0, 1)).as_signed() + Cat(sb, Const(0, 1)).as_signed() - 254)
                       [:9].as_signed(), "exp1")
        nan = register((sa == 0xFF) | (sb == 0xFF), "nan1")

        if mapping.rom_pairs:
            # Block-RAM data comes late in the cycle (clock-to-out of an unregistered read port):
            # one more register stage, which the RAM's own output register can absorb.
            leaves = [register(leaf, f"leaf{n}_q") for n, leaf in enumerate(leaves)]
            carries = [register(c, f"carry0_{n}") for n, c in enumerate(carries)]
            exp = register(exp, "exp_q")
            nan = register(nan, "nan_q")

        # ---- tree: five levels, a register after levels 2, 4 and 5 --------------------------------
        level = leaves
        for depth in range(1, 6):
            nxt = []
            for j in range(0, len(level) - 1, 2):
                x, y = level[j], level[j + 1]
                width = max(len(x), len(y)) + 1
                carry = carries.pop() if carries else Const(0, 1)
                wide = (Cat(Const(1, 1), x).as_signed() + Cat(carry, y).as_signed())[1:width + 1]
                total = Signal(signed(width), name=f"sum{depth}_{j // 2}")
                m.d.comb += total.eq(wide.as_signed())
                nxt.append(total)
            if len(level) % 2:
                odd = level[-1]
                if len(level) == 1 and carries:
                    # Carries left over (no block-RAM pairs, no LUT products): add one outright.
                    total = Signal(signed(len(odd) + 1), name=f"sum{depth}_carry")
                    m.d.comb += total.eq(odd + carries.pop())
                    odd = total
                nxt.append(odd)
            level = nxt
            if depth in (2, 4, 5):
                level = [register(t, f"sum{depth}_{n}_r") for n, t in enumerate(level)]
                carries = [register(c, f"carry{depth}_{n}") for n, c in enumerate(carries)]
                exp = register(exp, f"exp{depth}")
                nan = register(nan, f"nan{depth}")
        assert len(level) == 1 and not carries

        m.d.comb += [
            self.term.dot.eq(level[0]),
            self.term.exp.eq(exp),
            self.term.nan.eq(nan),
        ]
        return m
