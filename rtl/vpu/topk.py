"""Top-k of a row with indices: per-lane sorted lists while the row streams in, one merge at its end."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.vpu.layouts import MAX_LENGTH
from rtl.vpu.round_pack import QNAN

__all__ = ["TopK", "entry_layout", "merge_cycles", "order_key", "systolic_list"]

_INDEX_BITS = (MAX_LENGTH - 1).bit_length()


def merge_cycles(lanes, max_k):
    """Cycles from a row's last beat into :class:`TopK` to its first result beat: two input registers,
    ``max_k`` for the last element to settle in its lane's list, ``lanes * max_k`` to feed every lane
    entry to the merge and ``max_k`` for the last of them to settle."""
    return (lanes + 2) * max_k + 2


def order_key(x):
    """An unsigned key of binary32 ``x`` in the order of ``sim_models.vpu.topk``: every NaN (equal)
    above +Inf, then the binary32 total order with ``+0 > -0``."""
    nan = (x[23:31] == 0xFF) & (x[:23] != 0)
    low = Mux(x[31], ~x[:31], Cat(x[:31], Const(1, 1)))
    return Mux(nan, Const(1 << 32, 33), Cat(low[:32], Const(0, 1)))


def entry_layout():
    """A list entry: whether it holds an element, its order key, its index in the row, its value."""
    return data.StructLayout({"valid": 1, "key": 33, "index": _INDEX_BITS, "value": 32})


class TopK(wiring.Component):
    """The ``k`` largest elements of each row and their indices, bit-exact to ``sim_models.vpu.topk``.

    Ties go to the lower index; NaN ranks above +Inf (all NaNs alike) and is returned as the
    canonical NaN.

    While a row streams in, each lane keeps its own list of the ``max_k`` best elements it has seen
    (a systolic list: each cell compares once per cycle and passes the loser down, so the insertion's
    logic does not grow with ``max_k``), two cycles after the beat (the beat and its order keys are
    registered first). After the row's last beat the lane lists settle and every lane entry is fed,
    one per cycle, into a second such list, which settles in turn (:func:`merge_cycles` in all:
    ``(lanes + 2) * max_k + 2``). Entries rank by key, then by the lower index. The result
    leaves as ``ceil(k / lanes)`` beats of values then as many beats of indices (lanes beyond ``k``
    zero). The caller must not start the next row before ``busy`` falls.

    Parameters
    ----------
    lanes : int
        Elements per beat.
    max_k : int
        Largest ``k`` (default 8: MoE routers pick 1 to 8 experts).

    Interface attributes
    --------------------
    valid, first, last : ``In(1)``
        A beat of the row, its first, its last.
    mask : ``In(lanes)``
        Lanes carrying an element.
    data : ``In(ArrayLayout(32, lanes))``
        The elements, lane ``j`` being element ``index0 + j``.
    index0 : ``In(range(MAX_LENGTH))``
        Index of lane 0's element in the row.
    k : ``In(range(max_k + 1))``
        How many to return, 1 to ``max_k`` (held for the whole row).
    busy : ``Out(1)``
        Merging or writing a row's result.
    out_valid : ``Out(1)``, out_data : ``Out(ArrayLayout(32, lanes))``, out_last : ``Out(1)``
        Result beats, one per cycle (the caller reserved room for them); ``out_last`` on a row's
        final beat.
    """

    def __init__(self, lanes, max_k=8):
        check_positive_int(self, "lanes", lanes)
        check_positive_int(self, "max_k", max_k)
        self._lanes = lanes
        self._max_k = max_k
        beat = data.ArrayLayout(32, lanes)
        super().__init__({
            "valid": In(1),
            "first": In(1),
            "last": In(1),
            "mask": In(lanes),
            "data": In(beat),
            "index0": In(range(MAX_LENGTH)),
            "k": In(range(max_k + 1)),
            "busy": Out(1),
            "out_valid": Out(1),
            "out_data": Out(beat),
            "out_last": Out(1),
        })

    @property
    def max_k(self):
        return self._max_k

    @property
    def merge_cycles(self):
        """Cycles from a row's last beat in to its first result beat."""
        return merge_cycles(self._lanes, self._max_k)

    def elaborate(self, platform):
        m = Module()
        lanes, depth = self._lanes, self._max_k
        layout = entry_layout()

        # ---- the beat, registered once (the caller's issue logic stays out of the lists' cycle) -----
        beat = {name: Signal.like(getattr(self, name), name=f"in_{name}")
                for name in ("valid", "first", "last", "mask", "data", "index0")}
        m.d.sync += [beat[name].eq(getattr(self, name)) for name in beat]

        # ---- each lane's element as a list entry (key and index), registered -----------------------
        incoming = [Signal(layout, name=f"lane{j}_in") for j in range(lanes)]
        clear, row_end = Signal(), Signal()
        m.d.sync += [clear.eq(beat["valid"] & beat["first"]), row_end.eq(beat["valid"] & beat["last"])]
        for j in range(lanes):
            x = beat["data"][j]
            key = order_key(x)
            m.d.sync += incoming[j].eq(Cat(beat["valid"] & beat["mask"][j], key,
                                           (beat["index0"] + j)[:_INDEX_BITS], Mux(key[32], QNAN, x)))

        # ---- per-lane systolic lists while the row streams in --------------------------------------
        lists = [systolic_list(m, incoming[j], depth, clear, f"lane{j}") for j in range(lanes)]

        # ---- merge: every lane-list entry into one more systolic list, then the result beats -------
        feed = Signal(layout, name="merge_in")
        merged = systolic_list(m, feed, depth, Const(0, 1), "merge")
        source = Array(entry.as_value() for lane_list in lists for entry in lane_list)
        step = Signal(range(lanes * depth))            # counts to max_k - 1 and to lanes * max_k - 1
        beat_out = Signal(range(2 * depth))           # result beats: 2 * ceil(k / lanes) <= 2 * max_k
        beats = Signal(range(2 * depth + 1))
        m.d.comb += beats.eq(2 * ((self.k + lanes - 1) // lanes))
        m.d.sync += feed.valid.eq(0)
        with m.FSM(name="topk"):
            with m.State("COLLECT"):
                # A row's last beat is in one of the two input registers.
                m.d.comb += self.busy.eq((beat["valid"] & beat["last"]) | row_end)
                with m.If(row_end):
                    m.d.sync += [step.eq(0)] + [entry.valid.eq(0) for entry in merged]
                    m.next = "SETTLE"
            with m.State("SETTLE"):          # the last element moves down its lane's list
                m.d.comb += self.busy.eq(1)
                m.d.sync += step.eq(step + 1)
                with m.If(step == depth - 1):
                    m.d.sync += step.eq(0)
                    m.next = "MERGE"
            with m.State("MERGE"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [feed.eq(source[step]), step.eq(step + 1)]
                with m.If(step == lanes * depth - 1):
                    m.d.sync += step.eq(0)
                    m.next = "DRAIN"
            with m.State("DRAIN"):           # the last entry fed moves down the merged list
                m.d.comb += self.busy.eq(1)
                m.d.sync += step.eq(step + 1)
                with m.If(step == depth - 1):
                    m.d.sync += beat_out.eq(0)
                    m.next = "OUTPUT"
            with m.State("OUTPUT"):
                m.d.comb += [self.busy.eq(1), self.out_valid.eq(1), self.out_last.eq(beat_out == beats - 1)]
                half = beats >> 1
                indices = beat_out >= half
                group = Mux(indices, beat_out - half, beat_out)
                values = Array(entry.value for entry in merged)
                positions = Array(entry.index for entry in merged)
                for j in range(lanes):
                    slot = Signal(range(depth + lanes), name=f"out_slot{j}")
                    m.d.comb += slot.eq(group * lanes + j)
                    live = slot < self.k
                    m.d.comb += self.out_data[j].eq(Mux(live, Mux(indices, positions[slot], values[slot]), 0))
                m.d.sync += beat_out.eq(beat_out + 1)
                with m.If(beat_out == beats - 1):
                    m.next = "COLLECT"
        return m


def _better(a, b):
    """``a`` ranks above ``b``: a larger key, or an equal key and a lower index."""
    return Cat(~a.index, a.key) > Cat(~b.index, b.key)


def systolic_list(m, incoming, depth, clear, name, layout=None):
    """A sorted list of the ``depth`` best entries seen on ``incoming``, one entry accepted per cycle.

    Cell ``e`` keeps the better of its entry and the one arriving from above and passes the other one
    down to cell ``e + 1`` a cycle later, so each cycle's logic is one comparison per cell whatever
    ``depth``. An entry reaches its place at most ``depth`` cycles after it arrived; ``clear`` empties
    the list in the cycle ``incoming`` holds a new row's first entry (that entry is kept). Returns the
    cells, best first (an empty cell has ``valid`` 0 and sits below every full one). ``layout`` is
    that of ``incoming``: :func:`entry_layout` by default, or any layout with ``valid``, ``key`` and
    ``index`` fields."""
    layout = entry_layout() if layout is None else layout
    cells = [Signal(layout, name=f"{name}_top{e}") for e in range(depth)]
    arriving = incoming
    for e, cell in enumerate(cells):
        take = Signal(name=f"{name}_take{e}")
        m.d.comb += take.eq(arriving.valid & (~cell.valid | _better(arriving, cell)))
        with m.If(take):
            m.d.sync += cell.eq(arriving)
        if e + 1 < depth:
            passed = Signal(layout, name=f"{name}_pass{e}")
            m.d.sync += passed.eq(Mux(take, cell.as_value(), arriving.as_value()))
            with m.If(clear):
                m.d.sync += passed.valid.eq(0)
            arriving = passed
    with m.If(clear):
        m.d.sync += [cell.valid.eq(0) for cell in cells[1:]]
        m.d.sync += cells[0].eq(incoming)
    return cells
