"""Binary32 multiplier of the vector unit: ``a * b``, correctly rounded, on DSP tiles or in LUTs."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.round_pack import RoundPack, StepPipeline, spread_registers

__all__ = ["Fp32Mul", "MULTIPLIERS"]

MULTIPLIERS = ("dsp", "lut")
"""Implementations of the 24 x 24 significand product (see :class:`Fp32Mul`)."""

_SIG = 24                  # significand bits, implicit bit included
_TILE = 18                 # operand width of one ECP5 MULT18X18D
_PRODUCT = 2 * _SIG
_EXPONENT_WIDTH = 10       # lsb exponent of the product: -298..208


def _unpack(x):
    exp, frac = x[23:31], x[:23]
    normal = exp != 0
    ones = exp == 0xFF
    return {"sign": x[31], "sig": Cat(frac, normal), "be": Mux(normal, exp, 1),
            "nan": ones & (frac != 0), "inf": ones & (frac == 0), "zero": x[:31] == 0}


class Fp32Mul(wiring.Component):
    """IEEE 754 binary32 multiplication, correctly rounded to nearest, ties to even.

    This is :func:`sim_models.vpu._mul_bits` in gates, bit for bit: the exact 48-bit product of
    the significands is rounded once by :class:`~rtl.vpu.round_pack.RoundPack`. Subnormals are
    consumed and produced (never flushed); products that round to ``2**128`` or more give ±Inf; a
    zero factor gives the zero of sign ``sign(a) ^ sign(b)``; an infinite factor gives the infinity
    of that sign; ``Inf * 0`` and any NaN operand give the canonical NaN ``0x7FC00000``.

    The two implementations of the significand product are bit-identical:

    * ``"dsp"``: four products written as ``*`` on 18-bit tiles of the significands (18 x 18,
      18 x 6, 6 x 18, 6 x 6), which Yosys maps to ECP5 ``MULT18X18D`` blocks, then two additions in
      LUTs (the two middle products, then the sum), each in a step of its own;
    * ``"lut"``: no ``*`` at all, so no DSP block is inferred (for a tile whose MAC array has taken
      the ``MULT18X18D`` blocks): 24 partial products ``Mux(b[i], a, 0) << i`` summed by a binary
      tree of five levels of carry-chain adders, one step per level.

    Parameters
    ----------
    stages : int or None
        Pipeline registers from the operands to ``result`` (at least 1), spread by logic depth over
        the multiplier's steps and the five of :class:`~rtl.vpu.round_pack.RoundPack`; more
        registers than steps delay the result. None (default): :attr:`DEFAULT_STAGES`, 8 for both
        multipliers, so that either can replace the other (and the adder, also 8) in a lane's
        schedule.
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the significand product (default ``"dsp"``).

    Interface attributes
    --------------------
    a, b : ``In(32)``
        Binary32 bit patterns of the operands.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bit pattern of the product, :attr:`latency` enabled cycles after its operands.

    Latency and throughput
    ----------------------
    :attr:`latency` ``= stages`` cycles; one operation per cycle. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``.
    """

    DEFAULT_STAGES = {"dsp": 8, "lut": 8}
    STEPS = {"dsp": ("unpack", "multiply", "sum_middle", "sum"),
             "lut": ("unpack", "level1", "level2", "level3", "level4", "level5")}
    WEIGHTS = {"dsp": (3, 8, 3, 4), "lut": (3, 4, 4, 4, 4, 4)}

    def __init__(self, stages=None, multiplier="dsp"):
        if multiplier not in MULTIPLIERS:
            raise parameter_error(self, ValueError,
                                  f"multiplier must be one of {MULTIPLIERS}, got {multiplier!r}")
        if stages is None:
            stages = self.DEFAULT_STAGES[multiplier]
        check_positive_int(self, "stages", stages)
        self._stages = stages
        self._multiplier = multiplier
        super().__init__({
            "a": In(32),
            "b": In(32),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def stages(self):
        return self._stages

    @property
    def multiplier(self):
        return self._multiplier

    @property
    def latency(self):
        """Cycles from the operands to ``result`` (equal to ``stages``)."""
        return self._stages

    def _split(self):
        """(registers in the multiplier's own steps, stages of its RoundPack)."""
        own = self.WEIGHTS[self._multiplier]
        cuts, _ = spread_registers(own + RoundPack.weights(_PRODUCT), self._stages)
        front = len([c for c in cuts if c < len(own)])
        return front, self._stages - front

    def elaborate(self, platform):
        m = Module()
        front, back = self._split()
        pipe = StepPipeline(m, self.en, self.WEIGHTS[self._multiplier], front, prefix="mul_")

        def wire(width, value, name):
            sig = Signal(width, name=name)
            m.d.comb += sig.eq(value)
            return sig

        # ---- step 0: unpack; exponent of the product's lsb; special results ----------------------
        ua, ub = _unpack(self.a), _unpack(self.b)
        flags = {
            "sign": ua["sign"] ^ ub["sign"],
            "nan": ua["nan"] | ub["nan"] | (ua["inf"] & ub["zero"]) | (ua["zero"] & ub["inf"]),
            "inf": ua["inf"] | ub["inf"],
            "exponent": ua["be"] + ub["be"] - 300,      # (be_a - 150) + (be_b - 150)
        }
        v = pipe.step(0, {**flags, "a_sig": ua["sig"], "b_sig": ub["sig"]})
        a_sig, b_sig = v["a_sig"], v["b_sig"]
        flags = {k: v[k] for k in flags}

        if self._multiplier == "dsp":
            # ---- step 1: four tile products (one MULT18X18D each) --------------------------------
            a_lo, a_hi = a_sig[:_TILE], a_sig[_TILE:]
            b_lo, b_hi = b_sig[:_TILE], b_sig[_TILE:]
            v = pipe.step(1, {**flags, "ll": a_lo * b_lo, "lh": a_lo * b_hi, "hl": a_hi * b_lo,
                              "hh": a_hi * b_hi})
            flags = {k: v[k] for k in flags}
            # ---- step 2: the two middle products; ll and hh do not overlap ----------------------
            v = pipe.step(2, {**flags, "outer": Cat(v["ll"], v["hh"]), "middle": v["lh"] + v["hl"]})
            flags = {k: v[k] for k in flags}
            # ---- step 3: outer + (middle << 18) -------------------------------------------------
            outer = v["outer"]
            product = Cat(outer[:_TILE], outer[_TILE:] + v["middle"])
            v = pipe.step(3, {**flags, "product": wire(_PRODUCT, product, "mul_product")})
        else:
            # ---- steps 1..5: partial products summed by a binary tree of adders ------------------
            # A row is (value, offset, largest value): row i is Mux(b[i], a, 0) at offset i. Two
            # neighbours add as Cat(low bits of the first, its high bits + the second), so every
            # adder is only as wide as the rows overlap, and never wider than its largest sum.
            rows = [(Mux(b_sig[i], a_sig, 0), i, (1 << _SIG) - 1) for i in range(_SIG)]
            level = 0
            while len(rows) > 1:
                level += 1
                summed = []
                for (v1, o1, max1), (v2, o2, max2) in zip(rows[0::2], rows[1::2], strict=False):
                    shift = o2 - o1
                    biggest = max1 + (max2 << shift)
                    summed.append((Cat(v1[:shift], v1[shift:] + v2)[:biggest.bit_length()], o1, biggest))
                if len(rows) % 2:
                    summed.append(rows[-1])
                values = pipe.step(level, {**flags, **{f"row{i}": row[0] for i, row in enumerate(summed)}})
                flags = {k: values[k] for k in flags}
                rows = [(values[f"row{i}"], o, biggest) for i, (_, o, biggest) in enumerate(summed)]
            assert level == len(self.STEPS["lut"]) - 1 and rows[0][1] == 0
            v = {**flags, "product": wire(_PRODUCT, rows[0][0], "mul_product")}

        # ---- RoundPack: normalize, round, pack ---------------------------------------------------
        m.submodules.round_pack = rp = RoundPack(_PRODUCT, _EXPONENT_WIDTH, stages=back)
        m.d.comb += [
            rp.sign.eq(v["sign"]),
            rp.magnitude.eq(v["product"]),
            rp.exponent.eq(v["exponent"]),
            rp.nan.eq(v["nan"]),
            rp.inf.eq(v["inf"]),
            rp.en.eq(self.en),
            self.result.eq(rp.result),
        ]
        return m
