"""The vector unit: ``lanes`` binary32 lanes, a reducer and a command sequencer, with stream interfaces."""


from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.credited_buffer import CreditedBuffer
from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.grid_sum import GridSum
from rtl.vpu.lane import LANE_OPS, Lane
from rtl.vpu.layouts import (
    ELEMENTWISE,
    MAX_LENGTH,
    OPERANDS,
    PASSES,
    REDUCTIONS,
    Op,
    VpuCommand,
    result_beat,
    vector_beat,
)
from rtl.vpu.max_reducer import MaxReducer
from rtl.vpu.reducer import Reducer
from rtl.vpu.rms_scale import RmsScale
from rtl.vpu.round_pack import QNAN
from rtl.vpu.topk import TopK

__all__ = ["VectorUnit", "SUPPORTED"]

SUPPORTED = ELEMENTWISE + REDUCTIONS + (Op.RMSNORM, Op.SOFTMAX, Op.ROPE, Op.TOPK)
"""Operations this build runs; any other command is answered with an error beat."""


def _any_of(op, ops):
    return Cat(op == each for each in ops).any()


def _pass_flags(op, k):
    """What pass ``k`` (a Value) of operation ``op`` (a Value) does with its beats."""
    rms, softmax, rope = op == Op.RMSNORM, op == Op.SOFTMAX, op == Op.ROPE
    return {
        "lanes": _any_of(op, ELEMENTWISE) | (rms & (k == 1)) | (softmax & (k == 2)) | (rope & (k == 1)),
        "sum": _any_of(op, (Op.SUM, Op.SUM_SQUARES)) | (rms & (k == 0)),
        "squares": (op == Op.SUM_SQUARES) | rms,
        "max": (op == Op.MAX_REDUCE) | (softmax & (k == 0)),
        "grid": softmax & (k == 1),
        "store": rope & (k == 0),
        "topk": op == Op.TOPK,
        "uses_b": _any_of(op, [e for e in ELEMENTWISE if "b" in OPERANDS[e]]) | ((rms | rope) & (k == 1)),
        "uses_c": _any_of(op, [e for e in ELEMENTWISE if "c" in OPERANDS[e]]) | (rope & (k == 0)),
        "reduce_out": _any_of(op, REDUCTIONS),
    }


class VectorUnit(wiring.Component):
    """A SIMD unit of ``lanes`` binary32 lanes running one command at a time, bit-exact to the model.

    A command (:data:`~rtl.vpu.layouts.VpuCommand`) names an operation, a row length ``n`` and a
    number of rows. Each row arrives on the operand streams the operation uses
    (:data:`~rtl.vpu.layouts.OPERANDS`) as ``ceil(n / lanes)`` beats of ``lanes`` elements, element
    ``i`` in lane ``i % lanes``; the lanes of a row's last beat beyond ``n`` are ignored. Results leave
    on ``o``:

    * element-wise operations: one beat per operand beat, the lanes beyond ``n`` zero;
    * reductions (``sum``, ``sum_squares``, ``max_reduce``): one beat per row, the result in lane 0 and
      zeros elsewhere, in the accumulation order of ``sim_models.vpu`` for ``lanes`` and ``slots``;
    * composites (``rmsnorm``, ``softmax``): each row arrives on ``a`` :data:`~rtl.vpu.layouts.PASSES`
      times in a row (the unit keeps no copy of it), one result beat per beat of the last pass.
      ``rmsnorm`` (``eps`` in ``scalar0``): pass 1 sums the squares (:class:`Reducer`, unrounded),
      :class:`~rtl.vpu.rms_scale.RmsScale` computes the row's scale, pass 2 reads the gain on ``b``
      and outputs :class:`~rtl.vpu.rms_output.RmsOutput` per element. ``softmax``: pass 1 finds the
      maximum (:class:`MaxReducer`), pass 2 sums the terms ``exp(fl(x - max))`` exactly
      (:class:`~rtl.vpu.grid_sum.GridSum`), pass 3 outputs each term divided by the sum. A row
      holding NaN or Inf (softmax: NaN or +Inf, or only -Inf) gives NaN everywhere, as in the model.
      ``rope`` (rows of an even length up to ``rope_length``): pass 1 brings ``x`` rotated by half its
      length (``x[n/2:]`` then ``x[:n/2]``) on ``a`` and ``sin`` on ``c``, and the lanes store
      ``q = fl(rotate_half(x) * sin)`` in the unit's rope buffer; pass 2 brings ``x`` on ``a`` and
      ``cos`` on ``b`` and outputs ``fl(fl(x * cos) + q)``.
    * ``topk`` (``k`` in ``scalar0``, an integer from 1 to ``min(length, max_k)``): per row,
      ``ceil(k / lanes)`` beats of the values, largest first (ties to the lower index, NaN above +Inf,
      returned canonical), then as many beats of their indices (unsigned integers); lanes beyond
      ``k`` zero. :class:`~rtl.vpu.topk.TopK` takes ``(lanes + 2) * max_k + 2`` cycles after a row's
      last beat before its result (:func:`~rtl.vpu.topk.merge_cycles`); the next row waits for it.

    ``o.payload.last`` marks the command's final beat. A command with ``length`` 0, a ``length`` above
    ``max_length`` or an operation this build does not run (:data:`SUPPORTED`) consumes no operands
    and is answered by one beat with ``error`` set (data zero, ``last`` set); so is ``rmsnorm`` with an
    ``eps`` that is NaN, infinite or negative (``-0`` is accepted), ``rope`` of an odd length or
    one above ``rope_length``, and ``topk`` with ``k`` outside ``1..min(length, max_k)``.

    Flow control: the sequencer issues a beat only when every operand stream it needs is valid and a
    result slot is free in the output buffer, so the lanes never stall and results are never
    dropped, whatever the back-pressure on ``o``. A command is accepted when the previous one's beats
    are all issued and its results have left the lanes (the lanes' latency is paid once per command).
    Between the passes of a composite row the operand streams wait for the row's scalar (maximum,
    scale or sum).

    Parameters
    ----------
    lanes : int
        Elements per beat (a power of two, default 8).
    slots : int
        Partial sums per lane of the reductions (default 4; the reducer's accumulate loop).
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the products: ``MULT18X18D`` or LUTs.
    max_length : int
        Longest row accepted (default and at most 8192).
    rope_length : int
        Longest ``rope`` row (the head dimension; default 256, even, at most ``max_length``): the
        rope buffer holds ``rope_length / lanes`` beats.
    max_k : int
        Largest ``k`` of ``topk`` (default 8).

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(VpuCommand))``
    a, b, c : ``In(stream.Signature(vector_beat(lanes)))``
        Operand beats.
    o : ``Out(stream.Signature(result_beat(lanes)))``
        Result beats.

    Throughput and latency
    ----------------------
    Element-wise: ``lanes`` results per cycle while operands and ``o`` keep up. Reductions: one beat
    per cycle in; the row's result about :attr:`Reducer.latency` cycles after its last beat. See
    ``benchmarks/results/vpu.md`` for cycles per operation.
    """

    def __init__(self, lanes=8, *, slots=4, multiplier="dsp", max_length=MAX_LENGTH, rope_length=256,
                 max_k=8):
        check_positive_int(self, "lanes", lanes)
        if lanes & (lanes - 1):
            raise parameter_error(self, ValueError, f"lanes must be a power of two, got {lanes!r}")
        check_positive_int(self, "max_length", max_length)
        if max_length > MAX_LENGTH:
            raise parameter_error(self, ValueError,
                                  f"max_length must be at most {MAX_LENGTH}, got {max_length!r}")
        check_positive_int(self, "rope_length", rope_length)
        if rope_length % 2 or rope_length > max_length:
            raise parameter_error(self, ValueError, f"rope_length must be even and at most max_length "
                                                    f"({max_length}), got {rope_length!r}")
        self._lanes = lanes
        self._slots = slots
        self._max_length = max_length
        self._rope_length = rope_length
        self._lane_units = [Lane(multiplier=multiplier) for _ in range(lanes)]
        self._reducer = Reducer(lanes=lanes, slots=slots)
        self._max_reducer = MaxReducer(lanes=lanes)
        self._rms_scale = RmsScale()
        self._grid_sum = GridSum(lanes)
        self._topk = TopK(lanes, max_k)
        super().__init__({
            "cmd": In(stream.Signature(VpuCommand)),
            "a": In(stream.Signature(vector_beat(lanes))),
            "b": In(stream.Signature(vector_beat(lanes))),
            "c": In(stream.Signature(vector_beat(lanes))),
            "o": Out(stream.Signature(result_beat(lanes))),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def slots(self):
        return self._slots

    @property
    def max_length(self):
        return self._max_length

    @property
    def rope_length(self):
        return self._rope_length

    @property
    def max_k(self):
        return self._topk.max_k

    @property
    def buffer_depth(self):
        """Result slots of the output buffer: enough for every result in flight plus its read delay."""
        return max(self._lane_units[0].max_latency, self._reducer.latency, self._max_reducer.latency) + 8

    def _topk_beats(self, k):
        """Result beats of one topk row: the values, then the indices."""
        lanes = self._lanes
        return ((k[:8] + lanes - 1) >> (lanes.bit_length() - 1)) << 1

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        for index, lane in enumerate(self._lane_units):
            m.submodules[f"lane{index}"] = lane
        m.submodules.reducer = reducer = self._reducer
        m.submodules.max_reducer = max_reducer = self._max_reducer
        m.submodules.rms_scale = rms_scale = self._rms_scale
        m.submodules.grid_sum = grid_sum = self._grid_sum
        m.submodules.topk = topk = self._topk
        rope_beats = -(-self._rope_length // lanes)
        m.submodules.rope_buffer = rope_buffer = Memory(shape=vector_beat(lanes), depth=rope_beats, init=[])
        rope_write = rope_buffer.write_port()
        rope_read = rope_buffer.read_port()
        m.submodules.buffer = buffer = CreditedBuffer(result_beat(lanes), self.buffer_depth)
        wiring.connect(m, buffer.o, wiring.flipped(self.o))

        # ---- the current command --------------------------------------------------------------------
        op = Signal(Op)
        # What the current pass does, decoded when the command is accepted and at each pass change.
        # (Kept in registers, not decoded from ``op`` combinationally: logic that reads only
        # registers never changing from their reset values is never evaluated by Icarus, whose
        # ``always @*`` waits for an input to change.)
        flags = {name: Signal(name=f"pass_{name}") for name in _pass_flags(op, 0)}
        composite = Signal()                   # a command of several passes per row
        passes = Signal(2)                     # passes per row, minus one
        pass_ = Signal(2)                      # the current pass
        waiting = Signal()                     # the next pass waits for the row's scalar
        rows = Signal(12)
        length = Signal(14)
        scalar0 = Signal(32)
        scalar1 = Signal(32)
        busy = Signal()
        beats_per_row = Signal(range(MAX_LENGTH // lanes + 2))
        beat = Signal.like(beats_per_row)      # beat index within the row
        row = Signal(12)
        # ``beat == beats_per_row - 1`` and ``row == rows - 1``, kept in registers beside the counters
        # so that the issue logic's fan-out starts at a flip-flop, not at a comparator.
        last_beat = Signal()
        last_row = Signal()
        tail = Signal(range(lanes + 1))        # valid lanes of a row's last beat

        # ---- result slots ---------------------------------------------------------------------------
        credits = Signal(range(self.buffer_depth + 1), init=self.buffer_depth)
        take = Signal(range(2 * self.max_k + 2))   # slots reserved this cycle
        give = buffer.o.valid & self.o.ready   # one slot freed this cycle
        m.d.sync += credits.eq(credits - take + give)
        in_flight = Signal(range(4 * self.buffer_depth + 1))   # results issued, not yet written

        # ---- command acceptance ---------------------------------------------------------------------
        p = self.cmd.payload
        eps_bad = (p.scalar0[23:31] == 0xFF) | (p.scalar0[31] & (p.scalar0[:31] != 0))
        rope_bad = p.length[0] | (p.length > self._rope_length)
        k_bad = (p.scalar0 == 0) | (p.scalar0 > self.max_k) | (p.scalar0 > p.length)
        cmd_ok = (_any_of(p.op, SUPPORTED) & (p.length != 0) & (p.length <= self._max_length)
                  & ~((p.op == Op.RMSNORM) & eps_bad) & ~((p.op == Op.ROPE) & rope_bad)
                  & ~((p.op == Op.TOPK) & k_bad))
        error_beat = Signal()
        m.d.comb += self.cmd.ready.eq(~busy & (in_flight == 0) & (credits != 0))
        passes_of_command = Const(0, 2)
        for each, count in PASSES.items():
            passes_of_command = Mux(p.op == each, count - 1, passes_of_command)
        with m.If(self.cmd.valid & self.cmd.ready):
            log2_lanes = lanes.bit_length() - 1
            in_last_beat = p.length[:log2_lanes] if lanes > 1 else Const(0, 1)   # length mod lanes
            with m.If(cmd_ok):
                m.d.sync += [
                    busy.eq(1), op.eq(p.op), length.eq(p.length),
                    composite.eq(_any_of(p.op, PASSES)),
                    passes.eq(passes_of_command),
                    pass_.eq(0), waiting.eq(0),
                    rows.eq(Mux(p.rows == 0, 1, p.rows)), scalar0.eq(p.scalar0), scalar1.eq(p.scalar1),
                    beats_per_row.eq((p.length + lanes - 1) >> log2_lanes),
                    tail.eq(Mux(in_last_beat == 0, lanes, in_last_beat)),
                    beat.eq(0), row.eq(0),
                    last_beat.eq(p.length <= lanes), last_row.eq(p.rows <= 1),
                ]
                m.d.sync += [flags[name].eq(value) for name, value in _pass_flags(p.op, 0).items()]
            with m.Else():
                m.d.comb += [error_beat.eq(1), take.eq(1)]

        # ---- issue ----------------------------------------------------------------------------------
        operands_valid = Signal()
        m.d.comb += operands_valid.eq(self.a.valid & (~flags["uses_b"] | self.b.valid)
                                      & (~flags["uses_c"] | self.c.valid))
        last_pass = pass_ == passes
        # A lane beat needs a result slot; a reduction's row needs one at its last beat, a topk row
        # all of its result beats.
        slot_needed = flags["lanes"] | ((flags["reduce_out"] | flags["topk"]) & last_beat)
        topk_beats = Signal(range(2 * self.max_k + 2))
        m.d.comb += topk_beats.eq(self._topk_beats(scalar0))
        slots_needed = Mux(flags["topk"], topk_beats, 1)
        reducer_ready = ((~flags["sum"] | reducer.i.ready) & (~flags["max"] | max_reducer.i.ready))
        issue = Signal()
        m.d.comb += issue.eq(busy & ~waiting & operands_valid & (~slot_needed | (credits >= slots_needed))
                             & ~error_beat & reducer_ready)
        m.d.comb += [self.a.ready.eq(issue), self.b.ready.eq(issue & flags["uses_b"]),
                     self.c.ready.eq(issue & flags["uses_c"])]
        with m.If(issue):
            m.d.comb += take.eq(Mux(slot_needed, slots_needed, 0))
            with m.If(last_beat):
                m.d.sync += [beat.eq(0), last_beat.eq(beats_per_row == 1)]
                with m.If(flags["topk"]):          # the next row waits for this one's merge
                    m.d.sync += waiting.eq(1)
                with m.If(~last_pass):
                    m.d.sync += [pass_.eq(pass_ + 1), waiting.eq(1)]
                    m.d.sync += [flags[name].eq(value) for name, value in _pass_flags(op, pass_ + 1).items()]
                with m.Else():
                    with m.If(composite):
                        m.d.sync += pass_.eq(0)
                        m.d.sync += [flags[name].eq(value) for name, value in _pass_flags(op, 0).items()]
                    with m.If(last_row):
                        m.d.sync += [row.eq(0), busy.eq(0)]
                    with m.Else():
                        m.d.sync += [row.eq(row + 1), last_row.eq(row + 2 == rows)]
            with m.Else():
                m.d.sync += [beat.eq(beat + 1), last_beat.eq(beat + 2 == beats_per_row)]

        # Lane mask of this beat: all lanes, or the row's tail on its last beat.
        mask = Signal(lanes)
        for j in range(lanes):
            m.d.comb += mask[j].eq(~last_beat | (j < tail))

        # ---- the row's scalars (composites) -----------------------------------------------------------
        row_bad = Signal()                     # the row's outputs are all NaN
        bad_pending = Signal()
        neg_max = Signal(32)
        scalar_done = Signal()
        # rmsnorm: the sum of squares (unrounded) starts the scale; its result ends the wait.
        m.d.comb += [rms_scale.start.eq(composite & reducer.o.valid), rms_scale.ss.eq(reducer.exact.acc),
                     rms_scale.n.eq(length), rms_scale.eps.eq(scalar0)]
        with m.If(composite & reducer.o.valid):
            m.d.sync += bad_pending.eq(reducer.exact.nan | reducer.exact.inf)
        with m.If(rms_scale.done):
            m.d.sync += row_bad.eq(bad_pending | rms_scale.zero)
            m.d.comb += scalar_done.eq(1)
        # softmax: the maximum (NaN or an infinity make the row bad), then the sum.
        with m.If(composite & max_reducer.o.valid):
            m.d.sync += [neg_max.eq(max_reducer.o.payload ^ 0x8000_0000),
                         row_bad.eq(max_reducer.o.payload[23:31] == 0xFF)]
            m.d.comb += scalar_done.eq(1)
        with m.If(grid_sum.done):
            m.d.comb += scalar_done.eq(1)
        # (rope: the row's last q written to the rope buffer, below.)
        with m.If(scalar_done):
            m.d.sync += waiting.eq(0)

        # ---- lanes --------------------------------------------------------------------------------
        lane0 = self._lane_units[0]
        rope = op == Op.ROPE
        position = Signal(range(MAX_LENGTH + lanes))        # of the beat's lane 0 in its row
        m.d.comb += position.eq(beat << (lanes.bit_length() - 1))
        for j, lane in enumerate(self._lane_units):
            m.d.comb += [
                lane.op.eq(op), lane.scalar0.eq(scalar0), lane.scalar1.eq(scalar1),
                lane.a.eq(self.a.payload[j]), lane.b.eq(self.b.payload[j]), lane.c.eq(self.c.payload[j]),
                lane.r_sig.eq(Mux(rope, 1 << 23, rms_scale.r_sig)),          # rope: r = 1
                lane.r_lsb.eq(Mux(rope, -23, rms_scale.r_lsb)),
                lane.neg_max.eq(neg_max),
                lane.divisor.eq(grid_sum.sig), lane.divisor_exp.eq(grid_sum.exp),
                lane.rope_sin.eq(flags["store"]),
                lane.negate.eq(flags["store"] & (position + j < (length >> 1))),
                lane.rope_q.eq(rope_read.data[j]),
            ]
        depth = lane0.max_latency
        # What each issued beat needs at the output, delayed stage by stage beside the lanes: stage 0
        # is the issue cycle, stage k the cycle its result leaves a lane of latency k.
        beat_info = data.StructLayout({"valid": 1, "last": 1, "mask": lanes, "bad": 1,
                                       "grid": 1, "store": 1, "first": 1, "row_last": 1,
                                       "index": range(max(rope_beats, 2))})
        line = [Signal(beat_info, name=f"beat_d{k}") for k in range(depth + 1)]
        # A bad row (NaN or an infinity in rmsnorm's sum of squares or softmax's maximum) makes only
        # that command's outputs NaN: the flag outlives the command, so later ones must not see it.
        scalar_bad = row_bad & ((op == Op.RMSNORM) | (op == Op.SOFTMAX))
        m.d.comb += [line[0].valid.eq(issue & flags["lanes"]), line[0].last.eq(last_beat & last_row),
                     line[0].mask.eq(mask), line[0].bad.eq(scalar_bad),
                     line[0].grid.eq(issue & flags["grid"]), line[0].first.eq(beat == 0),
                     line[0].store.eq(issue & flags["store"]), line[0].index.eq(beat),
                     line[0].row_last.eq(last_beat)]
        for k in range(depth):
            m.d.sync += line[k + 1].eq(line[k])
        # A new command moves the tap: the beats of the previous command still travelling down the
        # line past their own tap (every one of their results is written by then) are forgotten.
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [stage.valid.eq(0) for stage in line[1:]]
        # The beat at the tap of the command's latency, taken from the stage before it and registered
        # (equal to ``line[latency]``: the command cannot change while a beat of the previous one
        # is still ahead of its tap, since it waits for every result to be written).
        at_output = Signal(beat_info)
        with m.Switch(op):
            for each in LANE_OPS:
                with m.Case(each):
                    m.d.sync += at_output.eq(line[lane0.latency_of(each) - 1])
            with m.Default():                    # a reduction: no lane results
                m.d.sync += at_output.eq(0)

        # ---- rope's buffer: q written as it leaves the lanes, read for the FMA one cycle ahead -------
        at_store = line[lane0.product_latency]
        m.d.comb += [rope_write.en.eq(at_store.store), rope_write.addr.eq(at_store.index),
                     rope_read.addr.eq(line[lane0.product_latency - 1].index)]
        for j, lane in enumerate(self._lane_units):
            m.d.comb += rope_write.data[j].eq(lane.product)
        with m.If(at_store.store & at_store.row_last):
            m.d.comb += scalar_done.eq(1)

        # ---- topk ---------------------------------------------------------------------------------
        m.d.comb += [topk.valid.eq(issue & flags["topk"]), topk.first.eq(beat == 0),
                     topk.last.eq(last_beat), topk.mask.eq(mask), topk.index0.eq(position),
                     topk.k.eq(scalar0), topk.data.eq(self.a.payload)]
        with m.If(topk.out_valid & topk.out_last):
            m.d.comb += scalar_done.eq(1)

        # ---- softmax's sum ------------------------------------------------------------------------
        at_grid = line[lane0.grid_latency]
        m.d.comb += [grid_sum.valid.eq(at_grid.grid), grid_sum.first.eq(at_grid.first),
                     grid_sum.last.eq(at_grid.row_last), grid_sum.mask.eq(at_grid.mask)]
        for j, lane in enumerate(self._lane_units):
            m.d.comb += grid_sum.terms[j].eq(lane.grid)

        # ---- reducers -----------------------------------------------------------------------------
        # Rows go to the sum reducer or the max reducer; each answers one binary32 per row, in order.
        for unit, selected in ((reducer, flags["sum"]), (max_reducer, flags["max"])):
            m.d.comb += [
                unit.i.valid.eq(issue & selected),
                unit.i.payload.first.eq(beat == 0),
                unit.i.payload.last.eq(last_beat),
                unit.i.payload.mask.eq(mask),
            ]
            for j in range(lanes):
                m.d.comb += unit.i.payload.data[j].eq(self.a.payload[j])
        m.d.comb += reducer.i.payload.squares.eq(flags["squares"])
        # A row's result slot is reserved when its last beat is issued: results are always taken.
        m.d.comb += [reducer.o.ready.eq(1), max_reducer.o.ready.eq(1)]
        row_result = Signal(32)
        row_valid = Signal()
        m.d.comb += [row_valid.eq(~composite & (reducer.o.valid | max_reducer.o.valid)),
                     row_result.eq(Mux(reducer.o.valid, reducer.o.payload, max_reducer.o.payload))]
        # Results of the command's rows counted down: the last one carries ``last``.
        rows_left = Signal(12)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += rows_left.eq(Mux(self.cmd.payload.rows == 0, 1, self.cmd.payload.rows))
        with m.Elif(row_valid | (topk.out_valid & topk.out_last)):
            m.d.sync += rows_left.eq(rows_left - 1)

        # ---- output buffer ------------------------------------------------------------------------
        # What is written is chosen here and registered once before the buffer's write port.
        write_en = Signal()
        beat_out = Signal(result_beat(lanes))
        with m.If(at_output.valid):
            m.d.comb += [write_en.eq(1), beat_out.last.eq(at_output.last)]
            for j, lane in enumerate(self._lane_units):
                m.d.comb += beat_out.data[j].eq(Mux(at_output.mask[j],
                                                    Mux(at_output.bad, QNAN, lane.result), 0))
        with m.Elif(row_valid):
            m.d.comb += [write_en.eq(1), beat_out.data[0].eq(row_result),
                         beat_out.last.eq(rows_left == 1)]
        with m.Elif(topk.out_valid):
            m.d.comb += [write_en.eq(1), beat_out.data.eq(topk.out_data),
                         beat_out.last.eq(topk.out_last & (rows_left == 1))]
        # An error beat is chosen in the cycle its command is refused (the unit is idle then).
        with m.If(error_beat):
            m.d.comb += [write_en.eq(1), beat_out.error.eq(1), beat_out.last.eq(1)]
        m.d.sync += [buffer.w_en.eq(write_en), buffer.w_data.eq(beat_out)]

        # Results issued but not yet in the buffer (the next command waits for zero).
        m.d.sync += in_flight.eq(in_flight + take - buffer.w_en)
        return m
