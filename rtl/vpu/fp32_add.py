"""Binary32 adder/subtracter of the vector unit: ``a + b`` or ``a - b``, correctly rounded."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.vpu.round_pack import RoundPack, StepPipeline, spread_registers

__all__ = ["Fp32Add"]

_MAGNITUDE_WIDTH = 28      # carry, 24 significand bits of the larger operand, guard, round, sticky
_EXPONENT_WIDTH = 9        # lsb exponent of the sum: -152..101
_WINDOW = 27               # the smaller operand: 24 significand bits, guard, round, sticky


def _unpack(x):
    """Fields of a binary32 pattern: sign, 24-bit significand, biased exponent (1 for subnormals)."""
    exp, frac = x[23:31], x[:23]
    normal = exp != 0
    ones = exp == 0xFF
    return {"sign": x[31], "sig": Cat(frac, normal), "be": Mux(normal, exp, 1),
            "nan": ones & (frac != 0), "inf": ones & (frac == 0)}


class Fp32Add(wiring.Component):
    """IEEE 754 binary32 addition (or subtraction), correctly rounded to nearest, ties to even.

    This is :func:`sim_models.vpu._add_bits` in gates, bit for bit (``_add_bits(a, b ^ 0x80000000)``
    with ``subtract`` high): subnormals are consumed and produced (never flushed); a sum that
    rounds to ``2**128`` or more gives ±Inf; an exact zero sum is +0 except ``(-0) + (-0) = -0``
    (so ``x - x = +0`` and ``(-0) - (+0) = -0``); a non-zero sum that rounds to zero keeps its
    sign; an infinite operand is returned unchanged (``Inf + finite``, ``Inf + Inf``), ``Inf - Inf``
    and any NaN operand give the canonical NaN ``0x7FC00000``. Subtraction flips the sign of ``b``
    first, so a NaN ``b`` stays a NaN.

    Datapath: a single-path adder. The operands are ordered by magnitude (one 31-bit comparison of
    the patterns), so the larger one X is never smaller than the other, Y. Y is aligned right by the
    difference of the exponents in a 27-bit window (24 bits, guard, round, sticky; everything
    shifted out is ORed into the sticky bit), added to or subtracted from X (never negative), and the
    28-bit magnitude is normalized, rounded and packed by :class:`~rtl.vpu.round_pack.RoundPack`
    (which also carries the NaN and infinity results down its pipeline).

    Parameters
    ----------
    stages : int
        Pipeline registers from the operands to ``result`` (at least 1, default 8), spread by logic
        depth over the four steps of the adder (compare, select, align, add) and the five of
        :class:`~rtl.vpu.round_pack.RoundPack`; more than nine delay the result.

    Interface attributes
    --------------------
    a, b : ``In(32)``
        Binary32 bit patterns of the operands.
    subtract : ``In(1)``
        Compute ``a - b`` instead of ``a + b``.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bit pattern of the result, :attr:`latency` enabled cycles after its operands.

    Latency and throughput
    ----------------------
    :attr:`latency` ``= stages`` cycles; one operation per cycle. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``.
    """

    DEFAULT_STAGES = 8
    STEPS = ("compare", "select", "align", "add")
    WEIGHTS = (4, 3, 5, 4)

    def __init__(self, stages=DEFAULT_STAGES):
        check_positive_int(self, "stages", stages)
        self._stages = stages
        super().__init__({
            "a": In(32),
            "b": In(32),
            "subtract": In(1),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def stages(self):
        return self._stages

    @property
    def latency(self):
        """Cycles from the operands to ``result`` (equal to ``stages``)."""
        return self._stages

    def _split(self):
        """(registers in the adder's own steps, stages of its RoundPack)."""
        weights = self.WEIGHTS + RoundPack.weights(_MAGNITUDE_WIDTH)
        cuts, extra = spread_registers(weights, self._stages)
        front = len([c for c in cuts if c < len(self.WEIGHTS)])
        return front, self._stages - front

    def elaborate(self, platform):
        m = Module()
        front, back = self._split()
        pipe = StepPipeline(m, self.en, self.WEIGHTS, front, prefix="add_")

        def wire(shape, value, name):
            sig = Signal(shape, name=name)
            m.d.comb += sig.eq(value)
            return sig

        # ---- step 0: unpack, order by magnitude, both exponent differences -----------------------
        a = self.a
        b = Cat(self.b[:31], self.b[31] ^ self.subtract)
        ua, ub = _unpack(a), _unpack(b)
        v = pipe.step(0, {
            "a_sign": ua["sign"], "a_sig": ua["sig"], "a_be": ua["be"],
            "b_sign": ub["sign"], "b_sig": ub["sig"], "b_be": ub["be"],
            # |b| > |a|: the bit patterns without sign order the magnitudes (subnormals included)
            "swap": b[:31] > a[:31],
            "equal": b[:31] == a[:31],
            "d_ab": ua["be"] - ub["be"], "d_ba": ub["be"] - ua["be"],
            "nan": ua["nan"] | ub["nan"] | (ua["inf"] & ub["inf"] & (ua["sign"] ^ ub["sign"])),
            "inf": ua["inf"] | ub["inf"],
            "inf_sign": Mux(ua["inf"], ua["sign"], ub["sign"]),
        })

        # ---- step 1: X the larger operand, Y the other; alignment shift --------------------------
        swap = v["swap"]
        d = Mux(swap, v["d_ba"], v["d_ab"])                      # 0..253
        sub = v["a_sign"] ^ v["b_sign"]
        x_sign = Mux(swap, v["b_sign"], v["a_sign"])
        x_be = Mux(swap, v["b_be"], v["a_be"])
        # An exact zero (X - Y with |X| = |Y|) is +0; equal magnitudes and equal signs give 2X (or
        # -0 + -0 = -0): the sign of X.
        v = pipe.step(1, {
            "nan": v["nan"], "inf": v["inf"],
            "sign": Mux(v["inf"], v["inf_sign"], x_sign & ~(sub & v["equal"])),
            "sub": sub,
            "x_sig": Mux(swap, v["b_sig"], v["a_sig"]),
            "y_sig": Mux(swap, v["a_sig"], v["b_sig"]),
            # 27 or more moves all of Y into the sticky bit; 31 stands for every larger difference.
            "shift": wire(5, Mux(d[5:8] != 0, 31, d[:5]), "add_shift"),
            "exponent": x_be - 153,                              # weight of the window's bit 0
        })

        # ---- step 2: align Y right, with a sticky bit --------------------------------------------
        y = Cat(Const(0, 3), v["y_sig"])
        sticky = Const(0, 1)
        for k in range(5):
            amount = 1 << k
            sticky = Mux(v["shift"][k], sticky | (y[:amount] != 0), sticky)
            y = wire(unsigned(_WINDOW), Mux(v["shift"][k], y >> amount, y), f"add_align{k}")
        v = pipe.step(2, {
            "nan": v["nan"], "inf": v["inf"], "sign": v["sign"], "sub": v["sub"],
            "x_sig": v["x_sig"], "y": y | sticky, "exponent": v["exponent"],
        })

        # ---- step 3: add or subtract; |X| >= |Y| so the difference is never negative --------------
        x = Cat(Const(0, 3), v["x_sig"])
        total = Mux(v["sub"], x - v["y"], x + v["y"])
        v = pipe.step(3, {
            "nan": v["nan"], "inf": v["inf"], "sign": v["sign"],
            "magnitude": wire(_MAGNITUDE_WIDTH, total, "add_magnitude"),
            "exponent": v["exponent"],
        })

        # ---- steps 4..8: normalize, round, pack --------------------------------------------------
        m.submodules.round_pack = rp = RoundPack(_MAGNITUDE_WIDTH, _EXPONENT_WIDTH, stages=back)
        m.d.comb += [
            rp.sign.eq(v["sign"]),
            rp.magnitude.eq(v["magnitude"]),
            rp.exponent.eq(v["exponent"]),
            rp.nan.eq(v["nan"]),
            rp.inf.eq(v["inf"]),
            rp.en.eq(self.en),
            self.result.eq(rp.result),
        ]
        return m
