"""RMSNorm's per-element output ``round_fp32(round24x(x * r) * gain)``, one element per cycle; with
``r = 1`` the binary32 product ``fl(x * gain)`` (rope's products)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.multiplier import Multiplier
from rtl.vpu.rms_scale import SCALE_EXPONENT, round_to_24
from rtl.vpu.round_pack import RoundPack, delay_line

__all__ = ["RmsOutput"]

_EXPONENT = signed(12)      # weights on the way: -473..365


def _decode(x):
    """sign, significand (subnormals not normalized), weight of its lsb; NaN, Inf, zero."""
    biased, frac = x[23:31], x[:23]
    ones = biased == 0xFF
    return (x[31], Cat(frac, biased != 0), Mux(biased == 0, -149, biased - 150),
            ones & (frac != 0), ones & (frac == 0), x[:31] == 0)


class RmsOutput(wiring.Component):
    """One RMSNorm output, bit-exact to ``sim_models.vpu._rms_output``.

    ``h = x * r`` (``r = r_sig * 2**r_lsb`` from :class:`~rtl.vpu.rms_scale.RmsScale`) rounded to a
    24-bit significand, nearest even, with an unbounded exponent; then ``h * gain`` rounded once to
    binary32 (subnormals kept, overflow to ±Inf) by :class:`~rtl.vpu.round_pack.RoundPack`. A NaN
    ``gain`` gives NaN, an infinite one ±Inf (NaN when ``x`` is zero); a zero ``x`` gives a zero
    signed by ``sign(x) xor sign(gain)``. A NaN ``x`` gives NaN, an infinite one ±Inf (NaN when
    ``gain`` is zero).

    With ``r = 1`` (``r_sig = 2**23``, ``r_lsb = -23``) ``h`` is ``x`` itself (the unbounded exponent
    keeps a subnormal ``x`` exact) and the result is the IEEE binary32 product ``x * gain`` with the
    canonical NaN: ``sim_models.vpu.mul``. RoPE uses it so.

    Datapath: decode (1 cycle), the 24x24 product ``x_sig * r_sig``
    (:class:`~rtl.vpu.multiplier.Multiplier`), its normalization and rounding (2 cycles), the 24x24
    product ``h_sig * g_sig``, ``RoundPack``, one output register.

    Interface attributes
    --------------------
    x, gain : ``In(32)``
        Binary32 operands.
    r_sig : ``In(24)``, r_lsb : ``In(SCALE_EXPONENT)``
        The row's scale, sampled with ``x``.
    result : ``Out(32)``
        :attr:`latency` cycles after the operands; one result per cycle, no stall.
    """

    def __init__(self, *, multiplier="dsp"):
        self._scale_product = Multiplier(24, 24, mode=multiplier)
        self._gain_product = Multiplier(24, 24, mode=multiplier)
        self._round = RoundPack(48, _EXPONENT.width, stages=4)
        super().__init__({
            "x": In(32),
            "gain": In(32),
            "r_sig": In(24),
            "r_lsb": In(SCALE_EXPONENT),
            "result": Out(32),
        })

    @property
    def latency(self):
        return 1 + self._scale_product.latency + 2 + self._gain_product.latency + self._round.latency + 1

    def elaborate(self, platform):
        m = Module()
        m.submodules.scale_product = first = self._scale_product
        m.submodules.gain_product = second = self._gain_product
        m.submodules.round = rnd = self._round

        # ---- decode ----------------------------------------------------------------------------
        sx, mx, ex, x_nan, x_inf, x_zero = _decode(self.x)
        sg, mg, eg, g_nan, g_inf, g_zero = _decode(self.gain)
        flags = Signal(4)                        # sign, x zero, NaN, infinity (of a non-NaN result)
        x_sig, g_sig = Signal(24), Signal(24)
        weight = Signal(_EXPONENT)               # ex + r_lsb + eg: the product's lsb before rounding h
        r_sig = Signal(24)
        nan = x_nan | g_nan | (g_inf & x_zero) | (x_inf & g_zero)
        m.d.sync += [flags.eq(Cat(sx ^ sg, x_zero, nan, g_inf | x_inf)), x_sig.eq(mx), g_sig.eq(mg),
                     weight.eq(ex + self.r_lsb + eg), r_sig.eq(self.r_sig)]

        # ---- h = x * r, rounded to 24 bits ------------------------------------------------------
        m.d.comb += [first.a.eq(x_sig), first.b.eq(r_sig)]
        late = first.latency
        flags1, g_sig1, weight1 = (delay_line(m, v, late, name) for v, name in
                                   ((flags, "flags1"), (g_sig, "gain1"), (weight, "weight1")))
        # its leading zeros (one cycle), then the shift and the rounding (the next)
        p = Signal(48)
        zeros = Signal(range(49))
        m.d.sync += [p.eq(first.p[:48]), zeros.eq(leading_zeros(m, first.p[:48], "h_lz"))]
        flags1, g_sig1, weight1 = (delay_line(m, v, 1, name) for v, name in
                                   ((flags1, "flags1z"), (g_sig1, "gain1z"), (weight1, "weight1z")))
        normal = Signal(48)
        m.d.comb += normal.eq(p << zeros)
        rounded, carry = round_to_24(m, normal, Const(0, 1), "h")
        h_sig = Signal(24)
        h_weight = Signal(_EXPONENT)
        flags2 = Signal(4)
        g_sig2 = Signal(24)
        m.d.sync += [
            h_sig.eq(Mux(flags1[1], 0, rounded)),
            h_weight.eq(weight1 + 24 - zeros + carry),
            flags2.eq(flags1), g_sig2.eq(g_sig1),
        ]

        # ---- h * gain, rounded once to binary32 -------------------------------------------------
        m.d.comb += [second.a.eq(h_sig), second.b.eq(g_sig2)]
        flags3 = delay_line(m, flags2, second.latency, "flags3")
        weight3 = delay_line(m, h_weight, second.latency, "weight3")
        m.d.comb += [
            rnd.sign.eq(flags3[0]), rnd.magnitude.eq(second.p[:48]), rnd.exponent.eq(weight3),
            rnd.nan.eq(flags3[2]), rnd.inf.eq(flags3[3]),
        ]
        m.d.sync += self.result.eq(rnd.result)
        return m
