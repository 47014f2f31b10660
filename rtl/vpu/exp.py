"""Binary32 exponential of the vector unit: ``exp(x)`` within 1 ulp, bit-exact to the model."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.exp_core import M_BITS, N_BITS, ExpCore
from rtl.vpu.multiplier import MODES
from rtl.vpu.round_pack import RoundPack

__all__ = ["Exp"]

_LIMIT_BIASED = 134          # |x| >= 2**7 = 128 (sim_models.vpu._EXP_LIMIT_BIASED): saturate
_EXPONENT = signed(N_BITS)   # n - 32: -217..152; -256 forces a result of +0


class Exp(wiring.Component):
    """``e**x`` of binary32, bit-exact to :func:`sim_models.vpu.exp` (``_exp_bits``) for every input.

    * NaN (any payload, either sign) gives the canonical NaN ``0x7FC00000``;
    * ``|x| >= 128`` (biased exponent 134 or more, ±Inf included) gives +Inf for positive ``x``
      and +0 for negative ``x``;
    * otherwise ``encode_rne(0, m, n - 32)`` of :class:`~rtl.vpu.exp_core.ExpCore`'s ``(m, n)``:
      within 1 ulp where the result is normal; ``x`` above about 88.72 overflows to +Inf and ``x``
      below about -103.97 underflows to +0 in that rounding; subnormal results are produced.

    Datapath: the special cases are decoded from ``x`` and travel in the core's ``tag``; the core's
    output goes to :class:`~rtl.vpu.round_pack.RoundPack` with ``nan`` for a NaN, ``inf`` for
    ``x >= 128`` and, for ``x <= -128``, the exponent forced to -256 (``m < 2**34``, so the value is
    below ``2**-222`` and rounds to +0). Between the two units only that exponent multiplexer and the
    ``- 32`` (bits 5 and up of ``n``) sit in front of RoundPack's first step.

    Resources on the ULX3S-85F (``poblano.flows.fpga.build``, 100 MHz target, seed 1): ``dsp`` 125
    MHz, about 1170 LUT4 and 1170 FF, 10 ``MULT18X18D``, 2 ``DP16KD``; ``lut`` 133 MHz, about 3920
    LUT4 and 2940 FF, no ``MULT18X18D``, 2 ``DP16KD``.

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports).
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the core's products (:class:`~rtl.vpu.exp_core.ExpCore`): 10
        ``MULT18X18D`` or none.

    Interface attributes
    --------------------
    x : ``In(32)``
        Binary32 operand; every pattern is valid.
    tag : ``In(tag_width)``
        Sampled with ``x``, delivered unchanged with its result (only when ``tag_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register and table read: with ``en`` low the pipeline holds.
    result : ``Out(32)``
        Binary32 pattern of ``e**x``, :attr:`latency` enabled cycles after its ``x``.
    tag_out : ``Out(tag_width)``
        The ``tag`` of ``x`` (only when ``tag_width > 0``).

    Latency and throughput
    ----------------------
    :attr:`latency` = the core's latency + RoundPack's 5 cycles: 17 with ``multiplier="dsp"``, 23
    with ``"lut"``. One result per cycle; ``result`` comes straight from a register. No valid signal
    and no stall logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    def __init__(self, *, tag_width=0, multiplier="dsp"):
        check_positive_int(self, "tag_width", tag_width, minimum=0)
        if multiplier not in MODES:
            raise parameter_error(self, ValueError, f"multiplier must be one of {MODES}, got {multiplier!r}")
        self._tag_width = tag_width
        self._multiplier = multiplier
        self._core = ExpCore(tag_width=3 + tag_width, multiplier=multiplier)
        self._round = RoundPack(M_BITS, _EXPONENT.width)
        ports = {"x": In(32), "en": In(1, init=1), "result": Out(32)}
        if tag_width:
            ports.update(tag=In(tag_width), tag_out=Out(tag_width))
        super().__init__(ports)

    @property
    def tag_width(self):
        return self._tag_width

    @property
    def multiplier(self):
        return self._multiplier

    @property
    def latency(self):
        """Cycles from ``x`` to ``result``."""
        return self._core.latency + self._round.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self._core
        m.submodules.round = rnd = self._round
        m.d.comb += [core.en.eq(self.en), rnd.en.eq(self.en)]

        # ---- special inputs, decoded beside the core -----------------------------------------------
        x = self.x
        sign, biased = x[31], x[23:31]
        nan = (biased == 0xFF) & (x[:23] != 0)
        big = biased >= _LIMIT_BIASED                               # |x| >= 128, Inf and NaN included
        user_tag = [self.tag] if self._tag_width else []
        m.d.comb += [core.x.eq(x), core.tag.eq(Cat(nan, big & ~sign, big & sign, *user_tag))]

        # ---- rounding of m * 2**(n - 32), or the special result ------------------------------------
        nan_d, inf_d, zero_d = core.tag_out[0], core.tag_out[1], core.tag_out[2]
        n = core.n
        minus_32 = Cat(n[:5], (n[5:] - 1)[:N_BITS - 5]).as_signed()  # n - 32 touches bits 5 and up
        m.d.comb += [
            rnd.sign.eq(0),
            rnd.magnitude.eq(core.m),
            rnd.exponent.eq(Mux(zero_d, Const(-1 << (N_BITS - 1), _EXPONENT), minus_32)),
            rnd.nan.eq(nan_d),
            rnd.inf.eq(inf_d),
            self.result.eq(rnd.result),
        ]
        if self._tag_width:
            tag = core.tag_out[3:]
            for index in range(rnd.latency):
                reg = Signal(self._tag_width, name=f"tag_r{index}", reset_less=True)
                with m.If(self.en):
                    m.d.sync += reg.eq(tag)
                tag = reg
            m.d.comb += self.tag_out.eq(tag)
        return m
