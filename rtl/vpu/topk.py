"""Top-k of a row with indices: per-lane sorted lists while the row streams in, one merge at its end."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.vpu.layouts import MAX_LENGTH
from rtl.vpu.round_pack import QNAN

__all__ = ["TopK", "order_key"]

_INDEX_BITS = (MAX_LENGTH - 1).bit_length()


def order_key(x):
    """An unsigned key of binary32 ``x`` in the order of ``sim_models.vpu.topk``: every NaN (equal)
    above +Inf, then the binary32 total order with ``+0 > -0``."""
    nan = (x[23:31] == 0xFF) & (x[:23] != 0)
    low = Mux(x[31], ~x[:31], Cat(x[:31], Const(1, 1)))
    return Mux(nan, Const(1 << 32, 33), Cat(low[:32], Const(0, 1)))


def _entry_layout():
    return data.StructLayout({"valid": 1, "key": 33, "index": _INDEX_BITS, "value": 32})


class TopK(wiring.Component):
    """The ``k`` largest elements of each row and their indices, bit-exact to ``sim_models.vpu.topk``.

    Ties go to the lower index; NaN ranks above +Inf (all NaNs alike) and is returned as the
    canonical NaN.

    While a row streams in, each lane keeps its own list of the ``max_k`` largest elements it has
    seen, sorted, inserting one element per cycle (its elements arrive in increasing index, so an
    equal key goes below), one cycle after the beat (the beat is registered first). After the row's
    last beat the lane lists are merged into one list, one entry per cycle (``lanes * max_k`` cycles,
    comparing keys and then indices), and the result
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

    def elaborate(self, platform):
        m = Module()
        lanes, depth = self._lanes, self._max_k
        layout = _entry_layout()

        # ---- the beat, registered once (the caller's issue logic stays out of the lists' cycle) -----
        beat = {name: Signal.like(getattr(self, name), name=f"in_{name}")
                for name in ("valid", "first", "last", "mask", "data", "index0")}
        m.d.sync += [beat[name].eq(getattr(self, name)) for name in beat]
        valid, first, last = beat["valid"], beat["first"], beat["last"]

        # ---- per-lane lists while the row streams in ---------------------------------------------
        lists = [[Signal(layout, name=f"lane{j}_top{e}") for e in range(depth)] for j in range(lanes)]
        for j in range(lanes):
            x = beat["data"][j]
            new = Signal(layout, name=f"lane{j}_new")
            m.d.comb += [new.valid.eq(beat["mask"][j]), new.key.eq(order_key(x)),
                         new.index.eq(beat["index0"] + j), new.value.eq(Mux(order_key(x)[32], QNAN, x))]
            # Within a lane indices grow: an equal key stays below the entries already there.
            current = [Mux(first, 0, entry.as_value()) for entry in lists[j]]
            views = [data.View(layout, value) for value in current]
            wins = [Signal(name=f"lane{j}_wins{e}") for e in range(depth)]
            for e in range(depth):
                m.d.comb += wins[e].eq(new.valid & (~views[e].valid | (new.key > views[e].key)))
            with m.If(valid):
                for e in range(depth):
                    above = views[e - 1].as_value() if e else new.as_value()
                    from_above = wins[e - 1] if e else Const(1, 1)
                    m.d.sync += lists[j][e].eq(Mux(wins[e], Mux(from_above, above, new.as_value()),
                                                   current[e]))

        # ---- merge, one lane-list entry per cycle, then the result beats --------------------------
        merged = [Signal(layout, name=f"top{e}") for e in range(depth)]
        source = Array(entry.as_value() for lane_list in lists for entry in lane_list)
        step = Signal(range(lanes * depth + 1))
        beat_out = Signal(range(2 * depth + 2))
        beats = Signal(range(2 * depth + 2))
        m.d.comb += beats.eq(2 * ((self.k + lanes - 1) // lanes))
        with m.FSM(name="topk"):
            with m.State("COLLECT"):
                m.d.comb += self.busy.eq(valid & last)           # a row's last beat going in
                with m.If(valid & last):
                    m.d.sync += [step.eq(0)] + [entry.valid.eq(0) for entry in merged]
                    m.next = "MERGE"
            with m.State("MERGE"):
                m.d.comb += self.busy.eq(1)
                new = Signal(layout, name="merge_new")
                m.d.comb += new.eq(source[step])
                wins = [Signal(name=f"merge_wins{e}") for e in range(depth)]
                for e in range(depth):
                    entry = merged[e]
                    better = (new.key > entry.key) | ((new.key == entry.key) & (new.index < entry.index))
                    m.d.comb += wins[e].eq(new.valid & (~entry.valid | better))
                for e in range(depth):
                    above = merged[e - 1] if e else new
                    from_above = wins[e - 1] if e else Const(1, 1)
                    with m.If(wins[e]):
                        m.d.sync += merged[e].eq(Mux(from_above, above.as_value(), new.as_value()))
                m.d.sync += step.eq(step + 1)
                with m.If(step == lanes * depth - 1):
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
                    slot = Signal(range(2 * depth + lanes), name=f"out_slot{j}")
                    m.d.comb += slot.eq(group * lanes + j)
                    live = slot < self.k
                    m.d.comb += self.out_data[j].eq(Mux(live, Mux(indices, positions[slot], values[slot]), 0))
                m.d.sync += beat_out.eq(beat_out + 1)
                with m.If(beat_out == beats - 1):
                    m.next = "COLLECT"
        return m
