"""The vector unit: ``lanes`` binary32 lanes, a reducer and a command sequencer, with stream interfaces."""


from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.credited_buffer import CreditedBuffer
from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.lane import Lane
from rtl.vpu.layouts import (
    ELEMENTWISE,
    MAX_LENGTH,
    OPERANDS,
    REDUCTIONS,
    Op,
    VpuCommand,
    result_beat,
    vector_beat,
)
from rtl.vpu.max_reducer import MaxReducer
from rtl.vpu.reducer import Reducer

__all__ = ["VectorUnit", "SUPPORTED"]

SUPPORTED = ELEMENTWISE + REDUCTIONS
"""Operations this build runs; any other command is answered with an error beat."""


class VectorUnit(wiring.Component):
    """A SIMD unit of ``lanes`` binary32 lanes running one command at a time, bit-exact to the model.

    A command (:data:`~rtl.vpu.layouts.VpuCommand`) names an operation, a row length ``n`` and a
    number of rows. Each row arrives on the operand streams the operation uses
    (:data:`~rtl.vpu.layouts.OPERANDS`) as ``ceil(n / lanes)`` beats of ``lanes`` elements, element
    ``i`` in lane ``i % lanes``; the lanes of a row's last beat beyond ``n`` are ignored. Results leave
    on ``o``:

    * element-wise operations: one beat per operand beat, the lanes beyond ``n`` zero;
    * reductions (``sum``, ``sum_squares``, ``max_reduce``): one beat per row, the result in lane 0 and
      zeros elsewhere, in the accumulation order of ``sim_models.vpu`` for ``lanes`` and ``slots``.

    ``o.payload.last`` marks the command's final beat. A command with ``length`` 0, a ``length`` above
    ``max_length`` or an operation this build does not run (:data:`SUPPORTED`) consumes no operands
    and is answered by one beat with ``error`` set (data zero, ``last`` set).

    Flow control: the sequencer issues a beat only when every operand stream it needs is valid and a
    result slot is free in the output buffer, so the lanes never stall and results are never
    dropped, whatever the back-pressure on ``o``. A command is accepted when the previous one's beats
    are all issued and its results have left the lanes (the lanes' latency is paid once per command).

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

    def __init__(self, lanes=8, *, slots=4, multiplier="dsp", max_length=MAX_LENGTH):
        check_positive_int(self, "lanes", lanes)
        if lanes & (lanes - 1):
            raise parameter_error(self, ValueError, f"lanes must be a power of two, got {lanes!r}")
        check_positive_int(self, "max_length", max_length)
        if max_length > MAX_LENGTH:
            raise parameter_error(self, ValueError,
                                  f"max_length must be at most {MAX_LENGTH}, got {max_length!r}")
        self._lanes = lanes
        self._slots = slots
        self._max_length = max_length
        self._lane_units = [Lane(multiplier=multiplier) for _ in range(lanes)]
        self._reducer = Reducer(lanes=lanes, slots=slots)
        self._max_reducer = MaxReducer(lanes=lanes)
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
    def buffer_depth(self):
        """Result slots of the output buffer: enough for every result in flight plus its read delay."""
        return max(self._lane_units[0].max_latency, self._reducer.latency, self._max_reducer.latency) + 8

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        for index, lane in enumerate(self._lane_units):
            m.submodules[f"lane{index}"] = lane
        m.submodules.reducer = reducer = self._reducer
        m.submodules.max_reducer = max_reducer = self._max_reducer
        m.submodules.buffer = buffer = CreditedBuffer(result_beat(lanes), self.buffer_depth)
        wiring.connect(m, buffer.o, wiring.flipped(self.o))

        # ---- the current command --------------------------------------------------------------------
        op = Signal(Op)
        # Decoded from ``op`` when the command is accepted. (Kept in registers, not decoded from
        # ``op`` combinationally: logic that reads only registers never changing from their reset
        # values is never evaluated by Icarus, whose ``always @*`` waits for an input to change.)
        to_sum = Signal()                      # rows go to the sum reducer
        to_max = Signal()                      # rows go to the max reducer
        reduction = Signal()
        uses_b = Signal()                      # the operation reads operand stream b
        uses_c = Signal()                      # ... and c (every operation reads a)
        rows = Signal(12)
        scalar0 = Signal(32)
        scalar1 = Signal(32)
        busy = Signal()
        beats_per_row = Signal(range(MAX_LENGTH // lanes + 2))
        beat = Signal.like(beats_per_row)      # beat index within the row
        row = Signal(12)
        tail = Signal(range(lanes + 1))        # valid lanes of a row's last beat

        # ---- result slots ---------------------------------------------------------------------------
        credits = Signal(range(self.buffer_depth + 1), init=self.buffer_depth)
        take = Signal()                        # reserve one slot this cycle
        give = buffer.o.valid & self.o.ready   # one slot freed this cycle
        m.d.sync += credits.eq(credits - take + give)
        in_flight = Signal(range(4 * self.buffer_depth + 1))   # results issued, not yet written

        # ---- command acceptance ---------------------------------------------------------------------
        supported = Signal()
        m.d.comb += supported.eq(Cat(self.cmd.payload.op == each for each in SUPPORTED).any())
        cmd_ok = supported & (self.cmd.payload.length != 0) & (self.cmd.payload.length <= self._max_length)
        error_beat = Signal()
        m.d.comb += self.cmd.ready.eq(~busy & (in_flight == 0) & (credits != 0))
        with m.If(self.cmd.valid & self.cmd.ready):
            p = self.cmd.payload
            log2_lanes = lanes.bit_length() - 1
            in_last_beat = p.length[:log2_lanes] if lanes > 1 else Const(0, 1)   # length mod lanes
            with m.If(cmd_ok):
                m.d.sync += [
                    busy.eq(1), op.eq(p.op),
                    to_sum.eq((p.op == Op.SUM) | (p.op == Op.SUM_SQUARES)),
                    to_max.eq(p.op == Op.MAX_REDUCE),
                    reduction.eq((p.op == Op.SUM) | (p.op == Op.SUM_SQUARES) | (p.op == Op.MAX_REDUCE)),
                    uses_b.eq(Cat(p.op == each for each in SUPPORTED if "b" in OPERANDS[each]).any()),
                    uses_c.eq(Cat(p.op == each for each in SUPPORTED if "c" in OPERANDS[each]).any()),
                    rows.eq(Mux(p.rows == 0, 1, p.rows)), scalar0.eq(p.scalar0), scalar1.eq(p.scalar1),
                    beats_per_row.eq((p.length + lanes - 1) >> log2_lanes),
                    tail.eq(Mux(in_last_beat == 0, lanes, in_last_beat)),
                    beat.eq(0), row.eq(0),
                ]
            with m.Else():
                m.d.comb += [error_beat.eq(1), take.eq(1)]

        # ---- issue ----------------------------------------------------------------------------------
        operands_valid = Signal()
        m.d.comb += operands_valid.eq(self.a.valid & (~uses_b | self.b.valid) & (~uses_c | self.c.valid))
        last_beat = beat == beats_per_row - 1
        last_row = row == rows - 1
        # An element-wise beat needs a result slot; a reduction row needs one at its last beat.
        slot_needed = ~reduction | last_beat
        reducer_ready = Mux(to_max, max_reducer.i.ready, reducer.i.ready)
        issue = Signal()
        m.d.comb += issue.eq(busy & operands_valid & (~slot_needed | (credits != 0)) & ~error_beat
                             & (~reduction | reducer_ready))
        m.d.comb += [self.a.ready.eq(issue), self.b.ready.eq(issue & uses_b), self.c.ready.eq(issue & uses_c)]
        with m.If(issue):
            m.d.comb += take.eq(slot_needed)
            with m.If(last_beat):
                m.d.sync += beat.eq(0)
                with m.If(last_row):
                    m.d.sync += [row.eq(0), busy.eq(0)]
                with m.Else():
                    m.d.sync += row.eq(row + 1)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # Lane mask of this beat: all lanes, or the row's tail on its last beat.
        mask = Signal(lanes)
        for j in range(lanes):
            m.d.comb += mask[j].eq(~last_beat | (j < tail))

        # ---- lanes --------------------------------------------------------------------------------
        issue_elementwise = issue & ~reduction
        for j, lane in enumerate(self._lane_units):
            m.d.comb += [
                lane.op.eq(op), lane.scalar0.eq(scalar0), lane.scalar1.eq(scalar1),
                lane.a.eq(self.a.payload[j]), lane.b.eq(self.b.payload[j]), lane.c.eq(self.c.payload[j]),
            ]
        lane0 = self._lane_units[0]
        depth = lane0.max_latency
        # What each issued beat needs at the output, delayed stage by stage beside the lanes: stage 0
        # is the issue cycle, stage k the cycle its result leaves a lane of latency k.
        beat_info = data.StructLayout({"valid": 1, "last": 1, "mask": lanes})
        line = [Signal(beat_info, name=f"beat_d{k}") for k in range(depth + 1)]
        m.d.comb += [line[0].valid.eq(issue_elementwise), line[0].last.eq(last_beat & last_row),
                     line[0].mask.eq(mask)]
        for k in range(depth):
            m.d.sync += line[k + 1].eq(line[k])
        # A new command moves the tap: the beats of the previous command still travelling down the
        # line past their own tap (every one of their results is written by then) are forgotten.
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [stage.valid.eq(0) for stage in line[1:]]
        at_output = Signal(beat_info)
        with m.Switch(op):
            for each in ELEMENTWISE:
                with m.Case(each):
                    m.d.comb += at_output.eq(line[lane0.latency_of(each)])
            with m.Default():                    # a reduction: no lane results
                m.d.comb += at_output.eq(0)

        # ---- reducers -----------------------------------------------------------------------------
        # Rows go to the sum reducer or the max reducer; each answers one binary32 per row, in order.
        # ``row_last`` tags follow the rows through a small FIFO of their own: a row's result marks
        # the command's last beat when its row was the command's last.
        for unit, selected in ((reducer, to_sum), (max_reducer, to_max)):
            m.d.comb += [
                unit.i.valid.eq(issue & selected),
                unit.i.payload.first.eq(beat == 0),
                unit.i.payload.last.eq(last_beat),
                unit.i.payload.mask.eq(mask),
            ]
            for j in range(lanes):
                m.d.comb += unit.i.payload.data[j].eq(self.a.payload[j])
        m.d.comb += reducer.i.payload.squares.eq(op == Op.SUM_SQUARES)
        # A row's result slot is reserved when its last beat is issued: results are always taken.
        m.d.comb += [reducer.o.ready.eq(1), max_reducer.o.ready.eq(1)]
        row_result = Signal(32)
        row_valid = Signal()
        m.d.comb += [row_valid.eq(reducer.o.valid | max_reducer.o.valid),
                     row_result.eq(Mux(reducer.o.valid, reducer.o.payload, max_reducer.o.payload))]
        # Results of the command's rows counted down: the last one carries ``last``.
        rows_left = Signal(12)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += rows_left.eq(Mux(self.cmd.payload.rows == 0, 1, self.cmd.payload.rows))
        with m.Elif(row_valid):
            m.d.sync += rows_left.eq(rows_left - 1)

        # ---- output buffer ------------------------------------------------------------------------
        beat_out = buffer.w_data
        with m.If(at_output.valid):
            m.d.comb += [buffer.w_en.eq(1), beat_out.last.eq(at_output.last)]
            for j, lane in enumerate(self._lane_units):
                m.d.comb += beat_out.data[j].eq(Mux(at_output.mask[j], lane.result, 0))
        with m.Elif(row_valid):
            m.d.comb += [buffer.w_en.eq(1), beat_out.data[0].eq(row_result),
                         beat_out.last.eq(rows_left == 1)]
        # An error beat is written in the cycle its command is refused (the unit is idle then).
        error_reg = Signal()
        m.d.sync += error_reg.eq(error_beat)
        with m.If(error_reg):
            m.d.comb += [buffer.w_en.eq(1), beat_out.error.eq(1), beat_out.last.eq(1)]

        # Results issued but not yet in the buffer (the next command waits for zero).
        m.d.sync += in_flight.eq(in_flight + take - buffer.w_en)
        return m
