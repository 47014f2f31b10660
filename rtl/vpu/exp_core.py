"""Exponential core of the vector unit: ``exp(x) ~= m * 2**(n - 32)`` for binary32 ``|x| < 128``."""

from amaranth.hdl import Cat, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.multiplier import MODES, Multiplier, natural_stages
from sim_models.vpu import EXP_TABLE_HI, EXP_TABLE_LO, LN2_Q18, LOG2E_Q33

__all__ = ["ExpCore"]

M_BITS = 34
"""Width of ``m``: ``2**32 <= m <= 2**33`` (33 bits plus a carry; ``m < 2**33`` for every table pair)."""
N_BITS = 9
"""Width of the signed ``n``: ``-185 <= n <= 184``."""

_T_FRAC = 40             # fraction bits of t = |x| * log2(e) (sim_models.vpu._T_FRAC)
_T_BITS = 48             # T < 185 * 2**40 < 2**48
_DROP = 10               # every shift of the product is at least 10: its low 10 bits never reach T
_ZERO_BELOW = 86         # biased exponents below 86 shift the 58-bit product by >= 58: T = 0
_AB_BITS = 33            # ab = A + A * (B - 2**32) / 2**32 < 2**33 for every table pair
_LO_FRAC_BITS = 24       # EXP_TABLE_LO[i] - 2**32 < 2**24


class ExpCore(wiring.Component):
    """Exponential core: ``(m, n)`` with ``exp(x) ~= m * 2**(n - 32)``, for binary32 ``|x| < 128``.

    This is :func:`sim_models.vpu.exp_core` in gates, bit for bit:

    1. ``T = (sig * LOG2E_Q33) >> (143 - max(biased, 1))`` (0 when that shift is 63 or more):
       ``|x| * log2(e)`` with 40 fraction bits, truncated;
    2. ``t = -T`` for negative ``x``, else ``T`` (49-bit two's complement): ``n = t >> 40`` (floor),
       ``f = t mod 2**40``;
    3. ``i1 = f[32:40]``, ``i2 = f[24:32]``, ``r = f[6:24]``;
    4. ``ab = A + ((A * (B - 2**32)) >> 32)`` with ``A = EXP_TABLE_HI[i1]``, ``B = EXP_TABLE_LO[i2]``;
    5. ``p = (r * LN2_Q18) >> 4``;
    6. ``m = ab + (((ab >> 16) * (p >> 14)) >> 18)``.

    Datapath, one multiplier or one carry chain per register stage (``dsp``; ``lut`` has more
    adder levels in its products, see :class:`~rtl.vpu.multiplier.Multiplier`):

    * the 24 x 34-bit product ``sig * LOG2E_Q33`` as ``frac * LOG2E_Q33 + (LOG2E_Q33 << 23 if
      normal)`` (``dsp``: four ``MULT18X18D`` tiles fed straight from ``x``, then two adder levels
      that also add the implicit bit's row);
    * the right shift by ``133 - biased`` of the product's bits ``[10:58]`` (a 6-level barrel
      shifter: shifts below 10 never occur for ``|x| < 128``, so bits below 10 only matter as carries
      inside the product);
    * the conditional negation ``(T ^ s) + s``, which gives ``n`` and ``f`` at once;
    * the two 256-entry tables, ``EXP_TABLE_HI`` (33 bits) and ``EXP_TABLE_LO - 2**32`` (24 bits),
      as :class:`~amaranth.lib.memory.Memory` ROMs with synchronous read ports (one ECP5 ``DP16KD``
      block RAM each), then a register stage for the block RAM's clock-to-output delay;
    * ``ab = (A * (B - 2**32) + (A << 32)) >> 32``: the addition of ``A`` rides in the product's adder
      tree (the truncation is the same, ``A << 32`` having no bits below 32); in parallel
      ``p >> 14 = (r * LN2_Q18) >> 18`` (one tile);
    * ``m = ((ab << 18) + (ab >> 16) * (p >> 14)) >> 18``: one tile, one adder level.

    Resources on the ULX3S-85F (``poblano.flows.fpga.build`` alone in its harness, 100 MHz target,
    seed 1): ``dsp`` 126 MHz, about 950 LUT4 and 880 FF, 10 ``MULT18X18D``, 2 ``DP16KD`` (the
    critical path is a tile's own delay, register to register); ``lut`` 139 MHz, about 3670 LUT4
    and 2640 FF, no ``MULT18X18D``, 2 ``DP16KD``.

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports), for a caller's flags that travel
        with the operand.
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the four products (:class:`~rtl.vpu.multiplier.Multiplier`): ``"dsp"`` uses
        10 ``MULT18X18D``; ``"lut"`` none, at the cost of adder trees and a longer :attr:`latency`.

    Interface attributes
    --------------------
    x : ``In(32)``
        Binary32 pattern. Only finite ``|x| < 128`` (biased exponent below 134) is meaningful; other
        patterns give deterministic but meaningless outputs (callers mask them, as
        :func:`sim_models.vpu._exp_bits` does).
    tag : ``In(tag_width)``
        Sampled with ``x``, delivered unchanged with its ``m`` and ``n`` (only when ``tag_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register and table read: with ``en`` low the pipeline holds.
    m : ``Out(34)``
        ``m`` of :func:`~sim_models.vpu.exp_core`, in ``[2**32, 2**33]``, :attr:`latency` enabled
        cycles after its ``x``.
    n : ``Out(signed(9))``
        ``n`` of :func:`~sim_models.vpu.exp_core`, in ``[-185, 184]``.
    tag_out : ``Out(tag_width)``
        The ``tag`` of ``x`` (only when ``tag_width > 0``).

    Latency and throughput
    ----------------------
    :attr:`latency` cycles from ``x`` to ``m``/``n``: 12 with ``multiplier="dsp"``, 18 with
    ``"lut"``. One exponential per cycle. Outputs come straight from registers. No valid signal and
    no stall logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    def __init__(self, *, tag_width=0, multiplier="dsp"):
        check_positive_int(self, "tag_width", tag_width, minimum=0)
        if multiplier not in MODES:
            raise parameter_error(self, ValueError, f"multiplier must be one of {MODES}, got {multiplier!r}")
        self._tag_width = tag_width
        self._multiplier = multiplier
        ports = {
            "x": In(32),
            "en": In(1, init=1),
            "m": Out(M_BITS),
            "n": Out(signed(N_BITS)),
        }
        if tag_width:
            ports.update(tag=In(tag_width), tag_out=Out(tag_width))
        super().__init__(ports)

    @property
    def tag_width(self):
        return self._tag_width

    @property
    def multiplier(self):
        return self._multiplier

    def _products(self):
        """Configurations of the four products (widths from the model's constants and table bounds)."""
        mode = self._multiplier
        return {
            "t": dict(a_width=23, b_width=LOG2E_Q33.bit_length(), mode=mode, constant=LOG2E_Q33,
                      addend_width=LOG2E_Q33.bit_length(), addend_shift=23),
            "ab": dict(a_width=_AB_BITS, b_width=_LO_FRAC_BITS, mode=mode, addend_width=_AB_BITS,
                       addend_shift=32),
            "p": dict(a_width=18, b_width=LN2_Q18.bit_length(), mode=mode, constant=LN2_Q18),
            "m": dict(a_width=_AB_BITS - 16, b_width=18, mode=mode, addend_width=_AB_BITS, addend_shift=18),
        }

    @property
    def latency(self):
        """Cycles from ``x`` to ``m``/``n``."""
        stages = {name: natural_stages(**kw) for name, kw in self._products().items()}
        # 4: the shift, the negation, the table read and the table register.
        return stages["t"] + 4 + max(stages["ab"], stages["p"]) + stages["m"]

    def elaborate(self, platform):
        m = Module()
        en = self.en
        count = [0]

        def register(values):
            out = {}
            for key, value in values.items():
                reg = Signal(value.shape(), name=f"{key}_r{count[0]}", reset_less=True)
                with m.If(en):
                    m.d.sync += reg.eq(value)
                out[key] = reg
            count[0] += 1
            return out

        def delay(values, cycles):
            for _ in range(cycles):
                values = register(values)
            return values

        side = {"tag": self.tag} if self._tag_width else {}

        # ---- sig * LOG2E_Q33 (58 bits); beside it the shift amount ------------------------------
        x = self.x
        biased = x[23:31]
        products = self._products()
        m.submodules.t_product = t_mul = Multiplier(**products["t"])
        # sig * L = frac * L + (normal ? L << 23 : 0): the implicit bit (an 8-input OR) feeds the
        # adder tree as an addend row, not a multiplier input, so x reaches the tiles directly.
        normal = biased != 0
        m.d.comb += [t_mul.a.eq(x[:23]), t_mul.addend.eq(normal.replicate(len(t_mul.addend)) & LOG2E_Q33),
                     t_mul.en.eq(en)]
        # shift = 143 - max(biased, 1) = 10 + (133 - biased) for biased >= 86; T = 0 below 86.
        v = delay({"sign": x[31], "amount": (133 - biased)[:6], "zero": biased < _ZERO_BELOW, **side},
                  t_mul.latency)

        # ---- T = product[10:58] >> amount --------------------------------------------------------
        product = t_mul.p[_DROP:_DROP + _T_BITS]
        shifted = Signal(_T_BITS, name="t_shifted")
        m.d.comb += shifted.eq(product >> v["amount"])
        v = register({"sign": v["sign"], "t_mag": shifted & ~v["zero"].replicate(_T_BITS),
                      **{k: v[k] for k in side}})

        # ---- t = +-T: n = floor(t), f = t mod 2**40 ----------------------------------------------
        sign = v["sign"].replicate(_T_BITS + 1)
        v = register({"t": ((Cat(v["t_mag"], Const(0, 1)) ^ sign) + v["sign"])[:_T_BITS + 1],
                      **{k: v[k] for k in side}})
        t = v["t"]
        f = t[:_T_FRAC]

        # ---- tables: A = EXP_TABLE_HI[i1], B - 2**32 = EXP_TABLE_LO[i2] - 2**32 -----------------
        m.submodules.table_hi = table_hi = Memory(shape=_AB_BITS, depth=256, init=EXP_TABLE_HI)
        m.submodules.table_lo = table_lo = Memory(shape=_LO_FRAC_BITS, depth=256,
                                                  init=[value - (1 << 32) for value in EXP_TABLE_LO])
        read_hi, read_lo = table_hi.read_port(), table_lo.read_port()
        m.d.comb += [read_hi.addr.eq(f[32:40]), read_lo.addr.eq(f[24:32]),
                     read_hi.en.eq(en), read_lo.en.eq(en)]
        v = register({"n": t[_T_FRAC:].as_signed(), "r": f[6:24], **{k: v[k] for k in side}})
        v = register({"a": read_hi.data, "b_frac": read_lo.data, **v})

        # ---- ab = A + ((A * (B - 2**32)) >> 32); p >> 14 = (r * LN2_Q18) >> 18 ------------------
        m.submodules.ab_product = ab_mul = Multiplier(**products["ab"])
        m.submodules.p_product = p_mul = Multiplier(**products["p"])
        m.d.comb += [ab_mul.a.eq(v["a"]), ab_mul.b.eq(v["b_frac"]), ab_mul.addend.eq(v["a"]),
                     ab_mul.en.eq(en), p_mul.a.eq(v["r"]), p_mul.en.eq(en)]
        ab = ab_mul.p[32:32 + _AB_BITS]
        p14 = delay({"p14": p_mul.p[18:36]}, max(ab_mul.latency - p_mul.latency, 0))["p14"]
        ab = delay({"ab": ab}, max(p_mul.latency - ab_mul.latency, 0))["ab"]
        v = delay({"n": v["n"], **{k: v[k] for k in side}}, max(ab_mul.latency, p_mul.latency))

        # ---- m = ab + (((ab >> 16) * (p >> 14)) >> 18) -------------------------------------------
        m.submodules.m_product = m_mul = Multiplier(**products["m"])
        m.d.comb += [m_mul.a.eq(ab[16:]), m_mul.b.eq(p14), m_mul.addend.eq(ab), m_mul.en.eq(en)]
        v = delay(v, m_mul.latency)
        m.d.comb += [self.m.eq(m_mul.p[18:18 + M_BITS]), self.n.eq(v["n"])]
        if self._tag_width:
            m.d.comb += self.tag_out.eq(v["tag"])
        return m
