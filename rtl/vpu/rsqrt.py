"""Reciprocal square root of binary32: ``1 / sqrt(x)`` from the integer square root and the divider."""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.divider import OPERAND_BITS, QUOTIENT_BITS, Divider
from rtl.vpu.isqrt import RADICAND_BITS, IntegerSqrt
from rtl.vpu.round_pack import RoundPack

__all__ = ["Rsqrt"]

EXPONENT = signed(9)
"""Exponent of ``2 * quotient + sticky``: ``-91..48`` for finite inputs, ``-256`` forces a zero."""
ZERO_EXPONENT = -256
"""An exponent so low that any quotient rounds to zero: the result for ``rsqrt(+Inf)``."""

# What travels through the square root and the divider.
_Tag = data.StructLayout({"sign": 1, "nan": 1, "inf": 1, "exponent": EXPONENT})


class Rsqrt(wiring.Component):
    """``1 / sqrt(x)`` of a binary32 pattern, within 1 ulp, bit-exact to the golden model.

    Bit-exact to :func:`sim_models.vpu._rsqrt_bits` for every input: ``x = sig * 2**lsb`` with the
    significand normalized to 24 bits (subnormal inputs by a leading-zero count), ``p = lsb mod 2``,
    ``s = isqrt(sig << (36 + p))`` (30 or 31 bits) and ``h = (lsb - 36 - p) / 2`` (the model's
    ``_rsqrt_parts``), then ``divide_core(1, 0, s, h, 0)``: one correctly rounded division of 1 by
    ``s * 2**h``. ``rsqrt(±0) = ±Inf``, ``rsqrt(+Inf) = +0``; a NaN, or any negative input other
    than -0 (-Inf included), gives the canonical NaN ``0x7FC00000``. Results never overflow nor
    underflow (they lie between about ``2**-64`` and ``2**75``).

    Datapath, in four parts:

    * decode (two stages): special values; the leading zeros of the 24-bit significand, then the
      normalized significand placed at bit 36 or 37 of the 61-bit radicand by the parity ``p`` of
      ``lsb``, and the exponent of the final quotient, ``37 + floor((lz - max(biased, 1)) / 2)``
      (the model's ``-33 - (h - 4 + p) - 27``);
    * :class:`~rtl.vpu.isqrt.IntegerSqrt` of the radicand;
    * :class:`~rtl.vpu.divider.Divider` of ``num = 2**33`` (1) by ``s`` normalized to 34 bits:
      ``s << 3`` if its bit 30 is set (``p = 1``), else ``s << 4`` (bit 29 is then set): one
      multiplexer before the divider's first stage, no leading-zero count;
    * :class:`~rtl.vpu.round_pack.RoundPack` of ``(0, 2 * quotient + sticky, exponent)``; specials
      ride along in the tag: NaN raises ``nan``, ±0 raises ``inf`` (with its sign), +Inf gets the
      exponent :data:`ZERO_EXPONENT` and rounds to +0.

    Parameters
    ----------
    sqrt_steps_per_stage : int
        Root bits per register stage of the square root (see :class:`~rtl.vpu.isqrt.IntegerSqrt`).
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
        Binary32 bits of ``1 / sqrt(x)``, :attr:`latency` enabled cycles after ``x``.

    Latency and throughput
    ----------------------
    :attr:`latency` = ``2 + square root + divider + rounding`` cycles (37 by default:
    2 + 16 + 14 + 5); one result per cycle. No valid signal and no stall logic: the pipeline is a
    fixed delay, frozen by ``en``.
    """

    DECODE_LATENCY = 2

    def __init__(self, *, sqrt_steps_per_stage=2, digits_per_stage=1,
                 round_stages=RoundPack.DEFAULT_STAGES):
        self._sqrt = IntegerSqrt(tag_width=_Tag.size, steps_per_stage=sqrt_steps_per_stage)
        self._divider = Divider(tag_width=_Tag.size, digits_per_stage=digits_per_stage)
        self._round = RoundPack(QUOTIENT_BITS + 1, EXPONENT.width, stages=round_stages)
        super().__init__({
            "x": In(32),
            "en": In(1, init=1),
            "result": Out(32),
        })

    @property
    def latency(self):
        """Cycles from ``x`` to ``result``: decode, square root, divider, rounding."""
        return self.DECODE_LATENCY + self._sqrt.latency + self._divider.latency + self._round.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.sqrt = sqrt = self._sqrt
        m.submodules.divider = divider = self._divider
        m.submodules.round = rnd = self._round
        m.d.comb += [sqrt.en.eq(self.en), divider.en.eq(self.en), rnd.en.eq(self.en)]

        def register(name, value):
            reg = Signal(value.shape(), name=f"{name}_r", reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- decode 1: special values, leading zeros of the significand ------------------------
        x = self.x
        sign, biased, frac = x[31], x[23:31], x[:23]
        zero = x[:31] == 0
        sig = Cat(frac, biased != 0)                          # 24 bits; subnormals have bit 23 clear
        sign1 = register("sign", sign)
        zero1 = register("zero", zero)
        nan1 = register("nan", ((biased == 0xFF) & (frac != 0)) | (sign & ~zero))   # NaN, x < 0
        pos_inf1 = register("pos_inf", x == 0x7F80_0000)
        sig1 = register("sig", sig)
        lz1 = register("lz", leading_zeros(m, sig, "sig_lz"))
        base1 = register("base", Mux(biased == 0, 1, biased))                     # max(biased, 1)

        # ---- decode 2: radicand, exponent, tag ---------------------------------------------------
        # lsb = base - 150 - lz (150 is even): p = (base ^ lz) & 1; the quotient's exponent is
        # -56 - h - p = 37 + floor((lz - base) / 2).
        parity = base1[0] ^ lz1[0]
        normalized = Signal(24, name="sig_norm")
        m.d.comb += normalized.eq(sig1 << lz1)
        radicand = Signal(RADICAND_BITS, name="radicand")
        m.d.comb += radicand.eq(Mux(parity, normalized << 37, normalized << 36))
        half = Signal(signed(9), name="half")
        m.d.comb += half.eq((lz1 - base1) >> 1)                                   # arithmetic shift
        tag = Signal(_Tag)
        m.d.comb += [
            tag.sign.eq(sign1),                              # kept for rsqrt(-0) = -Inf
            tag.nan.eq(nan1),
            tag.inf.eq(zero1),
            tag.exponent.eq(Mux(pos_inf1, ZERO_EXPONENT, half + 37)),
        ]
        m.d.comb += [
            sqrt.radicand.eq(register("radicand", radicand)),
            sqrt.tag.eq(register("tag", tag)),
        ]

        # ---- divider: 1 / s, s normalized to 34 bits ---------------------------------------------
        root = sqrt.root
        m.d.comb += [
            divider.num.eq(1 << (OPERAND_BITS - 1)),
            divider.den.eq(Mux(root[30], root << 3, root << 4)),
            divider.tag.eq(sqrt.tag_out),
        ]

        # ---- rounding ------------------------------------------------------------------------------
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
