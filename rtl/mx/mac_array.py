"""R x C systolic MAC array of MXFP4 block-dot processing elements."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.credited_buffer import CreditedBuffer
from rtl.common.parameters import check_positive_int, parameter_error
from rtl.mx.dot_product import LUT_PRODUCTS, ProductMapping, condition_operand
from rtl.mx.layouts import TileCommand, a_beat, b_beat, c_beat, result_beat, row_lane
from rtl.mx.mac_pe import MacPe

__all__ = ["MacArray"]


def _delay(m, value, cycles, name, *, reset_less=True):
    """``value`` delayed by ``cycles`` registers (``cycles`` may be 0)."""
    for stage in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{stage}", reset_less=reset_less)
        m.d.sync += reg.eq(value)
        value = reg
    return value


class MacArray(wiring.Component):
    """An ``rows`` x ``cols`` array of MXFP4 processing elements computing ``C + A @ B`` tile by tile.

    Every processing element (:class:`MacPe`) multiplies one 32-element A block by one B block per
    cycle and adds the product, scaled by the two E8M0 scales and rounded once, to one of its
    ``interleave`` binary32 accumulators: peak ``rows * cols * 32`` MACs per cycle, bit-exact to
    ``sim_models.mx.matmul``. The accumulate adder is pipelined, so consecutive cycles must feed
    different accumulators; each element therefore owns ``interleave`` outputs of the tile, and a
    tile is ``rows`` x ``cols * interleave`` outputs. Output column ``n = s * cols + c`` of the tile
    belongs to processing element column ``c``, slot ``s``.

    A tile is one ``cmd`` (``blocks = K / 32`` and ``has_c``) followed by its operands:

    * ``b``: ``blocks * interleave`` beats, in order ``k = 0 .. blocks-1``, then slot ``s = 0 ..
      interleave-1``; beat ``(k, s)`` holds, for each column ``c``, block ``k`` of tile column
      ``s * cols + c`` of B.
    * ``a``: ``blocks`` beats; beat ``k`` holds, for each row ``r``, block ``k`` of tile row ``r`` of A.
      It is used by the ``interleave`` B beats of block ``k`` and accepted with the last of them.
    * ``c`` (only when ``has_c``): ``interleave`` beats; beat ``s`` holds ``C[r][s * cols + c]``, taken
      with the first B beat of slot ``s``. Without ``has_c`` the accumulators start from +0.

    The results leave on ``o`` as ``interleave`` beats per tile, in slot order, each holding
    ``[r][c]`` = result at tile row ``r``, column ``s * cols + c``; ``last`` marks a tile's final beat.
    Commands are taken back to back: the next tile's operands may follow the previous tile's
    without a gap, and its accumulation overlaps the previous tile's results draining.

    Dataflow: A blocks (with the control of the beat and the initial/result fields) move right one
    element per cycle, B blocks move down one element per cycle; the edge skews row ``r`` by ``r``
    and column ``c`` by ``c`` cycles, so element ``(r, c)`` sees a beat ``r + c`` cycles after issue.
    Every connection between elements is registered. There is no stall inside the array: the edge
    issues a beat only when every stream it needs is valid, the beat's slot is at the ring heads,
    and (for a tile's last block) the result buffer has room reserved for the result beat.

    Parameters
    ----------
    rows, cols : int
        Array shape (default 4 x 4).
    interleave : int
        Accumulators per processing element = accumulate-adder pipeline registers (default 8).
    result_depth : int
        Result beats the output buffer holds (default 32, in block RAM); it bounds how many tiles'
        results may be waiting on a stalled ``o``.
    mapping : ProductMapping or (int, int)
        How each processing element builds its 32 products: LUT tables (default), 18x18
        multipliers for packed element pairs, or dual-port block-RAM product tables. The A and B
        blocks are conditioned for it once per row and column at the edge.

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(TileCommand))``
        One command per tile.
    a : ``In(stream.Signature(a_beat(rows)))``
        A operand beats.
    b : ``In(stream.Signature(b_beat(cols)))``
        B operand beats.
    c : ``In(stream.Signature(c_beat(rows, cols)))``
        Initial accumulator beats of tiles with ``has_c``.
    o : ``Out(stream.Signature(result_beat(rows, cols)))``
        Result beats.

    Latency and throughput
    ----------------------
    One B beat per cycle (``rows * cols`` block pairs) when the operand streams keep up: a
    ``blocks``-block tile occupies the array for ``blocks * interleave`` cycles, and tiles follow each
    other without a gap. A tile's last result beat is valid :attr:`latency` cycles after its last B
    beat was accepted. Backpressure: ``o`` may stall at any time; when the result buffer is
    committed, the array stops accepting a tile's last-block beats (earlier beats continue). An
    operand stream that is not valid delays issue to the next cycle of the same slot, i.e. up to
    ``interleave`` cycles. Nothing is lost, duplicated or reordered.
    """

    def __init__(self, rows=4, cols=4, *, interleave=8, result_depth=32, mapping=LUT_PRODUCTS):
        for name, value in (("rows", rows), ("cols", cols), ("result_depth", result_depth)):
            check_positive_int(self, name, value)
        # The accumulate adder is pipelined: consecutive cycles must feed different accumulators.
        check_positive_int(self, "interleave", interleave, minimum=2)
        self._rows, self._cols = rows, cols
        self._interleave = interleave
        self._result_depth = result_depth
        if isinstance(mapping, tuple) and len(mapping) == 2:
            mapping = ProductMapping(*mapping)
        if not isinstance(mapping, ProductMapping):
            raise parameter_error(self, TypeError, "mapping must be a ProductMapping or "
                                  f"(dsp_pairs, rom_pairs), got {mapping!r}")
        self._mapping = mapping
        super().__init__({
            "cmd": In(stream.Signature(TileCommand)),
            "a": In(stream.Signature(a_beat(rows))),
            "b": In(stream.Signature(b_beat(cols))),
            "c": In(stream.Signature(c_beat(rows, cols))),
            "o": Out(stream.Signature(result_beat(rows, cols))),
        })

    rows = property(lambda self: self._rows)
    cols = property(lambda self: self._cols)
    interleave = property(lambda self: self._interleave)
    result_depth = property(lambda self: self._result_depth)
    mapping = property(lambda self: self._mapping)

    @property
    def tile_shape(self):
        """Outputs per tile, ``(rows, cols * interleave)``."""
        return self._rows, self._cols * self._interleave

    @property
    def result_delay(self):
        """Cycles from issuing a last-block beat to its result beat entering the result buffer."""
        return MacPe.latency_for(self._interleave, self._mapping) + self._rows + self._cols

    @property
    def latency(self):
        """Cycles from accepting a tile's last B beat to its last result beat being valid on ``o``."""
        return self.result_delay + 2

    def elaborate(self, platform):
        m = Module()
        rows, cols, slots = self._rows, self._cols, self._interleave

        # ---- edge: command, counters, issue -----------------------------------------------------
        phase = Signal(range(slots))                         # which slot is at the ring heads
        m.d.sync += phase.eq(_wrap_increment(phase, slots))

        active = Signal()
        blocks = Signal(16)
        has_c = Signal()
        block = Signal(16)
        slot = Signal(range(slots))
        credits = Signal(range(self._result_depth + 1), init=self._result_depth)
        has_credit = Signal(init=1)                          # credits != 0, as a register

        # Registered flags keep the 16-bit block comparison out of the issue path.
        last_block = Signal()
        first_block = Signal()
        last_slot = slot == slots - 1
        need_c = first_block & has_c
        issue = Signal()
        m.d.comb += issue.eq(active & (slot == phase) & self.a.valid & self.b.valid
                             & (~need_c | self.c.valid) & (~last_block | has_credit))
        tile_done = issue & last_block & last_slot
        m.d.comb += [
            self.b.ready.eq(issue),
            self.a.ready.eq(issue & last_slot),
            self.c.ready.eq(issue & need_c),
            self.cmd.ready.eq(~active | tile_done),
        ]
        with m.If(issue):
            m.d.sync += slot.eq(_wrap_increment(slot, slots))
            with m.If(last_slot):
                m.d.sync += [block.eq(block + 1), first_block.eq(0),
                             last_block.eq((block + 2) >= blocks)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [active.eq(1), blocks.eq(self.cmd.payload.blocks),
                         has_c.eq(self.cmd.payload.has_c), block.eq(0), slot.eq(0),
                         first_block.eq(1), last_block.eq(self.cmd.payload.blocks <= 1)]
        with m.Elif(tile_done):
            m.d.sync += active.eq(0)

        result_issued = issue & last_block
        popped = self.o.valid & self.o.ready
        m.d.sync += credits.eq(credits - result_issued + popped)
        # From registers and the two late strobes only (both come through stream handshakes).
        with m.If(result_issued & ~popped):
            m.d.sync += has_credit.eq(credits >= 2)
        with m.Elif(popped & ~result_issued):
            m.d.sync += has_credit.eq(1)

        # A beat's sum is at the ring heads MacPe.latency cycles after issue; the beat issued then
        # carries it out of the row.
        marks = Signal(2)
        m.d.comb += marks.eq(Cat(result_issued, result_issued & last_slot))
        marks = _delay(m, marks, MacPe.latency_for(slots, self._mapping), "result_mark", reset_less=False)

        # ---- rows and columns, skewed -----------------------------------------------------------
        pes = [[MacPe(col=c, cols=cols, interleave=slots, mapping=self._mapping) for c in range(cols)]
               for r in range(rows)]
        for r in range(rows):
            for c in range(cols):
                m.submodules[f"pe_{r}_{c}"] = pes[r][c]

        for r in range(rows):
            lane = Signal(row_lane(cols, self._mapping.operand), name=f"row{r}_in")
            m.d.comb += [
                lane.a.eq(condition_operand(m, self.a.payload[r], self._mapping, "a", f"row{r}_a")),
                lane.fields.eq(self.c.payload[r]),
                lane.first.eq(first_block),
                lane.zero_init.eq(~has_c),
            ]
            flags = Signal(3, name=f"row{r}_flags")
            m.d.comb += flags.eq(Cat(issue, marks[0], marks[1]))
            # One register at the edge for every row and column, then the skew.
            lane = _delay(m, lane, r + 1, f"row{r}_skew")
            flags = _delay(m, flags, r + 1, f"row{r}_flags_skew", reset_less=False)
            pe = pes[r][0]
            m.d.comb += [
                pe.row_i.eq(lane),
                pe.row_i.valid.eq(flags[0]),
                pe.row_i.result.eq(flags[1]),
                pe.row_i.result_last.eq(flags[2]),
            ]
            for c in range(1, cols):
                m.d.comb += pes[r][c].row_i.eq(pes[r][c - 1].row_o)

        for c in range(cols):
            block_in = condition_operand(m, self.b.payload[c], self._mapping, "b", f"col{c}_in")
            m.d.comb += pes[0][c].col_i.eq(_delay(m, block_in, c + 1, f"col{c}_skew"))
            for r in range(1, rows):
                m.d.comb += pes[r][c].col_i.eq(pes[r - 1][c].col_o)

        # ---- results: de-skew the rows, buffer ----------------------------------------------------
        layout = result_beat(rows, cols)
        # The edge's credits reserve a buffer entry for every result beat before it issues it, so
        # the buffer has no full/ready path: its write enable is the last row's result register.
        m.submodules.results = results = CreditedBuffer(layout, self._result_depth)
        beat = Signal(layout, name="result_in")
        for r in range(rows):
            m.d.comb += beat.data[r].eq(_delay(m, pes[r][cols - 1].row_o.fields, rows - 1 - r,
                                               f"row{r}_deskew"))
        last_row = pes[rows - 1][cols - 1].row_o
        m.d.comb += [
            beat.last.eq(last_row.result_last),
            results.w_data.eq(beat),
            results.w_en.eq(last_row.result),
        ]
        wiring.connect(m, results.o, wiring.flipped(self.o))
        return m


def _wrap_increment(value, modulus):
    """``(value + 1) % modulus`` for a ``Signal(range(modulus))``."""
    return Mux(value == modulus - 1, 0, value + 1)
