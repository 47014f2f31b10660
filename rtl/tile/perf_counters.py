"""The compute tile's performance counters: where a run's cycles go, and what it moves."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int

__all__ = ["Activity", "ACTIVITY_OF", "PerfCounters", "COUNTERS", "CYCLE_COUNTERS", "CYCLE_COUNTER_OF"]


class Activity(enum.Enum, shape=3):
    """What one cycle of a run is spent on: the class of the instruction the sequencer executes.

    A cycle of fetch (``CHECK``, ``FETCH``), decode (``EXECUTE``) or advancing the pc (``NEXT``) is
    ``OTHER``, whatever the instruction; from the cycle after an instruction's decode to its end it
    is its class: ``GEMM``; ``ATTN``; ``VOP``; ``KV`` (``KVOPEN``, ``KVAPPEND``); ``COPY``
    (``LOAD``, ``EMBED``: the range checks, the token-id scan and the copies); ``OTHER`` for the
    scalar and control instructions (``LI``, ``ADD``, ``ADDI``, ``LDW``, ``STW``, ``BLT``,
    ``BNE``, ``HALT``).
    """
    OTHER = 0
    GEMM = 1
    ATTN = 2
    VOP = 3
    KV = 4
    COPY = 5


ACTIVITY_OF = {"GEMM": Activity.GEMM, "ATTN": Activity.ATTN, "VOP": Activity.VOP, "KVOPEN": Activity.KV,
               "KVAPPEND": Activity.KV, "LOAD": Activity.COPY, "EMBED": Activity.COPY}
"""The :class:`Activity` of each instruction whose execution is not ``OTHER`` (by name)."""

CYCLE_COUNTER_OF = {Activity.GEMM: "gemm_cycles", Activity.ATTN: "attn_cycles", Activity.VOP: "vop_cycles",
                    Activity.KV: "kv_cycles", Activity.COPY: "copy_cycles", Activity.OTHER: "other_cycles"}
"""The counter of :class:`PerfCounters` that counts the cycles of each :class:`Activity`."""

CYCLE_COUNTERS = tuple(CYCLE_COUNTER_OF.values())
"""The counters that split a run's cycles by :class:`Activity` (they add up to the run's cycles)."""

COUNTERS = CYCLE_COUNTERS + ("weight_stall_cycles", "weight_bytes", "weight_beats", "kv_reads",
                             "kv_appends")
"""Every counter of :class:`PerfCounters`, in register order (the tile's ``PERF_<NAME>`` registers)."""


class PerfCounters(wiring.Component):
    """Saturating event counters of one run of the tile, cleared when a run starts.

    The inputs are observations of the tile's control path and of its streams (the tile drives them
    from the sequencer's :attr:`~rtl.tile.sequencer.Sequencer.activity` and from stream handshakes);
    each counter adds its event in every cycle in which ``busy`` is high, so it covers exactly the
    cycles that the sequencer's ``cycles`` counts.

    Counters (``Out(width)`` each, named as in :data:`COUNTERS`)
    ------------------------------------------------------------
    ``gemm_cycles``, ``attn_cycles``, ``vop_cycles``, ``kv_cycles``, ``copy_cycles``, ``other_cycles``
        Cycles with ``activity`` equal to ``GEMM``, ``ATTN``, ``VOP``, ``KV``, ``COPY``, ``OTHER``:
        every ``busy`` cycle falls in exactly one, so the six add up to the run's cycles (below
        saturation).
    ``weight_stall_cycles``
        Cycles in which a weight range has been requested and not yet fully delivered
        (``weight_pending``), its consumer would take a beat (``weight_wanted``) and the weight
        port has none (``weight_valid`` low): the run waits for weight memory.
    ``weight_bytes``
        The lengths of the weight-port requests accepted (``weight_request``, ``weight_length``):
        the bytes of the ranges read from weight memory.
    ``weight_beats``
        Data beats delivered by the weight port (``weight_beat``).
    ``kv_reads``
        Records returned by the KV-cache controller on its read-reply stream (``kv_read``).
    ``kv_appends``
        Records appended to the KV cache: successful append replies (``kv_append``).

    Every counter stops at ``2**width - 1`` instead of wrapping. Each is a register: an event in
    cycle ``t`` shows in cycle ``t + 1``. ``clear`` zeroes them all at the end of its cycle (an
    event in the same cycle is dropped).

    Parameters
    ----------
    width : int
        Bits of each counter (32: the registers' width).

    Interface attributes
    --------------------
    clear : ``In(1)``
        A run starts (the sequencer's ``start`` while idle).
    busy : ``In(1)``
        A run is in progress: events are counted only while it is high.
    activity : ``In(Activity)``
        What this cycle is spent on.
    weight_request : ``In(1)``, weight_length : ``In(32)``
        A weight-port request transfers in this cycle (``req.valid & req.ready``), ``weight_length``
        bytes long.
    weight_beat : ``In(1)``
        A weight data beat transfers in this cycle (``o.valid & o.ready``).
    weight_pending, weight_valid, weight_wanted : ``In(1)``
        A requested range is not fully delivered yet; the data stream's ``valid``; its consumer
        would take a beat in this cycle.
    kv_read, kv_append : ``In(1)``
        A KV record is returned to a read; an append succeeds.
    <counter> : ``Out(width)``
        The counters above.
    """

    def __init__(self, *, width=32):
        check_positive_int(self, "width", width)
        self._width = width
        members = {
            "clear": In(1), "busy": In(1), "activity": In(Activity),
            "weight_request": In(1), "weight_length": In(32), "weight_beat": In(1),
            "weight_pending": In(1), "weight_valid": In(1), "weight_wanted": In(1),
            "kv_read": In(1), "kv_append": In(1),
        }
        members.update({name: Out(width) for name in COUNTERS})
        super().__init__(members)

    width = property(lambda self: self._width)

    def elaborate(self, platform):
        m = Module()
        top = (1 << self._width) - 1
        increments = {CYCLE_COUNTER_OF[activity]: self.activity == activity for activity in Activity}
        increments.update({
            "weight_stall_cycles": self.weight_pending & self.weight_wanted & ~self.weight_valid,
            "weight_bytes": Mux(self.weight_request, self.weight_length, 0),
            "weight_beats": self.weight_beat,
            "kv_reads": self.kv_read,
            "kv_appends": self.kv_append,
        })
        for name in COUNTERS:
            counter = getattr(self, name)
            total = Signal(max(self._width, 32) + 1, name=f"{name}_next")
            m.d.comb += total.eq(counter + increments[name])
            with m.If(self.clear):
                m.d.sync += counter.eq(0)
            with m.Elif(self.busy):
                m.d.sync += counter.eq(Mux(total > top, top, total))
        return m
