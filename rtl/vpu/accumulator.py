"""The 48-bit accumulate adder of ``sum`` and ``sum_squares``: two accumulators, one rounding."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.divider import check_tag_width
from rtl.vpu.round_pack import StepPipeline

__all__ = ["Acc48Add", "acc_layout", "ACC_BITS", "DEFAULT_EXPONENT_WIDTH"]

ACC_BITS = 48
"""Significand bits of an accumulator (``sim_models.vpu._ACC_BITS``)."""
DEFAULT_EXPONENT_WIDTH = 10
"""Signed exponent width of an accumulator: -512..511, room for every ``sum``/``sum_squares``.

Non-zero accumulators of binary32 terms have exponents from -345 (the smallest square, ``2**-298``,
normalized to 48 bits) to ``209 + log2(n)`` for ``n`` terms (squares of the largest binary32)."""

_W = ACC_BITS + 3          # far-path window: the larger significand above 3 guard bits


def acc_layout(exponent_width=DEFAULT_EXPONENT_WIDTH):
    """Layout of an accumulator ``(-1)**sign * mag * 2**exp``.

    ``mag`` is normalized (``2**47 <= mag < 2**48``) or zero; the zero the adder produces is
    ``sign = 0, mag = 0, exp = 0`` (the model's), and a zero operand is recognised by ``mag[47] == 0``
    whatever its sign and exponent.
    """
    return data.StructLayout({"mag": ACC_BITS, "exp": signed(exponent_width), "sign": 1})


class Acc48Add(wiring.Component):
    """Sum of two accumulators rounded once to a 48-bit significand (nearest, ties to even).

    This is ``sim_models.vpu._acc_add`` in gates, bit for bit: the operand with the larger exponent
    (``X``) keeps its place, the other (``Y``) is aligned to 3 bits below ``X``'s last bit with the
    bits shifted further out ORed into a sticky bit; the sum of the two is rounded to 48 bits and
    normalized. An exact zero sum is +0 (``sign = 0, mag = 0, exp = 0``).

    Datapath: two paths side by side, one chosen at the end.

    * Far path (an addition, or a subtraction with exponents 2 or more apart, or 1 apart when the
      difference keeps 49 bits): ``Y`` shifted right in a 51-bit window (shifts of 32, 16 and 8
      first, so the sticky OR-reductions run beside the multiplexers), one carry chain for ``X + Y``
      or ``X - Y`` (never negative here), then the sum's leading one is at bit 51, 50 or 49: a 3-way
      choice of significand, guard and sticky bits, and the increment that rounds.
    * Near path (a subtraction with exponents at most 1 apart, whose difference is exact): the
      difference in both orders without any alignment shifter, its leading zeros, a left shift.

    Parameters
    ----------
    stages : int
        Pipeline registers from the operands to ``sum`` (at least 1, default 4): spread over the
        eight steps of the datapath by logic depth. Four fit 100 MHz on ECP5 (the accumulate loop
        of ``rtl.vpu.reducer.Reducer``, ``slots = 4``); more delay the result.
    exponent_width : int
        Width of the signed exponents (default :data:`DEFAULT_EXPONENT_WIDTH`). Results must fit:
        operand exponents at most ``2**(exponent_width - 1) - 3``.
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports).

    Interface attributes
    --------------------
    a, b : ``In(acc_layout(exponent_width))``
        The operands: ``mag`` normalized (bit 47 set) or zero (bit 47 clear: then the whole
        operand counts as zero, whatever its other bits).
    a_clear : ``In(1)``, default 0
        Sampled with the operands: ``a`` counts as zero (an accumulate loop restarting from +0
        without a multiplexer in front of the adder).
    tag : ``In(tag_width)``
        Sampled with the operands, delivered with their sum (only when ``tag_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    sum : ``Out(acc_layout(exponent_width))``
        ``a + b`` rounded to 48 bits, :attr:`latency` enabled cycles after the operands.
    tag_out : ``Out(tag_width)``
        The operands' ``tag`` (only when ``tag_width > 0``).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= stages`` cycles; one addition per cycle. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``.
    """

    DEFAULT_STAGES = 4
    STEPS = ("compare", "select", "align_coarse", "align_fine", "add", "normalize", "round", "pack")
    # Rough logic depth of each step (a carry chain counting as a few LUT levels); the larger of
    # the two paths where both work in a step. See spread_registers.
    WEIGHTS = (4, 2, 4, 4, 5, 4, 5, 2)

    def __init__(self, stages=DEFAULT_STAGES, exponent_width=DEFAULT_EXPONENT_WIDTH, tag_width=0):
        check_positive_int(self, "stages", stages)
        check_positive_int(self, "exponent_width", exponent_width, minimum=4)
        check_tag_width(self, tag_width)
        self._stages = stages
        self._exponent_width = exponent_width
        self._tag_width = tag_width
        layout = acc_layout(exponent_width)
        ports = {"a": In(layout), "a_clear": In(1), "b": In(layout), "en": In(1, init=1),
                 "sum": Out(layout)}
        if tag_width:
            ports.update(tag=In(tag_width), tag_out=Out(tag_width))
        super().__init__(ports)

    @property
    def stages(self):
        return self._stages

    @property
    def exponent_width(self):
        return self._exponent_width

    @property
    def tag_width(self):
        return self._tag_width

    @property
    def latency(self):
        """Cycles from the operands to ``sum`` (equal to ``stages``)."""
        return self._stages

    def elaborate(self, platform):
        m = Module()
        ew = self._exponent_width
        pipe = StepPipeline(m, self.en, self.WEIGHTS, self._stages, prefix="acc_")
        tag = {"tag": self.tag} if self._tag_width else {}

        def wire(shape, value, name):
            sig = Signal(shape, name=f"acc_{name}")
            m.d.comb += sig.eq(value)
            return sig

        def keep(v, *names):
            return {k: v[k] for k in names + tuple(tag)}

        # ---- step 0: compare exponents (both differences), zero operands -----------------------
        a, b = self.a, self.b
        a_zero = ~a.mag[ACC_BITS - 1] | self.a_clear
        b_zero = ~b.mag[ACC_BITS - 1]
        v = pipe.step(0, {
            **tag,
            "a_sign": a.sign, "a_mag": a.mag, "a_exp": a.exp,
            "b_sign": b.sign, "b_mag": b.mag, "b_exp": b.exp,
            "a_zero": a_zero, "b_zero": b_zero,
            "d_ab": wire(signed(ew + 1), a.exp - b.exp, "d_ab"),
            "d_ba": wire(signed(ew + 1), b.exp - a.exp, "d_ba"),
        })

        # ---- step 1: X = the operand with the larger exponent (a on a tie), Y the other ------------
        # Everything about d = |exp(a) - exp(b)| comes from both differences side by side, and only
        # the multiplexers of the significands wait for `swap`. A zero Y (either operand zero) is
        # added as 0: no shift, no near path, its bits masked in the same LUT as the swap.
        d_ab, d_ba = v["d_ab"], v["d_ba"]
        b_larger = d_ab < 0
        swap = wire(1, ~v["b_zero"] & (b_larger | v["a_zero"]), "swap")
        y_zero = wire(1, v["a_zero"] | v["b_zero"], "y_zero")
        shift_ab = Mux(d_ab[6:] != 0, 63, d_ab[:6])          # d >= 64: everything goes to sticky
        shift_ba = Mux(d_ba[6:] != 0, 63, d_ba[:6])
        v = pipe.step(1, {
            **tag,
            "x_mag": Mux(swap, v["b_mag"], v["a_mag"]),
            "y_mag": Mux(y_zero, 0, Mux(swap, v["a_mag"], v["b_mag"])),
            "x_exp": Mux(swap, v["b_exp"], v["a_exp"]),
            "x_sign": Mux(swap, v["b_sign"], v["a_sign"]),
            "sub": (v["a_sign"] ^ v["b_sign"]) & ~y_zero,
            "shift": Mux(y_zero, 0, Mux(b_larger, shift_ba, shift_ab)),
            "d0": (d_ab == 0) | y_zero,
            "d1": ((d_ab == 1) | (d_ba == 1)) & ~y_zero,
            "both_zero": v["a_zero"] & v["b_zero"],
        })
        common = ("x_exp", "x_sign", "sub", "d0", "d1", "both_zero")

        # ---- step 2: far: align Y by 32, 16, 8 with sticky; near: 2X - Y' in both orders --------
        # Near path, in units of 2**(x_exp - 1): Y' = 2Y (d = 0) or Y (d = 1); P = 2X - Y' is exact,
        # below 2**48 in magnitude when d = 0 and in (0, 2**49) when d = 1.
        x2 = Cat(Const(0, 1), v["x_mag"])                                  # 49 bits
        y1 = Mux(v["d1"], v["y_mag"], Cat(Const(0, 1), v["y_mag"]))
        p = wire(signed(ACC_BITS + 2), x2 - y1, "near_p")
        q = wire(unsigned(ACC_BITS + 1), y1 - x2, "near_q")                # used when P < 0
        y = Cat(Const(0, 3), v["y_mag"])                                  # window: Y << 3, 51 bits
        sticky = Const(0, 1)
        for k in (5, 4, 3):
            amount = 1 << k
            sticky = sticky | (v["shift"][k] & (y[:amount] != 0))
            y = wire(unsigned(_W), Mux(v["shift"][k], y >> amount, y), f"align_{k}")
        v = pipe.step(2, {
            **keep(v, *common, "x_mag"),
            "y_al": y, "sticky": sticky, "shift_lo": v["shift"][:3],
            "p": p, "q": q,
        })

        # ---- step 3: far: align by 4, 2, 1; near: the non-negative difference -------------------
        y, sticky = v["y_al"], v["sticky"]
        for k in (2, 1, 0):
            amount = 1 << k
            sticky = sticky | (v["shift_lo"][k] & (y[:amount] != 0))
            y = wire(unsigned(_W), Mux(v["shift_lo"][k], y >> amount, y), f"align_{k}")
        p_neg = v["p"] < 0                                                # only when d = 0
        v = pipe.step(3, {
            **keep(v, *common, "x_mag"),
            "y_al": y | sticky,
            "r": Mux(p_neg, v["q"], v["p"][:ACC_BITS + 1]),
            "near_sign": v["x_sign"] ^ p_neg,
        })

        # ---- step 4: far: X + Y or X - Y in the window; near: leading zeros ----------------------
        # Near is right when it subtracts with d = 0, or d = 1 and 2X - Y < 2**48: exact results.
        xw = Cat(Const(0, 3), v["x_mag"], Const(0, 1))                     # 52 bits
        yw = Cat(v["y_al"], Const(0, 1))
        r = v["r"]
        v = pipe.step(4, {
            **keep(v, "x_exp", "x_sign", "both_zero"),
            "t": wire(unsigned(_W + 1), Mux(v["sub"], xw - yw, xw + yw), "far_t"),
            "near": v["sub"] & (v["d0"] | (v["d1"] & ~r[ACC_BITS])),
            "r": r[:ACC_BITS], "r_lz": leading_zeros(m, r[:ACC_BITS], "near_lz"),
            "near_sign": v["near_sign"],
        })

        # ---- step 5: far: significand, guard, sticky for a leading one at bit 51, 50 or 49 ------
        # (T >= 2**49 whenever the far path is chosen); near: coarse left shift ------------------
        t = v["t"]
        top2, top1 = t[_W], t[_W - 1]
        kept = Mux(top2, t[4:52], Mux(top1, t[3:51], t[2:50]))
        guard = Mux(top2, t[3], Mux(top1, t[2], t[1]))
        rest = Mux(top2, t[:3] != 0, Mux(top1, t[:2] != 0, t[0]))
        lz_far = Mux(top2, 0, Mux(top1, 1, 2))
        r_lz = v["r_lz"]
        near_coarse = wire(unsigned(ACC_BITS), v["r"] << Cat(Const(0, 3), r_lz[3:6]), "near_coarse")
        v = pipe.step(5, {
            **keep(v, "x_sign", "both_zero", "near", "near_sign"),
            "kept": kept, "round_up": guard & (rest | kept[0]),
            "exp_far": (v["x_exp"] + 1 - lz_far)[:ew + 1].as_signed(),
            "near_mag": near_coarse, "lz_lo": r_lz[:3],
            "exp_near": (v["x_exp"] - 1 - r_lz)[:ew + 1].as_signed(),
            "near_zero": r_lz == ACC_BITS,
        })

        # ---- step 6: far: round (the increment); near: fine left shift ----------------------------
        v = pipe.step(6, {
            **keep(v, "x_sign", "both_zero", "near", "near_sign", "exp_near", "near_zero"),
            "rounded": wire(unsigned(ACC_BITS + 1), v["kept"] + v["round_up"], "rounded"),
            "exp_far": v["exp_far"], "exp_far1": (v["exp_far"] + 1)[:ew + 1].as_signed(),
            "near_mag": (v["near_mag"] << v["lz_lo"])[:ACC_BITS],
        })

        # ---- step 7: choose the path; a carry out of the rounding is 2**48 = 2**47 * 2 ----------
        carry = v["rounded"][ACC_BITS]
        zero = v["both_zero"] | (v["near"] & v["near_zero"])
        out = Signal(acc_layout(ew), name="acc_out")
        with m.If(zero):
            m.d.comb += out.eq(0)
        with m.Elif(v["near"]):
            m.d.comb += [out.sign.eq(v["near_sign"]), out.mag.eq(v["near_mag"]),
                         out.exp.eq(v["exp_near"])]
        with m.Else():
            m.d.comb += [out.sign.eq(v["x_sign"]),
                         out.mag.eq(Mux(carry, 1 << (ACC_BITS - 1), v["rounded"][:ACC_BITS])),
                         out.exp.eq(Mux(carry, v["exp_far1"], v["exp_far"]))]
        v = pipe.finish(pipe.step(7, {**keep(v), "out": out.as_value()}))
        m.d.comb += self.sum.as_value().eq(v["out"])
        if self._tag_width:
            m.d.comb += self.tag_out.eq(v["tag"])
        return m
