"""The tile's VOP engine: checks a ``VOP`` instruction, streams its operands from the scratchpad to
the vector unit and writes the unit's results back."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rtl.tile.layouts import SPAD_EA_BITS, Status, VopCommand, vop_signature, wide_port_signature
from rtl.vpu.layouts import OPERANDS, REDUCTIONS, Op, VpuCommand, result_beat, vector_beat
from sim_models.tile_isa import TileConfig
from sim_models.vpu import MAX_LENGTH

__all__ = ["VopEngine", "PASS_OPERANDS"]

PASS_OPERANDS = {
    Op.RMSNORM: ("a", "ab"),
    Op.SOFTMAX: ("a", "a", "a"),
    Op.ROPE: ("ac", "ab"),
    Op.TOPK: ("a",),
    **{op: ("a",) for op in REDUCTIONS},
}
"""Operand streams of each pass over a row (the vector unit's contract); an operation not listed
makes one pass with all of its :data:`~rtl.vpu.layouts.OPERANDS`. ``rope``'s first pass brings
``a`` rotated by half the row (``x[n/2:]`` then ``x[:n/2]``)."""

_FIFO_DEPTH = 4


def _passes(op):
    return PASS_OPERANDS.get(op, ("".join(OPERANDS[op]),))


class VopEngine(wiring.Component):
    """Runs one ``VOP``: the checks of ``docs/tile_isa.md`` in the ISS's order, then the vector unit.

    Checks, in order (each answers its status without touching the vector unit): the fields
    (``bad_field``: operation code, ``len``, ``rows``), the ranges of ``a``, ``b``, ``c`` (those the
    operation reads) and of the destination (``spad_range``), a destination partly overlapping an
    operand (``bad_field``), then what the vector unit would refuse (``vpu_refused``: ``topk`` ``k``,
    ``rope`` length, ``rmsnorm`` ``eps``, ``clamp`` bounds), so it never sees a command it refuses.
    A command it answers with an error beat anyway also ends in ``vpu_refused``.

    Then one :data:`~rtl.vpu.layouts.VpuCommand` and, concurrently, the reader (row by row, pass by
    pass, beat by beat, one scratchpad row read per operand beat — two for a beat of ``rope``'s
    rotated pass that wraps around the row's end; broadcast operands repeat their row's first
    word) and the writer (every result beat written as it arrives: ``len`` words a row, one for a
    reduction, ``k`` values then ``k`` indices for ``topk``).

    Interface attributes
    --------------------
    ctl : ``In(vop_signature())``
        The sequencer's: one :data:`~rtl.tile.layouts.VopCommand`, then one status.
    spad : ``Out(wide_port_signature(spad_words, lanes))``
        The scratchpad's row port.
    vcmd, va, vb, vc, vo
        The vector unit's command, operand and result streams.

    Throughput: one operand beat per cycle (a command reading ``a`` and ``b`` feeds the unit a beat
    every two cycles); results are written as fast as they come. A ``chain`` command waits before
    each row's ``c`` for the previous row's result, so its rows pay the unit's latency one by one.

    Parameters
    ----------
    config : TileConfig
    extra_words : int
        Words beyond the scratchpad that ``internal`` commands may address (the attention engine's
        buffer, which the tile maps at word ``spad_words`` of ``spad``); a program's ``VOP`` never
        can: its ranges are checked against ``spad_words``.
    """

    def __init__(self, config: TileConfig | None = None, *, extra_words: int = 0):
        self.config = TileConfig() if config is None else config
        self.extra_words = extra_words
        lanes = self.config.lanes
        super().__init__({
            "ctl": In(vop_signature()),
            "spad": Out(wide_port_signature(self.config.spad_words + extra_words, lanes)),
            "vcmd": Out(stream.Signature(VpuCommand)),
            "va": Out(stream.Signature(vector_beat(lanes))),
            "vb": Out(stream.Signature(vector_beat(lanes))),
            "vc": Out(stream.Signature(vector_beat(lanes))),
            "vo": In(stream.Signature(result_beat(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes = cfg.lanes
        shift = (lanes - 1).bit_length()
        c = Signal(VopCommand)                       # the command being run
        op = c.op

        # -- what the operation reads and writes -----------------------------------------------------
        npasses = Signal(2)
        uses = Signal(3)                            # operands read in any pass (a, b, c)
        pass_uses = Array(Signal(3, name=f"pass{k}_uses") for k in range(3))
        is_reduction = Signal()
        is_topk, is_rope = op == Op.TOPK, op == Op.ROPE
        with m.Switch(op):
            for o in Op:
                with m.Case(o):
                    passes = _passes(o)
                    m.d.comb += npasses.eq(len(passes) - 1)
                    for k, names in enumerate(passes):
                        m.d.comb += pass_uses[k].eq(sum(1 << "abc".index(x) for x in names))
                    m.d.comb += uses.eq(sum(1 << "abc".index(x) for x in OPERANDS[o]))
                    m.d.comb += is_reduction.eq(o in REDUCTIONS)
        k_value = c.scalar0
        out_width = Signal(34)                      # result words per row
        m.d.comb += out_width.eq(Mux(is_reduction, 1, Mux(is_topk, k_value << 1, c.len)))

        # -- checks -----------------------------------------------------------------------------------
        bases = [c.a, c.b, c.c, c.dst]
        strides = [c.a_s, c.b_s, c.c_s, c.dst_s]
        widths = [Mux(c.bcast[i], 1, c.len) for i in range(3)] + [out_width]
        ends = [Signal(SPAD_EA_BITS + 30, name=f"end_{n}") for n in "abcd"]
        for i in range(4):
            m.d.sync += ends[i].eq(bases[i] + (c.rows - 1) * strides[i] + widths[i])
        limit = Mux(c.internal, cfg.spad_words + self.extra_words, cfg.spad_words)
        in_range = [ends[i] <= limit for i in range(4)]
        partial = []
        for i in range(3):
            meets = (bases[i] < ends[3]) & (c.dst < ends[i])
            same = ((c.a, c.b, c.c)[i] == c.dst) & (strides[i] == c.dst_s) & ~c.bcast[i] & \
                ((c.rows == 1) | ((strides[i] >= c.len) & (strides[i] >= out_width)))
            partial.append(uses[i] & meets & ~same & ~c.internal)
        eps = c.scalar0
        lo, hi = c.scalar0, c.scalar1

        def is_nan(x):
            return (x[23:31] == 0xFF) & (x[:23] != 0)

        lo_above_hi = Mux(lo[31] != hi[31], ~lo[31],
                          Mux(lo[31], lo[:31] < hi[:31], lo[:31] > hi[:31]))
        refused = (is_topk & ((k_value == 0) | (k_value > c.len) | (k_value > cfg.vpu_max_k))) | \
            (is_rope & (c.len[0] | (c.len > cfg.vpu_rope_length))) | \
            ((op == Op.RMSNORM) & ((eps[23:31] == 0xFF) | (eps[31] & (eps[:31] != 0)))) | \
            ((op == Op.CLAMP) & (is_nan(lo) | is_nan(hi) | lo_above_hi))

        # -- reader -----------------------------------------------------------------------------------
        fifos = [SyncFIFOBuffered(width=32 * lanes, depth=_FIFO_DEPTH) for _ in range(3)]
        flush = Signal()                            # empties the FIFOs before a command streams
        fifos = [ResetInserter(flush)(f) for f in fifos]
        for name, fifo, port in zip("abc", fifos, (self.va, self.vb, self.vc), strict=True):
            m.submodules[f"fifo_{name}"] = fifo
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data), fifo.r_en.eq(port.ready)]
        inflight = [Signal(range(_FIFO_DEPTH + 1), name=f"inflight_{n}") for n in "abc"]
        room = Array(fifos[i].level + inflight[i] < _FIFO_DEPTH for i in range(3))

        reading = Signal()                          # the reader has items left
        row = Signal(12)
        k = Signal(2)
        beat = Signal(11)
        x = Signal(2)                               # operand of the current item
        col = Signal(14)                            # beat * lanes
        rot = Signal(14)                            # rope's rotated element offset of this beat
        row_base = [Signal(SPAD_EA_BITS, name=f"row_{n}") for n in "abc"]
        second = Signal()                           # the second read of a wrapping beat is next
        beats_per_row = (c.len + lanes - 1) >> shift
        cur_uses = pass_uses[k]

        # The item's reads and the tag of the read in flight (its data arrives next cycle).
        tag_valid, tag_x, tag_final, tag_merge, tag_bcast = Signal(), Signal(2), Signal(), Signal(), Signal()
        tag_cut = Signal(range(lanes + 1))
        merge = Signal(data.ArrayLayout(32, lanes))
        rotated = is_rope & (k == 0) & (x == 0)
        wraps = rotated & (rot + lanes > c.len)
        cut = c.len - rot                           # lanes below it come from the first read
        rb = Array(row_base)[x]
        bcast = Array(c.bcast[i] for i in range(3))[x]

        later = Signal(3)                           # operands of this pass after x
        m.d.comb += later.eq(cur_uses & ~((Const(2, 3) << x) - 1))

        issue_first = Signal()                     # an item's first (or only) read goes out
        advance = Signal()                         # the item is complete: on to the next one
        with m.If(reading & second):
            # words rb + rot - len + j for j >= cut: the row's first words; below the scratchpad's
            # first word the address wraps (a program's rope row is in the scratchpad)
            m.d.comb += [self.spad.rd_addr.eq(Mux(rb + rot < c.len, rb + rot + cfg.spad_words - c.len,
                                                  rb + rot - c.len)),
                         self.spad.rd_en.eq(1), advance.eq(1)]
            m.d.sync += [tag_valid.eq(1), tag_x.eq(x), tag_final.eq(1), tag_merge.eq(1),
                         tag_bcast.eq(0), tag_cut.eq(cut), second.eq(0)]
        rows_done = Signal(12)                      # result rows written (for chained commands)
        chain_ok = ~c.chain | (x != 2) | (rows_done >= row)
        with m.Elif(reading & room[x] & chain_ok):
            m.d.comb += [self.spad.rd_addr.eq(Mux(bcast, rb, Mux(rotated, rb + rot, rb + col))),
                         self.spad.rd_en.eq(1), issue_first.eq(1), advance.eq(~wraps)]
            m.d.sync += [tag_valid.eq(1), tag_x.eq(x), tag_final.eq(~wraps), tag_merge.eq(0),
                         tag_bcast.eq(bcast), second.eq(wraps)]
        with m.Else():
            m.d.sync += tag_valid.eq(0)

        def first_operand(u):
            return Mux(u[0], 0, Mux(u[1], 1, 2))

        with m.If(advance):
            with m.If(later != 0):
                m.d.sync += x.eq(first_operand(later))
            with m.Else():
                m.d.sync += x.eq(first_operand(cur_uses))
                with m.If(beat + 1 < beats_per_row):
                    m.d.sync += [beat.eq(beat + 1), col.eq(col + lanes),
                                 rot.eq(Mux(rot + lanes >= c.len, rot + lanes - c.len, rot + lanes))]
                with m.Else():
                    m.d.sync += [beat.eq(0), col.eq(0), rot.eq(c.len >> 1)]
                    with m.If(k < npasses):
                        m.d.sync += [k.eq(k + 1), x.eq(first_operand(pass_uses[k + 1]))]
                    with m.Else():
                        m.d.sync += [k.eq(0), x.eq(first_operand(pass_uses[0]))]
                        m.d.sync += [row_base[i].eq(row_base[i] + strides[i]) for i in range(3)]
                        with m.If(row + 1 < c.rows):
                            m.d.sync += row.eq(row + 1)
                        with m.Else():
                            m.d.sync += reading.eq(0)

        # The read data: broadcast, merged, pushed into its operand's FIFO.
        word = Signal(data.ArrayLayout(32, lanes))
        for j in range(lanes):
            m.d.comb += word[j].eq(Mux(tag_bcast, self.spad.rd_data[0],
                                       Mux(tag_merge & (j < tag_cut), merge[j], self.spad.rd_data[j])))
        with m.If(tag_valid & ~tag_final):
            m.d.sync += merge.eq(self.spad.rd_data)
        for i in range(3):
            push = tag_valid & tag_final & (tag_x == i)
            m.d.comb += [fifos[i].w_en.eq(push), fifos[i].w_data.eq(word)]
            m.d.sync += inflight[i].eq(inflight[i] + (issue_first & (x == i)) - push)

        # -- writer -----------------------------------------------------------------------------------
        part_words = Mux(is_topk, k_value, Mux(is_reduction, 1, c.len))   # words of a row's first part
        out_row_base = Signal(SPAD_EA_BITS)
        out_beat = Signal(12)
        out_col = Signal(34)
        out_left = Signal(34)                      # words of the row part still to write
        k_beats = (k_value[:12] + lanes - 1) >> shift
        out_beats = Mux(is_reduction, 1, Mux(is_topk, k_beats << 1, beats_per_row))
        m.d.comb += [self.spad.wr_addr.eq(out_row_base + out_col),
                     self.spad.wr_mask.eq(Cat((j < out_left) for j in range(lanes))),
                     self.spad.wr_data.eq(self.vo.payload.data)]
        got_last, got_error = Signal(), Signal()

        # -- control ----------------------------------------------------------------------------------
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.ctl.cmd.ready.eq(1)
                with m.If(self.ctl.cmd.valid):
                    m.d.sync += c.eq(self.ctl.cmd.payload)
                    m.next = "FIELDS"
            with m.State("FIELDS"):                 # ends[] are being computed
                m.d.comb += flush.eq(1)
                m.d.sync += [inflight[i].eq(0) for i in range(3)] + [tag_valid.eq(0)]
                with m.If((op > Op.TOPK) | (c.len == 0) | (c.len > MAX_LENGTH) | (c.rows == 0)):
                    m.d.sync += self.ctl.resp.payload.status.eq(Status.BAD_FIELD)
                    m.next = "RESPOND"
                with m.Else():
                    m.next = "CHECK"
            with m.State("CHECK"):
                status = Mux(uses[0] & ~in_range[0], Status.SPAD_RANGE,
                         Mux(uses[1] & ~in_range[1], Status.SPAD_RANGE,
                         Mux(uses[2] & ~in_range[2], Status.SPAD_RANGE,
                         Mux(~in_range[3], Status.SPAD_RANGE,
                         Mux(partial[0] | partial[1] | partial[2], Status.BAD_FIELD,
                         Mux(refused, Status.VPU_REFUSED, Status.OK))))))
                m.d.sync += self.ctl.resp.payload.status.eq(status)
                with m.If(status != Status.OK):
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += [reading.eq(1), row.eq(0), k.eq(0), beat.eq(0), col.eq(0),
                                 rot.eq(c.len >> 1), second.eq(0),
                                 x.eq(first_operand(pass_uses[0])),
                                 *[row_base[i].eq(bases[i]) for i in range(3)],
                                 out_row_base.eq(c.dst), out_beat.eq(0), out_col.eq(0),
                                 out_left.eq(part_words), rows_done.eq(0),
                                 got_last.eq(0), got_error.eq(0)]
                    m.next = "COMMAND"
            with m.State("COMMAND"):
                m.d.comb += [self.vcmd.valid.eq(1), self.vcmd.payload.op.eq(op),
                             self.vcmd.payload.length.eq(c.len), self.vcmd.payload.rows.eq(c.rows),
                             self.vcmd.payload.scalar0.eq(c.scalar0), self.vcmd.payload.scalar1.eq(c.scalar1)]
                with m.If(self.vcmd.ready):
                    m.next = "STREAM"
            with m.State("STREAM"):
                m.d.comb += self.vo.ready.eq(1)
                with m.If(self.vo.valid):
                    with m.If(self.vo.payload.error):
                        m.d.sync += [self.ctl.resp.payload.status.eq(Status.VPU_REFUSED), reading.eq(0)]
                        m.next = "RESPOND"
                    with m.Else():
                        m.d.comb += self.spad.wr_en.eq(1)
                        with m.If(out_beat + 1 == out_beats):           # the row's last result beat
                            m.d.sync += [out_beat.eq(0), out_col.eq(0), rows_done.eq(rows_done + 1),
                                         out_row_base.eq(out_row_base + c.dst_s),
                                         out_left.eq(part_words)]
                        with m.Elif(is_topk & (out_beat + 1 == k_beats)):  # values done: indices
                            m.d.sync += [out_beat.eq(out_beat + 1), out_col.eq(k_value), out_left.eq(k_value)]
                        with m.Else():
                            m.d.sync += [out_beat.eq(out_beat + 1), out_col.eq(out_col + lanes),
                                         out_left.eq(out_left - lanes)]
                        with m.If(self.vo.payload.last):
                            m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += self.ctl.resp.valid.eq(1)
                with m.If(self.ctl.resp.ready):
                    m.next = "IDLE"
        return m
