"""Final rounding of every vector-unit result: an exact ``magnitude * 2**exponent`` to binary32 (RNE).

Also the small pipeline helpers the vector unit's arithmetic units share: :func:`spread_registers`
places a given number of pipeline registers over a list of weighted steps, :class:`StepPipeline`
inserts them (with a clock enable) while the datapath is written step by step, and
:func:`delay_line` delays a value beside a pipeline.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.mx.fp32_accumulate import leading_zeros

__all__ = ["RoundPack", "StepPipeline", "spread_registers", "delay_line", "QNAN"]

QNAN = 0x7FC0_0000
"""The canonical quiet NaN, the only NaN the vector unit produces."""
_INF_31 = 0x7F80_0000           # exponent field all ones, fraction zero (bits 30..0 of +-Inf)
_WINDOW = 26                    # 24 significand bits, a guard bit, and room to shift right by 26


def delay_line(m, value, cycles, name):
    """``value`` delayed by ``cycles`` clock cycles through registers without reset (a fixed delay
    beside a pipeline: what it carries is never observed before it arrives)."""
    for index in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{index}", reset_less=True)
        m.d.sync += reg.eq(value)
        value = reg
    return value


def spread_registers(weights, stages):
    """Choose which steps of a datapath are followed by a pipeline register.

    Parameters
    ----------
    weights : sequence of int
        Rough logic depth of each step, in order (a carry chain counting as a few LUT levels).
    stages : int
        Pipeline registers wanted (0 or more).

    Returns
    -------
    cuts : frozenset of int
        Indices of the steps followed by a register: exactly ``min(stages, len(weights))`` of them,
        the last step always among them when ``stages >= 1``, placed so that the heaviest group of
        steps between two registers is as light as possible.
    extra : int
        Registers beyond one per step (``stages - len(weights)`` or 0), to be added at the end.
    """
    steps = len(weights)
    if stages <= 0:
        return frozenset(), 0
    if stages >= steps:
        return frozenset(range(steps)), stages - steps
    prefix = [0]
    for weight in weights:
        prefix.append(prefix[-1] + weight)
    # best[k][i]: lightest possible heaviest group when steps[:i] form k groups; back[k][i] the start
    # of the last of those groups. Ties keep the earliest split, so the result is deterministic.
    never = prefix[-1] + 1
    best = [[never] * (steps + 1) for _ in range(stages + 1)]
    back = [[0] * (steps + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, steps + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], back[k][i] = cost, j
    cuts, i = set(), steps
    for k in range(stages, 0, -1):
        cuts.add(i - 1)
        i = back[k][i]
    return frozenset(cuts), 0


class StepPipeline:
    """Pipeline registers over a datapath written as a sequence of steps.

    Each step computes a dict of named values from the previous step's dict; :meth:`step` returns it
    unchanged, or registered (behind the clock enable ``en``) when :func:`spread_registers` placed a
    register after that step. Registers have no reset: the pipeline is a fixed delay, and values
    that have not reached the output yet are never observed.

    Parameters
    ----------
    m : Module
        The module the registers are added to.
    en : Value
        Clock enable of every register.
    weights : sequence of int
        Logic depth of each step (see :func:`spread_registers`).
    stages : int
        Registers to place (0: purely combinational).
    prefix : str
        Prefix of the register names, to tell pipelines apart in waveforms and Verilog.
    """

    def __init__(self, m, en, weights, stages, prefix=""):
        self._m = m
        self._en = en
        self._cuts, self._extra = spread_registers(weights, stages)
        self._prefix = prefix
        self._count = 0

    @property
    def registers(self):
        """Registers on the path from the first step's inputs to the last step's outputs."""
        return len(self._cuts) + self._extra

    def register(self, values):
        """Register every value of ``values`` (a dict) behind the clock enable; return the registers."""
        out = {}
        for key, value in values.items():
            reg = Signal(value.shape(), name=f"{self._prefix}{key}_r{self._count}", reset_less=True)
            with self._m.If(self._en):
                self._m.d.sync += reg.eq(value)
            out[key] = reg
        self._count += 1
        return out

    def step(self, index, values):
        """The values computed by step ``index``, registered if a register follows that step."""
        return self.register(values) if index in self._cuts else values

    def finish(self, values):
        """The last step's values after the extra registers (when ``stages`` exceeds the steps)."""
        for _ in range(self._extra):
            values = self.register(values)
        return values


def _wire(m, shape, value, name):
    sig = Signal(shape, name=name)
    m.d.comb += sig.eq(value)
    return sig


class RoundPack(wiring.Component):
    """Round an exact ``(-1)**sign * magnitude * 2**exponent`` once to binary32 (nearest, ties to even).

    This is :func:`sim_models.fp32.encode_rne` in gates, bit for bit: results below the normal
    range are rounded on the subnormal grid (``2**-149``) and never flushed; exact magnitudes of
    ``2**128 - 2**103`` or more give ±Inf; ``magnitude == 0`` gives the zero of sign ``sign``; a
    non-zero value that rounds to zero keeps its sign. Two optional flags let a caller substitute
    the special results it has decided itself, so that they travel down the same pipeline: ``nan``
    gives the canonical NaN ``0x7FC00000``, ``inf`` the infinity of sign ``sign``.

    Every function of the vector unit ends with this rounding (adder, multiplier, divider,
    exponential, square root), each with its own magnitude and exponent widths.

    Datapath. The leading zeros of the magnitude give the biased exponent the result would have if
    normalized; a single left shift then places the magnitude in a window of 24 significand bits,
    a guard bit and a sticky part: by the leading-zero count (a normal result), by less (the shift
    stops at the subnormal grid), or by less than nothing (a right shift of up to 26 places, for
    values far below the normal range, expressed as a smaller left shift of a field 26 bits wider
    than the magnitude). Rounding and packing are one addition, ``((be - 1) << 23) + significand +
    round``, which also carries into the next binade and across the subnormal/normal boundary.

    Parameters
    ----------
    magnitude_width : int
        Width of ``magnitude`` (at least 1).
    exponent_width : int
        Width of the signed ``exponent`` (at least 1).
    stages : int
        Pipeline registers from the inputs to ``result`` (0 or more, default 5). Up to five they are
        spread over the five steps (leading zeros, shift amount, coarse shift, fine shift and
        sticky bit, round and pack) by logic depth; more delay the result; 0 gives a purely
        combinational unit, for a caller that registers it itself.

    Interface attributes
    --------------------
    sign : ``In(1)``
        Sign of the exact value (and of the zero or infinity returned for it).
    magnitude : ``In(magnitude_width)``
        Unsigned magnitude, an integer.
    exponent : ``In(signed(exponent_width))``
        Weight of the magnitude's least significant bit: the value is ``magnitude * 2**exponent``.
    nan : ``In(1)``, default 0
        Return the canonical NaN ``0x7FC00000`` instead (takes precedence over ``inf``).
    inf : ``In(1)``, default 0
        Return the infinity of sign ``sign`` instead.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bits of the rounded value, ``stages`` enabled cycles after the inputs.

    Latency and throughput
    ----------------------
    :attr:`latency` ``= stages`` cycles; one operation per cycle. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``.
    """

    DEFAULT_STAGES = 5
    STEPS = ("count", "amount", "shift_coarse", "shift_fine", "pack")
    FINE_SHIFT_BITS = 2        # shift-amount bits handled in the "shift_fine" step

    def __init__(self, magnitude_width, exponent_width, stages=DEFAULT_STAGES):
        check_positive_int(self, "magnitude_width", magnitude_width)
        check_positive_int(self, "exponent_width", exponent_width)
        check_positive_int(self, "stages", stages, minimum=0)
        self._magnitude_width = magnitude_width
        self._exponent_width = exponent_width
        self._stages = stages
        super().__init__({
            "sign": In(1),
            "magnitude": In(magnitude_width),
            "exponent": In(signed(exponent_width)),
            "nan": In(1),
            "inf": In(1),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def magnitude_width(self):
        return self._magnitude_width

    @property
    def exponent_width(self):
        return self._exponent_width

    @property
    def stages(self):
        return self._stages

    @property
    def latency(self):
        """Cycles from the inputs to ``result`` (equal to ``stages``)."""
        return self._stages

    @classmethod
    def weights(cls, magnitude_width):
        """Rough logic depth of each of the :attr:`STEPS` for a given magnitude width."""
        field = magnitude_width + _WINDOW
        shift_bits = field.bit_length()
        coarse = max(shift_bits - cls.FINE_SHIFT_BITS, 1)
        sticky_levels = max(1, -(-(magnitude_width + 1).bit_length() // 2))   # LUT4 OR tree
        return (max(3, (magnitude_width - 1).bit_length()), 4, coarse,
                cls.FINE_SHIFT_BITS + sticky_levels, 5)

    def elaborate(self, platform):
        m = Module()
        width = self._magnitude_width
        field = width + _WINDOW
        pipe = StepPipeline(m, self.en, self.weights(width), self._stages, prefix="rp_")
        flags = ("sign", "nan", "inf")

        # ---- step 0: leading zeros; biased exponent (minus one) of the top magnitude bit ---------
        # value = magnitude * 2**exponent; bit width-1 of the magnitude weighs 2**(exponent+width-1),
        # which is the leading bit of a normal number of biased exponent be0 = exponent+width+126.
        v = pipe.step(0, {
            "sign": self.sign, "nan": self.nan, "inf": self.inf,
            "mag": self.magnitude,
            "lz": leading_zeros(m, self.magnitude, "rp_lz"),
            "em1": self.exponent + (width + 125),                  # be0 - 1
            "em1_26": self.exponent + (width + 125 + _WINDOW),     # be0 - 1 + 26
        })

        # ---- step 1: shift amount and exponent field ---------------------------------------------
        # The magnitude sits at the bottom of a field `width + 26` bits wide; it is shifted left by
        # `shift` and the window is the field's top 25 bits (24 significand bits and the guard bit),
        # the bits below being sticky. shift = 26 + lz normalizes (the result's biased exponent is
        # then be = be0 - lz >= 1). Below the normal range the shift stops at biased exponent 1:
        # 26 + be0 - 1, less than 26 (in effect a right shift) when be0 < 1, and clamped at 0: a
        # right shift of 26 or more leaves the magnitude's top bit (weight 2**-151 or less) below the
        # guard bit, so the value rounds to zero, as it must.
        lz = v["lz"]
        t = _wire(m, signed(len(v["em1"]) + 1), v["em1"] - lz, "rp_t")    # be - 1 if normal
        normal = t >= 0
        zero = lz == width
        below = v["em1_26"]
        shift = Mux(normal, lz + _WINDOW, Mux(below < 0, 0, below[:field.bit_length()]))
        v = pipe.step(1, {
            **{k: v[k] for k in flags},
            "mag": v["mag"],
            "shift": _wire(m, range(field + 1), shift, "rp_shift"),
            # exponent field before the significand is added (0 for subnormals and for zero)
            "be_m1": _wire(m, len(t) - 1, Mux(normal & ~zero, t, 0), "rp_be_m1"),   # t >= 0 here
        })

        # ---- step 2: coarse left shift -------------------------------------------------------------
        fine = self.FINE_SHIFT_BITS
        shift = v["shift"]
        y = _wire(m, field, v["mag"], "rp_field")
        for k in range(fine, len(shift)):
            y = _wire(m, field, Mux(shift[k], y << (1 << k), y), f"rp_shl{k}")
        v = pipe.step(2, {
            **{k: v[k] for k in flags},
            "field": y, "shift_lo": shift[:fine],
            "be_m1": v["be_m1"][:8], "big": v["be_m1"] >= 0xFE,      # be >= 255: overflow anyway
        })

        # ---- step 3: fine left shift; significand, guard, sticky, rounding decision ---------------
        y = v["field"]
        for k in range(fine):
            y = _wire(m, field, Mux(v["shift_lo"][k], y << (1 << k), y), f"rp_shl{k}")
        sig = y[field - 24:field]
        guard = y[field - 25]
        sticky = y[:field - 25] != 0
        v = pipe.step(3, {
            **{k: v[k] for k in flags},
            "sig": sig, "round_up": guard & (sticky | sig[0]),
            "be_m1": v["be_m1"], "big": v["big"],
        })

        # ---- step 4: round and pack in one addition; overflow and special results -----------------
        # ((be - 1) << 23) + significand (implicit bit included) + round: a subnormal (implicit bit 0)
        # keeps exponent field 0, a carry out of the significand bumps the exponent. With be - 1 <= 253
        # the sum is at most 0x7F800000, +Inf's pattern exactly.
        packed = _wire(m, 32, Cat(Const(0, 23), v["be_m1"]) + v["sig"] + v["round_up"], "rp_packed")
        result = Signal(32, name="rp_result")
        with m.If(v["nan"]):
            m.d.comb += result.eq(QNAN)
        with m.Elif(v["inf"] | v["big"]):
            m.d.comb += result.eq(Cat(Const(_INF_31, 31), v["sign"]))
        with m.Else():
            m.d.comb += result.eq(Cat(packed[:31], v["sign"]))
        v = pipe.finish(pipe.step(4, {"result": result}))
        m.d.comb += self.result.eq(v["result"])
        return m
