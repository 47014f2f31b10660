"""Binary32 fused multiply-add of the vector unit: ``a * b + c``, rounded once."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.multiplier import MODES, Multiplier
from rtl.vpu.round_pack import RoundPack, StepPipeline

__all__ = ["Fp32Fma"]

# The window, in units of its bit 0 (the sticky position). The normalized 48-bit product sits at bits
# 1..48 (_PRODUCT_LSB); the addend's 24 bits at most at bits 51..74 (_ADDEND_TOP_LSB). Once the
# addend's lsb is more than 50 places above the product's, the product lies three or more places
# below it, under the guard bit of any result, and only counts as a sticky bit (see the class
# docstring): the addend never needs to go higher.
_PRODUCT_LSB = 1
_ADDEND_TOP_LSB = _PRODUCT_LSB + 48 + 2                       # 51
_FIELD = _ADDEND_TOP_LSB + 24                                  # 75 bits: sticky, product, addend
_MAGNITUDE_WIDTH = _FIELD + 1                                  # 76: one more for the carry of a sum
_EXPONENT_WIDTH = 10                                           # weight of bit 0: -347..207
_SHIFT_BITS = 7                                                # right shifts 0..127 (75+ clears it)


def _unpack(x):
    """Fields of a binary32 pattern: sign, 24-bit significand, biased exponent (1 for subnormals)."""
    exp, frac = x[23:31], x[:23]
    normal = exp != 0
    ones = exp == 0xFF
    return {"sign": x[31], "sig": Cat(frac, normal), "be": Mux(normal, exp, 1),
            "nan": ones & (frac != 0), "inf": ones & (frac == 0), "zero": x[:31] == 0}


class Fp32Fma(wiring.Component):
    """IEEE 754 binary32 fused multiply-add: ``a * b + c`` rounded once, to nearest, ties to even.

    This is :func:`sim_models.vpu._fma_scalar` in gates, bit for bit: subnormals are consumed and
    produced (never flushed); an exact result that rounds to ``2**128`` or more gives ±Inf; an exact
    zero is ``-0`` only when ``a * b`` and ``c`` are both zeros and both negative, ``+0`` otherwise
    (so ``x * 1 + (-x) = +0``); an inexact result that rounds to zero keeps its sign; an infinite
    product (or an infinite ``c``) gives that infinity; any NaN operand, ``0 * Inf`` and
    ``Inf - Inf`` give the canonical NaN ``0x7FC00000``. With ``c = -0`` it is the binary32
    multiplication, with ``b = 1`` the addition.

    Datapath. The significands of ``a`` and ``b`` are normalized first (subnormal operands: a
    leading-zero count and a left shift, the exponent going below the binary32 range), so the exact
    48-bit product ``P`` of the :class:`~rtl.vpu.multiplier.Multiplier` always lies in
    ``[2**46, 2**48)``. While it is formed, ``c`` is aligned against it in a 75-bit window: the
    product sits at bits 1..48, ``c``'s significand is shifted right from bits 51..74 by the
    exponent difference, and everything that falls below bit 1 is ORed into bit 0, the sticky bit
    (counted from ``c``'s trailing zeros, not from the shifted-out bits). ``c`` never goes higher:
    when its lsb is more than 50 places above the product's, the product is replaced by a sticky
    1 at bit 0 (a zero product by nothing, and ``c`` stays at the top). Both sums ``P ± c`` and
    ``c - P`` are formed, the one that is non-negative is the magnitude, and
    :class:`~rtl.vpu.round_pack.RoundPack` normalizes, rounds and packs it (also carrying the NaN and
    infinity results).

    The sticky bit is exact-equivalent to the exact sum: whenever it is set, the bits above it are
    an even number of window units away from the exact value by less than 2 units, and the result's
    guard bit is at bit 1 or higher (``c`` below the window: the sum exceeds ``2**46``, its guard
    bit is at bit 22 or higher; product below the window: the result's guard bit is at bit 49 or
    higher, at most one binade below ``c``'s lsb, or at ``2**-150`` for a subnormal or zero ``c``),
    so the exact and the jammed values lie strictly between the same two half-ulp points and round
    alike. An exact zero is detected as a zero window: a set sticky bit is never cancelled.

    Parameters
    ----------
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the 24 x 24 significand product (:class:`~rtl.vpu.multiplier.Multiplier`
        modes): ``"dsp"`` (default) writes ``*`` on 18-bit tiles, four ECP5 ``MULT18X18D``;
        ``"lut"`` adds shift-and-add partial products in LUTs, no DSP inferred.

    Interface attributes
    --------------------
    a, b, c : ``In(32)``
        Binary32 bit patterns of the operands.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bit pattern of ``a * b + c``, :attr:`latency` enabled cycles after its operands.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles (13 with ``"dsp"``, 15 with ``"lut"``): one for the operands' register,
    two for unpacking and normalizing, the multiplier's (alignment runs beside it), two for the
    addition and the choice of the magnitude, five in :class:`~rtl.vpu.round_pack.RoundPack`. The
    operands' register gives whatever selects them (the lane's operation multiplexer) a cycle of its
    own instead of a share of the unpacking's (leading-zero counts and special-value tests, the
    deepest logic of the FMA). One operation per cycle. No valid
    signal and no stall logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    INPUT_STAGES = 1
    FRONT_STEPS = ("unpack", "normalize")
    ALIGN_STEPS = ("classify", "shift_coarse", "shift_fine")
    ALIGN_WEIGHTS = (3, 4, 4)
    BACK_STEPS = ("add", "select")
    ROUND_STAGES = RoundPack.DEFAULT_STAGES

    def __init__(self, *, multiplier="dsp"):
        if multiplier not in MODES:
            raise parameter_error(self, ValueError,
                                  f"multiplier must be one of {MODES}, got {multiplier!r}")
        self._multiplier = multiplier
        self._product = Multiplier(24, 24, mode=multiplier)
        super().__init__({
            "a": In(32),
            "b": In(32),
            "c": In(32),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def multiplier(self):
        return self._multiplier

    @property
    def latency(self):
        """Cycles from the operands to ``result``."""
        return (self.INPUT_STAGES + len(self.FRONT_STEPS) + self._product.latency + len(self.BACK_STEPS)
                + self.ROUND_STAGES)

    def elaborate(self, platform):
        m = Module()

        def wire(shape, value, name):
            sig = Signal(shape, name=name)
            m.d.comb += sig.eq(value)
            return sig

        # ---- the operands, registered: whatever selects them (the lane's operation multiplexer)
        # gets a cycle of its own, not a share of the unpacking's ----------------------------------
        operands = StepPipeline(m, self.en, (1,), self.INPUT_STAGES, prefix="fma_in_")
        ops = operands.finish(operands.step(0, {"a": self.a, "b": self.b, "c": self.c}))

        front = StepPipeline(m, self.en, (5, 5), len(self.FRONT_STEPS), prefix="fma_")

        # ---- front step 0: unpack; leading zeros of a and b, trailing zeros of c; specials --------
        ua, ub, uc = _unpack(ops["a"]), _unpack(ops["b"]), _unpack(ops["c"])
        sp = ua["sign"] ^ ub["sign"]
        p_inf = ua["inf"] | ub["inf"]
        nan = (ua["nan"] | ub["nan"] | uc["nan"]
               | (ua["inf"] & ub["zero"]) | (ub["inf"] & ua["zero"])          # 0 * Inf
               | (p_inf & uc["inf"] & (uc["sign"] != sp)))                    # Inf - Inf
        be_ab = ua["be"] + ub["be"]
        v = front.step(0, {
            "sp": sp, "sc": uc["sign"],
            "nan": nan, "inf": p_inf | uc["inf"], "inf_sign": Mux(p_inf, sp, uc["sign"]),
            "p_zero": ua["zero"] | ub["zero"],
            "sig_a": ua["sig"], "sig_b": ub["sig"], "sig_c": uc["sig"], "c_zero": uc["zero"],
            "lz_a": leading_zeros(m, ua["sig"], "fma_lz_a"),
            "lz_b": leading_zeros(m, ub["sig"], "fma_lz_b"),
            "tz_c": leading_zeros(m, uc["sig"][::-1], "fma_tz_c"),
            # Lsb exponents: a, b, c weigh 2**(be - 150); the window's bit 0 weighs 2**(ep - 1)
            # for the product's lsb exponent ep = be_a + be_b - 300 - lz_a - lz_b, or 2**(ec - 51)
            # with c at the top. r = 50 - (ec - ep) is c's right shift from the top of the window.
            "r0": wire(signed(_EXPONENT_WIDTH + 1), be_ab - uc["be"] - 100, "fma_r0"),
            "e0": wire(signed(_EXPONENT_WIDTH + 1), be_ab - 300, "fma_e0"),
            "ec0": wire(signed(_EXPONENT_WIDTH), uc["be"] - (150 + _ADDEND_TOP_LSB), "fma_ec0"),
        })

        # ---- front step 1: normalize a and b; c's shift and the window's exponent ----------------
        lzs = v["lz_a"] + v["lz_b"]
        v = front.step(1, {
            **{k: v[k] for k in ("sp", "sc", "nan", "inf", "inf_sign", "p_zero", "sig_c", "c_zero",
                                 "tz_c", "ec0")},
            "na": wire(24, v["sig_a"] << v["lz_a"], "fma_na"),
            "nb": wire(24, v["sig_b"] << v["lz_b"], "fma_nb"),
            "r": wire(signed(_EXPONENT_WIDTH + 1), v["r0"] - lzs, "fma_r"),          # -400..409
            "ep": wire(signed(_EXPONENT_WIDTH), v["e0"] - lzs, "fma_ep"),            # -344..208
        })

        # ---- the product, and beside it the alignment of c ---------------------------------------
        m.submodules.product = product = self._product
        m.d.comb += [product.a.eq(v["na"]), product.b.eq(v["nb"]), product.en.eq(self.en)]
        align = StepPipeline(m, self.en, self.ALIGN_WEIGHTS, product.latency, prefix="fma_al_")
        flags = ("sp", "sc", "nan", "inf", "inf_sign")

        # align step 0: the shift amount, clamped; which anchor the window has
        r = v["r"]
        top = (r < 0) | v["p_zero"]                      # c at the top of the window
        far = ~top & (r[_SHIFT_BITS:] != 0)              # r >= 128: all of c is sticky
        shift = wire(_SHIFT_BITS, Mux(top, 0, Mux(far, (1 << _SHIFT_BITS) - 1, r[:_SHIFT_BITS])),
                     "fma_shift")
        v = align.step(0, {
            **{k: v[k] for k in flags},
            "shift": shift,
            # The product as a sticky bit: its lsb is more than 50 places below c's.
            "p_sticky": (r < 0) & ~v["p_zero"],
            # c's bit i goes to bit 51 + i - shift: below bit 1 for any i <= shift - 51.
            "c_sticky": ~v["c_zero"] & (shift >= _ADDEND_TOP_LSB + v["tz_c"]),
            "sig_c": v["sig_c"],
            "exponent": wire(signed(_EXPONENT_WIDTH), Mux(top, v["ec0"], v["ep"] - _PRODUCT_LSB),
                             "fma_exponent"),
        })
        keep = (*flags, "p_sticky", "c_sticky", "exponent")

        # align steps 1, 2: shift c right from the top of the window (coarse bits, then fine bits)
        y = Cat(Const(0, _ADDEND_TOP_LSB), v["sig_c"])
        for k in range(_SHIFT_BITS - 1, 2, -1):
            y = wire(unsigned(_FIELD), Mux(v["shift"][k], y >> (1 << k), y), f"fma_align{k}")
        v = align.step(1, {**{k: v[k] for k in keep}, "y": y, "shift_lo": v["shift"][:3]})
        y = v["y"]
        for k in range(2, -1, -1):
            y = wire(unsigned(_FIELD), Mux(v["shift_lo"][k], y >> (1 << k), y), f"fma_align{k}")
        v = align.step(2, {**{k: v[k] for k in keep if k != "c_sticky"},
                           "cw": Cat(v["c_sticky"], y[1:])})
        v = align.finish(v)

        back = StepPipeline(m, self.en, (5, 2), len(self.BACK_STEPS), prefix="fma_")

        # ---- back step 0: add or subtract, and the reverse difference -----------------------------
        pw = Mux(v["p_sticky"], 1, Cat(Const(0, _PRODUCT_LSB), product.p))     # bits 0..48
        cw = v["cw"]
        sub = v["sp"] ^ v["sc"]
        width = _MAGNITUDE_WIDTH + 1
        v = back.step(0, {
            **{k: v[k] for k in ("sp", "nan", "inf", "inf_sign", "exponent")},
            "sub": sub,
            # P + c, or P - c when the signs differ (never negative for a sum)
            # (-c as ~c + 1: the complement, sign-extended, plus sub)
            "s": wire(signed(width), pw + Cat(cw ^ sub.replicate(_FIELD), sub, sub).as_signed() + sub,
                      "fma_s"),
            "d": wire(signed(width), cw - pw, "fma_d"),                                  # c - P
        })

        # ---- back step 1: magnitude and sign -----------------------------------------------------
        # total = (-1)**sp * s. For a difference, (-1)**sp * s is +s or -s = d: its sign is that of s
        # or d, so an exact zero (s = d = 0) is +0. For a sum the sign is sp: -0 only for two
        # negative zeros.
        s, d = v["s"], v["d"]
        sign = Mux(v["sub"], Mux(v["sp"], d < 0, s < 0), v["sp"])
        v = back.step(1, {
            "nan": v["nan"], "inf": v["inf"], "exponent": v["exponent"],
            "sign": Mux(v["inf"], v["inf_sign"], sign),
            "magnitude": wire(_MAGNITUDE_WIDTH, Mux(s < 0, d, s), "fma_magnitude"),
        })

        # ---- normalize, round, pack ----------------------------------------------------------------
        m.submodules.round_pack = rp = RoundPack(_MAGNITUDE_WIDTH, _EXPONENT_WIDTH,
                                                 stages=self.ROUND_STAGES)
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
