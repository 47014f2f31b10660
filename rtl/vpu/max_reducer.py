"""Row maximum of the vector unit: per-lane running maxima, then a tree of comparators."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.reducer import beat_layout, delay, result_queue
from rtl.vpu.round_pack import QNAN

__all__ = ["MaxReducer"]

_NEG_INF_KEY = 0x007F_FFFF       # order key of -Inf, the least key: masked lanes take it


def _order_key(bits):
    """Unsigned key in the binary32 order with ``-0 < +0`` (for non-NaN patterns)."""
    return Mux(bits[31], ~bits, Cat(bits[:31], 1))


class MaxReducer(wiring.Component):
    """``max_reduce`` of rows streamed ``lanes`` elements per beat: one binary32 per row, exact.

    Bit-exact to :func:`sim_models.vpu.max_reduce`: the largest element in the binary32 order with
    ``+0 > -0``; the canonical NaN ``0x7FC00000`` if any element is a NaN. Elements become unsigned
    order keys (``~x`` for a negative ``x``, ``x`` with bit 31 set otherwise), each lane keeps the
    running maximum key of its elements in a register (one comparison per beat), and when the row's
    last beat is in, a pipelined tree of ``lanes - 1`` comparators, one level per cycle, picks the
    row's maximum. Maximum is exact and associative, so this order gives the model's result.

    Parameters
    ----------
    lanes : int
        Elements per beat, a power of two (default 8).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(beat_layout(lanes)))``
        Beats, as for :class:`rtl.vpu.reducer.Reducer` (``squares`` is ignored); ``ready`` is high
        unless results are held up on ``o``. Lanes with their ``mask`` bit clear are ignored (a row
        with no element at all gives -Inf). A beat with ``first`` set, or the beat after a row's
        ``last``, starts a row.
    o : ``Out(stream.Signature(32))``
        One binary32 result per row, in row order, with backpressure: results wait in a FIFO of
        :attr:`queue_depth` entries, and ``i.ready`` goes low while that many rows are in the unit
        with their results not yet taken (never with a consumer that is always ready).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= log2(lanes) + 3`` cycles from the transfer of a row's last beat to its
    result on ``o`` (6 for 8 lanes; offered that cycle when nothing is queued): the beat's input
    register, the running maximum, the tree, the conversion back; one beat per cycle, rows of any
    length back to back.

    Resources (ECP5)
    ----------------
    8 lanes: about 1.7k LUT4 and 535 FF, no multipliers; 116 MHz placed and routed (nextpnr seed 1).
    """

    def __init__(self, lanes=8):
        check_positive_int(self, "lanes", lanes)
        if lanes & (lanes - 1):
            raise parameter_error(self, ValueError, f"lanes must be a power of two, got {lanes!r}")
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(32)),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def queue_depth(self):
        """Results the output FIFO holds: ``latency + 2``."""
        return self.latency + 2

    @property
    def latency(self):
        """Cycles from the transfer of a row's last beat to its result on ``o``."""
        return (self._lanes - 1).bit_length() + 3

    def elaborate(self, platform):
        m = Module()
        room = Signal()
        m.d.comb += self.i.ready.eq(room)
        # Every transfer is registered first (no clock enable): the producer's issue logic and lane
        # mask get a cycle of their own, the running maxima compare registered beats.
        beat = Signal(beat_layout(self._lanes), name="beat_r", reset_less=True)
        accept = Signal(name="accept_r")
        m.d.sync += [beat.eq(self.i.payload), accept.eq(self.i.valid & room)]
        row_open = Signal()
        start = beat.first | ~row_open
        with m.If(accept):
            m.d.sync += row_open.eq(~beat.last)

        # ---- running maxima: one comparison per lane and beat ------------------------------------
        nan_row = Signal()
        nans, leaves = [], []
        for lane in range(self._lanes):
            x = beat.data[lane]
            live = beat.mask[lane]
            nan = live & (x[23:31] == 0xFF) & (x[:23] != 0)
            nans.append(nan)
            # A NaN's key is whatever its bits give: the row's result is the NaN anyway (and the NaN
            # test, a 31-bit reduction, stays off the comparison's path).
            key = Signal(32, name=f"key{lane}")
            m.d.comb += key.eq(Mux(live, _order_key(x), _NEG_INF_KEY))
            best = Signal(32, name=f"best{lane}", reset_less=True)
            new = Signal(32, name=f"new{lane}")
            m.d.comb += new.eq(Mux(start | (key > best), key, best))
            final = Signal(32, name=f"final{lane}", reset_less=True)
            with m.If(accept):
                m.d.sync += [best.eq(new), final.eq(new)]
            leaves.append(final)
        nan_now = Mux(start, 0, nan_row) | Cat(*nans).any()
        with m.If(accept):
            m.d.sync += nan_row.eq(nan_now)
        done = Signal()                          # the row's last beat went into `final`
        final_nan = Signal()
        m.d.sync += [done.eq(accept & beat.last), final_nan.eq(nan_now)]

        # ---- comparator tree, one level per cycle --------------------------------------------------
        nodes, level = leaves, 0
        while len(nodes) > 1:
            up = []
            for j in range(0, len(nodes), 2):
                reg = Signal(32, name=f"max{level}_{j // 2}", reset_less=True)
                m.d.sync += reg.eq(Mux(nodes[j] > nodes[j + 1], nodes[j], nodes[j + 1]))
                up.append(reg)
            nodes, level = up, level + 1
        key = nodes[0]
        nan = delay(m, final_nan, level, "tree_nan")
        valid = delay(m, done, level, "tree_valid")

        # ---- back to binary32 ------------------------------------------------------------------------
        result = Mux(nan, QNAN, Mux(key[31], Cat(key[:31], 0), ~key))
        out = Signal(32, name="result")
        out_valid = Signal()
        m.d.sync += [out.eq(result), out_valid.eq(valid)]
        row_in = self.i.valid & room & self.i.payload.last
        m.d.comb += room.eq(result_queue(m, self.o, out_valid, out, row_in, self.queue_depth))
        return m
