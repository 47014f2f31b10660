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

    Throughput: one operand beat per cycle from one memory (a command reading ``a`` and ``b`` from
    the scratchpad feeds the unit a beat every two cycles); when every operand of a pass lies in a
    different memory (the scratchpad, the extra memories: the attention engine's commands), all of
    a beat's operands are read in the same cycle. Results are written as fast as they come. A
    ``chain`` command waits before each row's ``c`` for the result ``group`` rows back (the previous
    row's in a plain command), so a plain chain pays the unit's latency row by row and a chain over
    ``group`` interleaved accumulations hides it once ``group`` rows take longer than the latency.

    The attention engine's ``internal`` commands may be two-dimensional (``group``, the ``_si``
    strides of :data:`~rtl.tile.layouts.VopCommand`) and are not range-checked: their addresses are
    in the scratchpad or the engine's buffer by construction.

    Parameters
    ----------
    config : TileConfig
    extra_memories : tuple of int
        Words of each memory beyond the scratchpad that ``internal`` commands may address (the
        attention engine's buffers), mapped one after the other from word ``spad_words``; port
        ``extra<e>`` reaches memory ``e`` at its own word addresses. A program's ``VOP`` never can:
        its ranges are checked against ``spad_words``.
    """

    def __init__(self, config: TileConfig | None = None, *, extra_memories: tuple = ()):
        self.config = TileConfig() if config is None else config
        self.extra_memories = tuple(extra_memories)
        lanes = self.config.lanes
        extra = {f"extra{e}": Out(wide_port_signature(words, lanes))
                 for e, words in enumerate(self.extra_memories)}
        super().__init__({
            "ctl": In(vop_signature()),
            "spad": Out(wide_port_signature(self.config.spad_words, lanes)),
            **extra,
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
        # the attention engine's internal commands address its buffer by construction (and may be
        # two-dimensional, which the end formula does not cover): only a program's VOP is checked
        in_range = [c.internal | (ends[i] <= cfg.spad_words) for i in range(4)]
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
        # Memory 0 is the scratchpad, memories 1.. the extra ones, at consecutive addresses from
        # spad_words. A row lies in one memory, so an operand's memory follows from its row base.
        ports = [self.spad] + [getattr(self, f"extra{e}") for e in range(len(self.extra_memories))]
        mem_bases = [0, cfg.spad_words]
        for words in self.extra_memories:
            mem_bases.append(mem_bases[-1] + words)
        nmem = len(ports)

        def memory_of(addr):
            return sum((addr >= mem_bases[e]).as_unsigned() for e in range(1, nmem)) if nmem > 1 else 0

        fifos = [SyncFIFOBuffered(width=32 * lanes, depth=_FIFO_DEPTH) for _ in range(3)]
        flush = Signal()                            # empties the FIFOs before a command streams
        fifos = [ResetInserter(flush)(f) for f in fifos]
        for name, fifo, port in zip("abc", fifos, (self.va, self.vb, self.vc), strict=True):
            m.submodules[f"fifo_{name}"] = fifo
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data), fifo.r_en.eq(port.ready)]
        inflight = [Signal(range(_FIFO_DEPTH + 1), name=f"inflight_{n}") for n in "abc"]
        room = [fifos[i].level + inflight[i] < _FIFO_DEPTH for i in range(3)]

        reading = Signal()                          # the reader has items left
        row = Signal(12)
        k = Signal(2)
        beat = Signal(11)
        x = Signal(2)                               # operand of the current item
        col = Signal(14)                            # beat * lanes
        rot = Signal(14)                            # rope's rotated element offset of this beat
        row_base = [Signal(SPAD_EA_BITS, name=f"row_{n}") for n in "abc"]
        group_base = [Signal(SPAD_EA_BITS, name=f"group_{n}") for n in "abc"]   # row_base at j = 0
        member = Signal(8)                          # j: the row's index in its group
        group_end = member + 1 >= c.group           # always, for plain (group 0 or 1) commands
        inner_strides = [c.a_si, c.b_si, c.c_si]
        second = Signal()                           # the second read of a wrapping beat is next
        beats_per_row = (c.len + lanes - 1) >> shift
        cur_uses = pass_uses[k]
        operand_mem = [Signal(range(nmem), name=f"mem_{n}") for n in "abc"]
        for i in range(3):
            m.d.comb += operand_mem[i].eq(memory_of(row_base[i]))

        # Per memory, the tag of the read in flight (its data arrives next cycle).
        tag_valid = [Signal(name=f"tag{e}_valid") for e in range(nmem)]
        tag_x = [Signal(2, name=f"tag{e}_x") for e in range(nmem)]
        tag_final = [Signal(name=f"tag{e}_final") for e in range(nmem)]
        tag_merge = [Signal(name=f"tag{e}_merge") for e in range(nmem)]
        tag_bcast = [Signal(name=f"tag{e}_bcast") for e in range(nmem)]
        tag_cut = Signal(range(lanes + 1))          # of the wrapping beat's second read
        merge = Signal(data.ArrayLayout(32, lanes))
        rotated = is_rope & (k == 0) & (x == 0)
        wraps = rotated & (rot + lanes > c.len)
        cut = c.len - rot                           # lanes below it come from the first read
        rb = Array(row_base)[x]
        x_mem = Array(operand_mem)[x]
        bcast = Array(c.bcast[i] for i in range(3))[x]

        def address(base, broadcast, rotated=None):
            """The read address of this beat of an operand whose row starts at ``base``: the row's
            first word when ``broadcast``, rope's rotated element when ``rotated``."""
            element = base + col if rotated is None else Mux(rotated, base + rot, base + col)
            return Mux(broadcast, base, element)

        def first_operand(u):
            """The first operand of ``u``, a set of operand bits."""
            return Mux(u[0], 0, Mux(u[1], 1, 2))

        later = Signal(3)                           # operands of this pass after x
        m.d.comb += later.eq(cur_uses & ~((Const(2, 3) << x) - 1))

        rows_done = Signal(12)                      # result rows written (for chained commands)
        chain_ok = ~c.chain | (rows_done + Mux(c.group > 1, c.group, 1) > row)

        # The fast path: at a beat's first operand, every operand of the pass read in this cycle when
        # they lie in different memories (the attention engine's commands); else one per cycle.
        first = Signal(2)
        m.d.comb += first.eq(first_operand(cur_uses))
        distinct = Const(1)
        for i in range(3):
            for j in range(i + 1, 3):
                distinct = distinct & ~(cur_uses[i] & cur_uses[j] & (operand_mem[i] == operand_mem[j]))
        ready_all = Const(1)
        for i in range(3):
            ready_all = ready_all & (~cur_uses[i] | (room[i] & ((i != 2) | chain_ok)))
        fast = Signal()
        m.d.comb += fast.eq(reading & ~second & (x == first) & ~(is_rope & (k == 0)) & distinct & ready_all)

        issue = Signal(3)                           # operands whose (first) read goes out this cycle
        advance = Signal()                          # the item is complete: on to the next one
        beat_done = Signal()                        # every operand of the beat is out
        with m.If(fast):
            for i in range(3):
                with m.If(cur_uses[i]):
                    for e in range(nmem):
                        with m.If(operand_mem[i] == e):
                            m.d.comb += [ports[e].rd_addr.eq(address(row_base[i], c.bcast[i]) - mem_bases[e]),
                                         ports[e].rd_en.eq(1)]
            m.d.comb += issue.eq(cur_uses)
        with m.Elif(reading & second):
            # words rb + rot - len + j for j >= cut: the row's first words; below the scratchpad's
            # first word the address wraps (a program's rope row is in the scratchpad)
            m.d.comb += [self.spad.rd_addr.eq(Mux(rb + rot < c.len, rb + rot + cfg.spad_words - c.len,
                                                  rb + rot - c.len)),
                         self.spad.rd_en.eq(1), advance.eq(1)]
        with m.Elif(reading & Array(room)[x] & ((x != 2) | chain_ok)):
            for e in range(nmem):
                with m.If(x_mem == e):
                    m.d.comb += [ports[e].rd_addr.eq(address(rb, bcast, rotated) - mem_bases[e]),
                                 ports[e].rd_en.eq(1)]
            m.d.comb += [issue.eq(1 << x), advance.eq(~wraps)]
        m.d.comb += beat_done.eq(fast | (advance & (later == 0)))

        # tags: what each memory's read of this cycle is for
        for e in range(nmem):
            with m.If(fast):
                m.d.sync += [tag_valid[e].eq(0), tag_final[e].eq(1), tag_merge[e].eq(0)]
                for i in range(3):
                    with m.If(cur_uses[i] & (operand_mem[i] == e)):
                        m.d.sync += [tag_valid[e].eq(1), tag_x[e].eq(i), tag_bcast[e].eq(c.bcast[i])]
            if e == 0:      # a wrapping beat's second read is always the scratchpad's (a rope row)
                with m.Elif(reading & second):
                    m.d.sync += [tag_valid[e].eq(1), tag_x[e].eq(x), tag_final[e].eq(1),
                                 tag_merge[e].eq(1), tag_bcast[e].eq(0)]
            with m.Elif((issue != 0) & (x_mem == e)):
                m.d.sync += [tag_valid[e].eq(1), tag_x[e].eq(x), tag_final[e].eq(~wraps), tag_merge[e].eq(0),
                             tag_bcast[e].eq(bcast)]
            with m.Else():
                m.d.sync += tag_valid[e].eq(0)
        with m.If(reading & second):
            m.d.sync += [tag_cut.eq(cut), second.eq(0)]
        with m.Elif(~fast & (issue != 0)):
            m.d.sync += second.eq(wraps)

        with m.If(advance & (later != 0)):
            m.d.sync += x.eq(first_operand(later))
        with m.If(beat_done):
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
                    with m.If(group_end):
                        m.d.sync += member.eq(0)
                        m.d.sync += [group_base[i].eq(group_base[i] + strides[i]) for i in range(3)]
                        m.d.sync += [row_base[i].eq(group_base[i] + strides[i]) for i in range(3)]
                    with m.Else():
                        m.d.sync += member.eq(member + 1)
                        m.d.sync += [row_base[i].eq(row_base[i] + inner_strides[i]) for i in range(3)]
                    with m.If(row + 1 < c.rows):
                        m.d.sync += row.eq(row + 1)
                    with m.Else():
                        m.d.sync += reading.eq(0)

        # The read data: broadcast, merged, pushed into its operand's FIFO.
        words = []
        for e in range(nmem):
            word = Signal(data.ArrayLayout(32, lanes), name=f"word{e}")
            rd = ports[e].rd_data
            for j in range(lanes):
                m.d.comb += word[j].eq(Mux(tag_bcast[e], rd[0],
                                           Mux(tag_merge[e] & (j < tag_cut), merge[j], rd[j])))
            words.append(word)
            with m.If(tag_valid[e] & ~tag_final[e]):
                m.d.sync += merge.eq(rd)
        for i in range(3):
            pushes = [tag_valid[e] & tag_final[e] & (tag_x[e] == i) for e in range(nmem)]
            m.d.comb += fifos[i].w_en.eq(Cat(*pushes).any())
            data_i = words[0]
            for e in range(1, nmem):
                data_i = Mux(pushes[e], words[e], data_i)
            m.d.comb += fifos[i].w_data.eq(data_i)
            m.d.sync += inflight[i].eq(inflight[i] + issue[i] - fifos[i].w_en)

        # -- writer -----------------------------------------------------------------------------------
        part_words = Mux(is_topk, k_value, Mux(is_reduction, 1, c.len))   # words of a row's first part
        out_row_base = Signal(SPAD_EA_BITS)
        out_group_base = Signal(SPAD_EA_BITS)       # out_row_base at j = 0
        out_member = Signal(8)
        out_beat = Signal(12)
        out_col = Signal(34)
        out_left = Signal(34)                      # words of the row part still to write
        k_beats = (k_value[:12] + lanes - 1) >> shift
        out_beats = Mux(is_reduction, 1, Mux(is_topk, k_beats << 1, beats_per_row))
        out_addr = out_row_base + out_col
        out_mem = Signal(range(nmem))
        write = Signal()
        m.d.comb += out_mem.eq(memory_of(out_row_base))
        for e in range(nmem):
            m.d.comb += [ports[e].wr_addr.eq(out_addr - mem_bases[e]),
                         ports[e].wr_en.eq(write & (out_mem == e)),
                         ports[e].wr_mask.eq(Cat((j < out_left) for j in range(lanes))),
                         ports[e].wr_data.eq(self.vo.payload.data)]

        # -- control ----------------------------------------------------------------------------------
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.ctl.cmd.ready.eq(1)
                with m.If(self.ctl.cmd.valid):
                    m.d.sync += c.eq(self.ctl.cmd.payload)
                    m.next = "FIELDS"
            with m.State("FIELDS"):                 # ends[] are being computed
                m.d.comb += flush.eq(1)
                m.d.sync += [inflight[i].eq(0) for i in range(3)] + [t.eq(0) for t in tag_valid]
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
                                 *[group_base[i].eq(bases[i]) for i in range(3)], member.eq(0),
                                 out_row_base.eq(c.dst), out_group_base.eq(c.dst), out_member.eq(0),
                                 out_beat.eq(0), out_col.eq(0),
                                 out_left.eq(part_words), rows_done.eq(0)]
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
                        m.d.comb += write.eq(1)
                        with m.If(out_beat + 1 == out_beats):           # the row's last result beat
                            m.d.sync += [out_beat.eq(0), out_col.eq(0), rows_done.eq(rows_done + 1),
                                         out_left.eq(part_words)]
                            with m.If(out_member + 1 >= c.group):
                                m.d.sync += [out_member.eq(0), out_group_base.eq(out_group_base + c.dst_s),
                                             out_row_base.eq(out_group_base + c.dst_s)]
                            with m.Else():
                                m.d.sync += [out_member.eq(out_member + 1),
                                             out_row_base.eq(out_row_base + c.dst_si)]
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
