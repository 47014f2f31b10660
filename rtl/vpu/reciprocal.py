"""Reciprocal of binary32, correctly rounded: ``1 / x`` on the vector unit's divider."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.divider import OPERAND_BITS, QUOTIENT_BITS, Divider
from rtl.vpu.round_pack import RoundPack

__all__ = ["Reciprocal"]

EXPONENT = signed(9)
"""Exponent of ``2 * quotient + sticky``: ``-155..123`` for finite inputs, ``-256`` forces a zero."""
ZERO_EXPONENT = -256
"""An exponent so low that any quotient rounds to a (signed) zero: the result for ``1 / ±Inf``."""

# What travels through the divider beside the divisor.
_Tag = data.StructLayout({"sign": 1, "nan": 1, "inf": 1, "exponent": EXPONENT})


class Reciprocal(wiring.Component):
    """``1 / x`` of a binary32 pattern, correctly rounded (nearest, ties to even), every input.

    Bit-exact to :func:`sim_models.vpu._reciprocal_bits`: ``divide_core(1, 0, sig, lsb, sign)``
    with ``x = (-1)**sign * sig * 2**lsb``. Subnormal inputs are normalized (their reciprocals
    overflow to ±Inf only above ``2**128``, so most are finite); results below the normal range are
    subnormal (gradual underflow), results of ``2**128`` or more ±Inf. ``1/±0 = ±Inf``,
    ``1/±Inf = ±0``, a NaN gives the canonical NaN ``0x7FC00000``.

    Datapath, in three parts:

    * decode (two stages): special values; the leading zeros of the 24-bit significand, then the
      divisor ``den = sig << (10 + lz)`` (bit 33 set) and the exponent of the quotient,
      ``100 - max(biased, 1) + lz`` (the model's ``-33 - (lsb - 10 - lz) - 27``);
    * :class:`~rtl.vpu.divider.Divider` of ``num = 2**33`` (the model's 1, normalized to 34 bits) by
      ``den``, the sign, exponent and special flags in its tag;
    * :class:`~rtl.vpu.round_pack.RoundPack` of ``(sign, 2 * quotient + sticky, exponent)``. The
      special results ride along: a NaN raises its ``nan`` flag, ±0 its ``inf`` flag, and ±Inf
      gets the exponent :data:`ZERO_EXPONENT`, so the quotient rounds to the zero of its sign.

    Parameters
    ----------
    digits_per_stage : int
        Radix-4 digits per register stage of the divider (see :class:`~rtl.vpu.divider.Divider`).
    round_stages : int
        Pipeline registers of the final rounding (see :class:`~rtl.vpu.round_pack.RoundPack`).

    Interface attributes
    --------------------
    x : ``In(32)``
        Binary32 operand.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bits of ``1 / x``, :attr:`latency` enabled cycles after ``x``.

    Latency and throughput
    ----------------------
    :attr:`latency` = ``2 + divider + rounding`` cycles (21 by default: 2 + 14 + 5); one result per
    cycle. No valid signal and no stall logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    DECODE_LATENCY = 2

    def __init__(self, *, digits_per_stage=1, round_stages=RoundPack.DEFAULT_STAGES):
        self._divider = Divider(tag_width=_Tag.size, digits_per_stage=digits_per_stage)
        self._round = RoundPack(QUOTIENT_BITS + 1, EXPONENT.width, stages=round_stages)
        super().__init__({
            "x": In(32),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def latency(self):
        """Cycles from ``x`` to ``result``: decode, divider, rounding."""
        return self.DECODE_LATENCY + self._divider.latency + self._round.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.divider = divider = self._divider
        m.submodules.round = rnd = self._round
        m.d.comb += [divider.en.eq(self.en), rnd.en.eq(self.en)]

        def register(name, value):
            reg = Signal(value.shape(), name=f"{name}_r", reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- decode 1: special values, leading zeros of the significand ------------------------
        x = self.x
        biased, frac = x[23:31], x[:23]
        sig = Cat(frac, biased != 0)                          # 24 bits; subnormals have bit 23 clear
        sign1 = register("sign", x[31])
        nan1 = register("nan", (biased == 0xFF) & (frac != 0))
        zero1 = register("zero", x[:31] == 0)
        inf_in1 = register("inf_in", (biased == 0xFF) & (frac == 0))
        sig1 = register("sig", sig)
        lz1 = register("lz", leading_zeros(m, sig, "sig_lz"))
        base1 = register("base", Const(100, 8) - Mux(biased == 0, 1, biased))   # 100 - max(biased, 1)

        # ---- decode 2: normalized divisor, exponent, tag ---------------------------------------
        tag = Signal(_Tag)
        m.d.comb += [
            tag.sign.eq(sign1),
            tag.nan.eq(nan1),
            # 1 / ±0 = ±Inf. (The quotient would overflow anyway: a zero significand gives the
            # divisor 2**33 and the exponent 123. The flag says so directly.)
            tag.inf.eq(zero1),
            tag.exponent.eq(Mux(inf_in1, ZERO_EXPONENT, base1 + lz1)),
        ]
        den = Signal(OPERAND_BITS)
        m.d.comb += den.eq(Cat(Const(0, OPERAND_BITS - 24), (sig1 << lz1)[:24]))
        den2 = register("den", den)
        tag2 = register("tag", tag)

        # ---- divider, then rounding --------------------------------------------------------------
        m.d.comb += [
            divider.num.eq(1 << (OPERAND_BITS - 1)),
            divider.den.eq(den2),
            divider.tag.eq(tag2),
        ]
        out = _Tag(divider.tag_out)
        m.d.comb += [
            rnd.sign.eq(out.sign),
            rnd.nan.eq(out.nan),
            rnd.inf.eq(out.inf),
            rnd.magnitude.eq(Cat(divider.sticky, divider.quotient)),
            rnd.exponent.eq(out.exponent),
            self.result.eq(rnd.result),
        ]
        return m
