"""Binary32 maximum and minimum of the vector unit (IEEE 754-2019 ``maximum`` / ``minimum``)."""

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.vpu.round_pack import QNAN, StepPipeline

__all__ = ["Fp32MinMax"]


class Fp32MinMax(wiring.Component):
    """``max(a, b)`` or ``min(a, b)`` of binary32 patterns.

    This is :func:`sim_models.vpu._max_bits` / ``_min_bits`` in gates, bit for bit: the canonical
    NaN ``0x7FC00000`` if either operand is a NaN (any payload, either sign); otherwise the operand
    that is larger (smaller) in the order ``-Inf < ... < -0 < +0 < ... < +Inf``, returned unchanged
    (subnormals included). ``clamp(x, lo, hi) = min(max(x, lo), hi)`` is two of these in a row.

    Datapath: one 31-bit comparison of the magnitudes (the bit patterns without the sign order them),
    the signs deciding how it counts, and a 32-bit multiplexer.

    Parameters
    ----------
    stages : int
        Pipeline registers from the operands to ``result`` (at least 1, default 1): the first after
        the multiplexer, a second (if any) after the comparison, more delay the result.

    Interface attributes
    --------------------
    a, b : ``In(32)``
        Binary32 bit patterns of the operands.
    op : ``In(1)``
        0: maximum; 1: minimum.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 bit pattern of the result, :attr:`latency` enabled cycles after its operands.

    Latency and throughput
    ----------------------
    :attr:`latency` ``= stages`` cycles; one operation per cycle. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``.
    """

    DEFAULT_STAGES = 1
    STEPS = ("compare", "select")
    WEIGHTS = (4, 2)

    def __init__(self, stages=DEFAULT_STAGES):
        check_positive_int(self, "stages", stages)
        self._stages = stages
        super().__init__({
            "a": In(32),
            "b": In(32),
            "op": In(1),
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

    def elaborate(self, platform):
        m = Module()
        pipe = StepPipeline(m, self.en, self.WEIGHTS, self._stages, prefix="cmp_")
        a, b = self.a, self.b

        # ---- step 0: compare ------------------------------------------------------------------
        # a >= b when the signs differ and a is positive (+0 > -0 included); when both are positive
        # and |a| > |b|; when both are negative and |a| < |b|, that is, not |a| > |b|. Equal
        # patterns may pick either operand: they are the same bits.
        greater = a[:31] > b[:31]
        a_wins_max = Mux(a[31] ^ b[31], ~a[31], greater ^ a[31])
        v = pipe.step(0, {
            "a": a, "b": b,
            "take_a": a_wins_max ^ self.op,
            "nan": (a[:31] > 0x7F80_0000) | (b[:31] > 0x7F80_0000),
        })

        # ---- step 1: select -------------------------------------------------------------------
        result = Mux(v["nan"], QNAN, Mux(v["take_a"], v["a"], v["b"]))
        v = pipe.finish(pipe.step(1, {"result": result}))
        m.d.comb += self.result.eq(v["result"])
        return m
