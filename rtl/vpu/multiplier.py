"""Unsigned pipelined multiplier of the vector unit: MULT18X18D tiles or LUT partial products."""

import heapq

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.round_pack import spread_registers

__all__ = ["Multiplier", "MODES", "TILE_BITS", "csd_digits", "natural_stages"]

MODES = ("dsp", "lut")
"""Product implementations: ``"dsp"`` writes ``*`` on 18x18 tiles, ``"lut"`` adds partial products."""
TILE_BITS = 18
"""Operand width of one ECP5 ``MULT18X18D`` (unsigned 18 x 18 -> 36 bits)."""


def csd_digits(value):
    """Canonical signed-digit form of ``value > 0``: ``[(position, +1 or -1), ...]``, lowest first.

    No two non-zero digits are adjacent, so a constant of ``w`` bits has at most ``w // 2 + 1`` of them.
    """
    digits, position = [], 0
    while value:
        if value & 1:
            digit = 2 - (value & 3)                  # +1 for ...01, -1 for ...11
            digits.append((position, digit))
            value -= digit
        value >>= 1
        position += 1
    return digits


class _Row:
    """A partial product: ``(-1 if neg else 1) * (value << lo)``, non-zero bits only in ``[lo, hi)``.

    ``value`` is an Amaranth value of exactly ``hi - lo`` bits, or None while only planning.
    """

    __slots__ = ("lo", "hi", "neg", "value")

    def __init__(self, lo, hi, neg=False, value=None):
        self.lo, self.hi, self.neg, self.value = lo, hi, neg, value


class _Tree:
    """Reduction of partial-product rows to one row, one carry-chain level per step.

    With ``module`` None the tree only plans (row ranges, no expressions): that is how
    :class:`Multiplier` knows its latency before elaboration.
    """

    def __init__(self, width, module=None, name="pp"):
        self.width, self.m, self.name = width, module, name
        self.count = 0

    def _wire(self, width, value):
        sig = Signal(width, name=f"{self.name}_{self.count}")
        self.count += 1
        self.m.d.comb += sig.eq(value)                 # sign-extends a signed difference
        return sig

    def merge(self, rows):
        """Concatenate positive rows whose bit ranges do not overlap (free: no logic)."""
        positive = sorted((r for r in rows if not r.neg), key=lambda r: (r.lo, r.hi))
        chains = []                                    # heap of (end, index, [rows])
        for index, row in enumerate(positive):
            if chains and chains[0][0] <= row.lo:  # the chain that ends first (interval partitioning)
                _, first, chain = heapq.heappop(chains)
                chain.append(row)
                heapq.heappush(chains, (row.hi, first, chain))
            else:
                heapq.heappush(chains, (row.hi, index, [row]))
        merged = []
        for _, _, chain in sorted(chains, key=lambda c: c[2][0].lo):
            value = None
            if self.m is not None:
                parts, at = [], chain[0].lo
                for row in chain:
                    if row.lo > at:
                        parts.append(Const(0, row.lo - at))
                    parts.append(row.value)
                    at = row.hi
                value = Cat(*parts)
            merged.append(_Row(chain[0].lo, chain[-1].hi, False, value))
        return merged + [r for r in rows if r.neg]

    @staticmethod
    def _field(row, lo, hi):
        """Bits of weights ``[lo, hi)`` of ``row``'s magnitude: exactly ``hi - lo`` bits."""
        return Cat(Const(0, row.lo), row.value, Const(0, max(hi - row.hi, 0)))[lo:hi]

    def add(self, x, y):
        """One carry chain: ``x + y`` (``-(|x| + |y|)`` for two negative rows), modulo ``2**width``."""
        if x.neg and not y.neg:
            x, y = y, x
        base = min(x.lo, y.lo)
        if x.neg == y.neg:
            split = max(x.lo, y.lo)                    # below it only the lower row has bits
            hi, neg = min(max(x.hi, y.hi) + 1, self.width), x.neg
        else:                                          # x - y: x's low bits pass only below y
            split = y.lo if y.lo >= x.lo else base
            hi, neg = self.width, False
        row = _Row(base, hi, neg)
        if self.m is not None:
            lower = x if x.lo == base else y
            top = max(x.hi, y.hi, split + 1)
            upper_x, upper_y = self._field(x, split, top), self._field(y, split, top)
            total = upper_x - upper_y if x.neg != y.neg else upper_x + upper_y
            upper = self._wire(hi - split, total)      # truncated (mod 2**width) or sign-extended
            row.value = Cat(self._field(lower, base, split), upper) if split > base else upper
        return row

    def level(self, rows):
        """Add rows in pairs (positive with negative first); an odd row passes through."""
        positive = sorted((r for r in rows if not r.neg), key=lambda r: (r.hi - r.lo, r.lo))
        negative = sorted((r for r in rows if r.neg), key=lambda r: (r.hi - r.lo, r.lo))
        out = []
        while positive and negative:
            out.append(self.add(positive.pop(0), negative.pop(0)))
        rest = positive or negative
        while len(rest) >= 2:
            out.append(self.add(rest.pop(0), rest.pop(0)))
        return out + rest

    def levels(self, rows):
        """The rows after each level, until one row is left (the first entry: ``rows`` merged)."""
        rows = self.merge(rows)
        out = [rows]
        while len(rows) > 1:
            rows = self.merge(self.level(rows))
            out.append(rows)
        return out


def _partial_products(spec, m=None, a=None, b=None, addend=None):
    """The partial-product rows (and the addend row) of a multiplier; expressions only with ``m``."""
    a_width, b_width, mode, constant, addend_width, addend_shift, width = spec
    build = m is not None
    rows = []

    def row(lo, bits, neg, value):
        hi = min(lo + bits, width)
        rows.append(_Row(lo, hi, neg, value[:hi - lo] if build else None))

    if mode == "dsp":
        for i in range(0, a_width, TILE_BITS):
            a_bits = min(TILE_BITS, a_width - i)
            for j in range(0, b_width, TILE_BITS):
                b_bits = min(TILE_BITS, b_width - j)
                if constant is not None:
                    c = (constant >> j) & ((1 << b_bits) - 1)
                    if not c:
                        continue
                    b_bits = c.bit_length()
                product = None
                if build:
                    b_tile = b[j:j + TILE_BITS] if constant is None else Const(c, b_bits)
                    product = Signal(a_bits + b_bits, name=f"tile_{i // TILE_BITS}_{j // TILE_BITS}")
                    m.d.comb += product.eq(a[i:i + TILE_BITS] * b_tile)
                row(i + j, a_bits + b_bits, False, product)
    elif constant is not None:
        for position, digit in csd_digits(constant):
            row(position, a_width, digit < 0, a)
    else:
        # Rows from the narrower operand's bits: fewer rows, wider each.
        wide, narrow = (a, b) if a_width >= b_width else (b, a)
        wide_bits, narrow_bits = max(a_width, b_width), min(a_width, b_width)
        for j in range(narrow_bits):
            row(j, wide_bits, False, wide & narrow[j].replicate(wide_bits) if build else None)
    if addend_width:
        row(addend_shift, addend_width, False, addend)
    return rows


def _spec(a_width, b_width, mode, constant, addend_width, addend_shift):
    b_max = constant if constant is not None else (1 << b_width) - 1
    width = (((1 << a_width) - 1) * b_max + (((1 << addend_width) - 1) << addend_shift)).bit_length()
    return (a_width, b_width, mode, constant, addend_width, addend_shift, width)


def natural_stages(a_width, b_width, *, mode="dsp", constant=None, addend_width=0, addend_shift=0):
    """Register stages of ``Multiplier(...)`` with one multiplier or one carry chain each.

    That is its default ``stages`` (and latency): the tiles (``dsp``) plus the adder levels, or for
    ``lut`` the adder levels alone (at least one stage). Parameters as :class:`Multiplier`'s.
    """
    spec = _spec(a_width, b_width, mode, constant, addend_width, addend_shift)
    levels = len(_Tree(spec[-1]).levels(_partial_products(spec)))
    return levels if mode == "dsp" else max(levels - 1, 1)


class Multiplier(wiring.Component):
    """Unsigned pipelined multiplier: ``p = a * b + (addend << addend_shift)``, exact.

    ``b`` is an input or a constant. Two implementations, same function, same ports:

    * ``mode="dsp"``: the operands are cut into 18-bit tiles and every tile product is written as
      ``*`` (Yosys maps each to one ECP5 ``MULT18X18D``); the first register follows the tiles.
    * ``mode="lut"``: no ``*`` at all, so no DSP is inferred. Partial products are ``a`` masked by
      each bit of the narrower operand, or, for a constant, ``a`` shifted to each digit of the
      constant's canonical signed-digit form (a ``-1`` digit subtracts).

    Then, in both modes, the partial products (and the addend) are summed by a tree of adders. Rows
    whose bit ranges do not overlap are concatenated for free; the others are added in pairs, one
    carry chain per level, so a level is one register stage. The low bits of an adder that only one
    row covers pass around the carry chain.

    Parameters
    ----------
    a_width, b_width : int
        Operand widths (positive). With ``constant`` there is no ``b`` port; ``b_width`` must hold
        the constant.
    mode : ``"dsp"`` or ``"lut"``
        Implementation of the partial products (see above).
    stages : int or None
        Pipeline registers (at least 1). None (default): :attr:`natural_stages`, a register after the
        tiles (``dsp``) and after every adder level: one multiplier or one carry chain per stage.
        Fewer put several steps in a stage (:func:`~rtl.vpu.round_pack.spread_registers`); more delay
        the product.
    constant : int or None
        The value of ``b`` (positive, below ``2**b_width``), or None for a ``b`` input.
    addend_width, addend_shift : int
        Width (0: no ``addend`` port) and left shift of the addend (non-negative).

    Interface attributes
    --------------------
    a : ``In(a_width)``
        Multiplicand.
    b : ``In(b_width)``
        Multiplier (only without ``constant``).
    addend : ``In(addend_width)``
        Added at weight ``2**addend_shift`` (only when ``addend_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    p : ``Out(width)``
        ``a * b + (addend << addend_shift)``, :attr:`latency` enabled cycles after its operands;
        :attr:`width` bits, enough for the largest result.

    Latency and throughput
    ----------------------
    :attr:`latency` = ``stages`` cycles from the operands to ``p``; one product per cycle. The
    output comes straight from a register. No valid signal and no stall logic: the pipeline is a
    fixed delay, frozen by ``en``.
    """

    def __init__(self, a_width, b_width, *, mode="dsp", stages=None, constant=None, addend_width=0,
                 addend_shift=0):
        check_positive_int(self, "a_width", a_width)
        check_positive_int(self, "b_width", b_width)
        check_positive_int(self, "addend_width", addend_width, minimum=0)
        check_positive_int(self, "addend_shift", addend_shift, minimum=0)
        if mode not in MODES:
            raise parameter_error(self, ValueError, f"mode must be one of {MODES}, got {mode!r}")
        if constant is not None and (not isinstance(constant, int) or isinstance(constant, bool)
                                     or not 0 < constant < 1 << b_width):
            raise parameter_error(self, ValueError,
                                  f"constant must be an integer in [1, 2**{b_width}), got {constant!r}")
        self._spec = _spec(a_width, b_width, mode, constant, addend_width, addend_shift)
        self._width = self._spec[-1]
        self._natural = natural_stages(a_width, b_width, mode=mode, constant=constant,
                                       addend_width=addend_width, addend_shift=addend_shift)
        if stages is None:
            stages = self._natural
        check_positive_int(self, "stages", stages)
        self._stages = stages
        ports = {"a": In(a_width), "en": In(1, init=1), "p": Out(self._width)}
        if constant is None:
            ports["b"] = In(b_width)
        if addend_width:
            ports["addend"] = In(addend_width)
        super().__init__(ports)

    a_width = property(lambda self: self._spec[0])
    b_width = property(lambda self: self._spec[1])
    mode = property(lambda self: self._spec[2])
    constant = property(lambda self: self._spec[3])
    addend_width = property(lambda self: self._spec[4])
    addend_shift = property(lambda self: self._spec[5])
    stages = property(lambda self: self._stages)

    @property
    def width(self):
        """Width of ``p``."""
        return self._width

    @property
    def natural_stages(self):
        """Register stages with one multiplier or one carry chain each (the default ``stages``)."""
        return self._natural

    @property
    def latency(self):
        """Cycles from the operands to ``p``."""
        return self._stages

    def elaborate(self, platform):
        m = Module()
        tree = _Tree(self._width, m, "pp")
        rows = tree.merge(_partial_products(
            self._spec, m, self.a, self.b if self.constant is None else None,
            self.addend if self.addend_width else None))
        steps = self._natural
        # Register after step k (k = 0 .. steps - 1) when k is in `cuts`; extra registers at the end.
        cuts, extra = spread_registers([1] * steps, self._stages)
        first = 1 if self.mode == "dsp" else 0        # dsp: step 0 is the tiles, no adder
        register_count = [0]

        def register(rows):
            out = []
            for row in rows:
                reg = Signal(len(row.value), name=f"pp_r{register_count[0]}", reset_less=True)
                register_count[0] += 1
                with m.If(self.en):
                    m.d.sync += reg.eq(row.value)
                out.append(_Row(row.lo, row.hi, row.neg, reg))
            return out

        for step in range(steps):
            if step >= first:
                rows = tree.merge(tree.level(rows))
            if step in cuts:
                rows = register(rows)
        for _ in range(extra):
            rows = register(rows)
        assert len(rows) == 1 and not rows[0].neg
        m.d.comb += self.p.eq(Cat(Const(0, rows[0].lo), rows[0].value) if rows[0].lo else rows[0].value)
        return m
