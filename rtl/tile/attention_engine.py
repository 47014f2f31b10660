"""The tile's attention engine: runs an ``ATTN`` as a sequence of vector-unit commands over K and V
records streamed from the KV-cache controller, so KV never leaves the tile."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.kv.layouts import KvGeometry
from rtl.kv.layouts import Status as KvStatus
from rtl.tile.layouts import (
    SPAD_EA_BITS,
    AttnCommand,
    Status,
    VopCommand,
    attn_signature,
    vop_signature,
    wide_port_signature,
)
from rtl.tile.scratchpad import Scratchpad
from rtl.vpu.layouts import Op
from sim_models.tile_isa import TileConfig

__all__ = ["AttentionEngine"]

_QNAN = 0x7FC00000


def _from_bf16(bits):
    """binary32 of a bfloat16 pattern: exact, NaN -> the canonical NaN (``sim_models.vpu``)."""
    nan = (bits[7:15] == 0xFF) & (bits[:7] != 0)
    return Mux(nan, _QNAN, Cat(Const(0, 16), bits))


class AttentionEngine(wiring.Component):
    """Runs one ``ATTN`` exactly like ``sim_models.tile_iss.TileIss`` (``sim_models.transformer.attention``).

    Checks, in the ISS's order, each answered without touching the scratchpad: the fields
    (``bad_field``: ``hd`` not the build's ``head_dim``, ``kvh`` or ``count`` 0, ``heads`` not a
    positive multiple of ``kvh``), the queries' and then the destination's range (``spad_range``), a
    destination partly overlapping the queries (``bad_field``), then every KV head's sequence
    ``seq + layer * kvh + g``: it must exist and hold ``pos + count`` records (``kv_error``; one
    one-record read of its last position each).

    Then, for each query ``i`` and each set of up to ``max_group`` query heads that read the same KV
    head ``g`` (``G = heads / kvh`` heads read each KV head), with ``n = pos + i + 1`` positions, in
    chunks of ``stage_records`` records:

    1. scores: the chunk's K halves are read from the controller once for the set, widened from
       bfloat16 and written to the engine's buffer (``hd / lanes`` cycles a record); one ``mul`` of
       every head's query row by every K row into a product area, one ``sum`` of each product row
       into that head's ``scores[t]``;
    2. one ``scale`` and one ``softmax`` over the set's score rows (``n`` each), in place;
    3. values: the chunk's V halves are staged the same way; ``fma(p_t, V_t, acc)`` accumulates
       each head's destination row from ``+0``, the heads' rows interleaved in one ``chain`` command
       (each row's ``c`` is the result one set back), so the set's accumulations hide each other's
       latency.

    Every arithmetic step is one command of the VOP engine (``vop``, two-dimensional over the set's
    heads), which reads and writes the engine's two memories as words ``spad_words ..`` of its
    address space (``internal`` commands): the vector unit's rounding is the golden model's by
    construction. One memory holds ``max_group`` score rows (``max_len`` words each, the
    controller's longest sequence) and ``lanes`` zero words, the other the staged records and their
    products, so that a ``mul`` (queries in the scratchpad, records) and an ``fma`` (scores, records,
    accumulators in the scratchpad) read all their operands of a beat in one cycle. K and V are read
    twice per set of heads (scores, then values).

    Interface attributes
    --------------------
    ctl : ``In(attn_signature())``
        The sequencer's: one :data:`~rtl.tile.layouts.AttnCommand`, then one status.
    vop : ``Out(vop_signature())``
        Commands to the VOP engine (the tile routes them there while an ``ATTN`` runs).
    scores : ``In(wide_port_signature(scores_words, lanes))``
        The VOP engine's accesses to the score rows (and the zero words), mapped at its word
        ``spad_words``.
    records : ``In(wide_port_signature(records_words, lanes))``
        The VOP engine's accesses to the staged records and their products, mapped right after.
    kv_rd, kv_rd_reply
        The KV-cache controller's read port.

    Parameters
    ----------
    config : TileConfig
    head_dim : int
        The KV records' head dimension (a multiple of ``lanes``).
    stage_records : int
        Records staged per chunk (default 32).
    max_group : int
        Query heads of one KV head processed together (default 4; more heads per KV head are taken
        in sets of this size).
    """

    def __init__(self, config: TileConfig, head_dim: int, *, stage_records: int = 32, max_group: int = 4):
        check_positive_int(self, "head_dim", head_dim)
        check_positive_int(self, "stage_records", stage_records)
        check_positive_int(self, "max_group", max_group)
        if max_group > 255 or stage_records * max_group >= 1 << 12:
            raise parameter_error(self, ValueError, f"max_group ({max_group}) must be at most 255 and "
                                  f"stage_records * max_group ({stage_records * max_group}) below 4096 "
                                  f"(the rows of one VOP command)")
        self.config = config
        self.head_dim = head_dim
        self.stage_records = stage_records
        self.max_group = max_group
        lanes = config.lanes
        if head_dim % lanes:
            raise parameter_error(self, ValueError, f"head_dim ({head_dim}) must be a multiple of lanes "
                                  f"({lanes})")
        self._geometry = g = KvGeometry(config.kv_config(head_dim))
        # memory 1: the score rows, then lanes zero words; memory 2: staged records, then products
        self.scores_pitch = -(-g.max_len // lanes) * lanes
        self.zero_at = max_group * self.scores_pitch
        self.scores_words = self.zero_at + lanes
        self.products_at = stage_records * head_dim
        self.records_words = self.products_at + stage_records * max_group * head_dim
        super().__init__({
            "ctl": In(attn_signature()),
            "vop": Out(vop_signature()),
            "scores": In(wide_port_signature(self.scores_words, lanes)),
            "records": In(wide_port_signature(self.records_words, lanes)),
            "kv_rd": Out(stream.Signature(g.read_layout())),
            "kv_rd_reply": In(stream.Signature(g.read_reply_layout())),
        })

    @property
    def geometry(self):
        return self._geometry

    @property
    def memories(self):
        """Words of the engine's two memories, in the order the VOP engine maps them after the
        scratchpad (``VopEngine(extra_memories=...)``)."""
        return (self.scores_words, self.records_words)

    def elaborate(self, platform):
        m = Module()
        cfg, g, hd, lanes = self.config, self._geometry, self.head_dim, self.config.lanes
        beats = hd // lanes                         # buffer rows of one record half
        pitch = self.scores_pitch
        # the memories' first words in the VOP engine's address space
        scores = cfg.spad_words
        zero = scores + self.zero_at
        stage = cfg.spad_words + self.scores_words
        products = stage + self.products_at

        m.submodules.scores = scores_mem = Scratchpad(self.scores_words, lanes)
        m.submodules.records = records_mem = Scratchpad(self.records_words, lanes)
        wiring.connect(m, wiring.flipped(self.scores), scores_mem.wide)
        staging = Signal()                          # the stager owns the records memory's write port
        stage_addr = Signal(range(self.records_words))
        stage_en = Signal()
        stage_data = Signal(data.ArrayLayout(32, lanes))
        with m.If(staging):
            m.d.comb += [records_mem.wide.wr_addr.eq(stage_addr), records_mem.wide.wr_en.eq(stage_en),
                         records_mem.wide.wr_mask.eq(-1), records_mem.wide.wr_data.eq(stage_data)]
        with m.Else():
            wiring.connect(m, wiring.flipped(self.records), records_mem.wide)
        m.d.comb += self.records.rd_data.eq(records_mem.wide.rd_data)

        c = Signal(AttnCommand)
        status = self.ctl.resp.payload.status
        size = Signal(32)                           # count * heads * hd words
        chs = Signal(20)                            # count * heads
        rem, group = Signal(8), Signal(8)           # heads / kvh
        length = Signal(33)                         # pos + count
        first_seq = Signal(SPAD_EA_BITS)            # seq + layer * kvh
        seq, kvg = Signal(SPAD_EA_BITS), Signal(8)  # a KV head's sequence and index
        i, h, hh = Signal(12), Signal(8), Signal(8) # query, first head of the set, its index in G
        n, t0 = Signal(33), Signal(33)              # positions of this query, first of the chunk
        qa, da = Signal(SPAD_EA_BITS), Signal(SPAD_EA_BITS)
        remaining = n - t0
        chunk = Signal(range(self.stage_records + 1))
        m.d.comb += chunk.eq(Mux(remaining < self.stage_records, remaining, self.stage_records))
        heads_left = group - hh                     # heads of this KV head from h on
        gs = Signal(range(self.max_group + 1))      # heads in this set
        m.d.comb += gs.eq(Mux(heads_left < self.max_group, heads_left, self.max_group))
        set_words = Signal(range(self.max_group * hd + 1))
        m.d.comb += set_words.eq(gs * hd)

        # -- the stager: one chunk of record halves from the controller into the buffer ------------
        record = Signal(g.token_bits)
        have = Signal()                             # record holds a record not yet fully written
        beat, rec_index = Signal(range(beats)), Signal(range(self.stage_records))
        half = Signal()                             # 0: K, 1: V
        last_beat = beat == beats - 1
        slice_index = Signal(range(2 * beats))
        m.d.comb += slice_index.eq(half * beats + beat)
        slice_ = record.word_select(slice_index, 16 * lanes)
        for j in range(lanes):
            m.d.comb += stage_data[j].eq(_from_bf16(slice_[16 * j:16 * j + 16]))
        m.d.comb += stage_addr.eq(rec_index * hd + beat * lanes)

        cmd = self.vop.cmd.payload
        done_stage = Signal()                       # the chunk's last beat is written this cycle
        m.d.comb += done_stage.eq(have & last_beat & (rec_index == chunk - 1))

        def vop_step(name, then, **fields):
            """States ``name`` (issue one internal command) and ``name_WAIT`` (its status)."""
            with m.State(name):
                # every field set here (those not given to 0): no part of the payload is left to a
                # constant driver outside the FSM
                m.d.comb += self.vop.cmd.valid.eq(1)
                for key in VopCommand.members:
                    m.d.comb += getattr(cmd, key).eq(fields.get(key, 1 if key == "internal" else 0))
                with m.If(self.vop.cmd.ready):
                    m.next = name + "_WAIT"
            with m.State(name + "_WAIT"):
                m.d.comb += self.vop.resp.ready.eq(1)
                with m.If(self.vop.resp.valid):
                    with m.If(self.vop.resp.payload.status != Status.OK):
                        m.d.sync += status.eq(self.vop.resp.payload.status)
                        m.next = "RESPOND"
                    with m.Else():
                        then()

        def respond(code):
            m.d.sync += status.eq(code)
            m.next = "RESPOND"

        def goto(state, *updates):
            def then():
                m.d.sync += list(updates)
                m.next = state
            return then

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.ctl.cmd.ready.eq(1)
                with m.If(self.ctl.cmd.valid):
                    m.d.sync += c.eq(self.ctl.cmd.payload)
                    m.next = "FIELDS"
            with m.State("FIELDS"):
                m.d.sync += [rem.eq(c.heads), group.eq(0), chs.eq(c.count * c.heads),
                             length.eq(c.pos + c.count), first_seq.eq(c.seq + c.layer * c.kvh)]
                with m.If((c.hd != hd) | (c.kvh == 0) | (c.count == 0) | (c.heads == 0)):
                    respond(Status.BAD_FIELD)
                with m.Else():
                    m.next = "DIVIDE"
            with m.State("DIVIDE"):                 # heads / kvh by subtraction (at most 255 steps)
                m.d.sync += size.eq(chs * hd)
                with m.If(rem >= c.kvh):
                    m.d.sync += [rem.eq(rem - c.kvh), group.eq(group + 1)]
                with m.Elif(rem != 0):
                    respond(Status.BAD_FIELD)
                with m.Else():
                    m.next = "RANGES"
            with m.State("RANGES"):
                with m.If(c.q + size > cfg.spad_words):
                    respond(Status.SPAD_RANGE)
                with m.Elif(c.dst + size > cfg.spad_words):
                    respond(Status.SPAD_RANGE)
                with m.Elif((c.dst != c.q) & (c.dst < c.q + size) & (c.q < c.dst + size)):
                    respond(Status.BAD_FIELD)
                with m.Else():
                    m.d.sync += [seq.eq(first_seq), kvg.eq(0)]
                    m.next = "KV_CHECK"
            with m.State("KV_CHECK"):               # every KV head's sequence holds pos + count records
                with m.If(kvg == c.kvh):
                    m.d.sync += [i.eq(0), h.eq(0), hh.eq(0), seq.eq(first_seq), n.eq(c.pos + 1),
                                 qa.eq(c.q), da.eq(c.dst), t0.eq(0)]
                    m.next = "SCORES_READ"
                with m.Elif((seq >= g.seqs) | (length > g.max_len)):
                    respond(Status.KV_ERROR)
                with m.Else():
                    m.d.comb += [self.kv_rd.valid.eq(1), self.kv_rd.payload.seq.eq(seq),
                                 self.kv_rd.payload.start.eq(length - 1), self.kv_rd.payload.count.eq(1)]
                    with m.If(self.kv_rd.ready):
                        m.next = "KV_CHECK_REPLY"
            with m.State("KV_CHECK_REPLY"):
                m.d.comb += self.kv_rd_reply.ready.eq(1)
                with m.If(self.kv_rd_reply.valid & self.kv_rd_reply.payload.last):
                    with m.If(self.kv_rd_reply.payload.status != KvStatus.OK):
                        respond(Status.KV_ERROR)
                    with m.Else():
                        m.d.sync += [seq.eq(seq + 1), kvg.eq(kvg + 1)]
                        m.next = "KV_CHECK"

            # -- per set of query heads: scores, chunk by chunk -------------------------------------
            for phase, then in (("SCORES", "MUL"), ("VALUES", "FMA")):
                with m.State(phase + "_READ"):
                    m.d.comb += [self.kv_rd.valid.eq(1), self.kv_rd.payload.seq.eq(seq),
                                 self.kv_rd.payload.start.eq(t0), self.kv_rd.payload.count.eq(chunk)]
                    with m.If(self.kv_rd.ready):
                        m.d.sync += [have.eq(0), beat.eq(0), rec_index.eq(0),
                                     half.eq(phase == "VALUES"), staging.eq(1)]
                        m.next = phase + "_STAGE"
                with m.State(phase + "_STAGE"):
                    m.d.comb += [self.kv_rd_reply.ready.eq(~have | (last_beat & ~done_stage)),
                                 stage_en.eq(have)]
                    with m.If(have):
                        m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
                        with m.If(last_beat):
                            m.d.sync += [have.eq(0), rec_index.eq(rec_index + 1)]
                    with m.If(self.kv_rd_reply.valid & self.kv_rd_reply.ready):
                        m.d.sync += [record.eq(self.kv_rd_reply.payload.data), have.eq(1)]
                    with m.If(done_stage):
                        m.d.sync += staging.eq(0)
                        m.next = then

            # products[(t, j)] = q_j * K_t, rows t-major over the set's heads j
            vop_step("MUL", goto("SUM"), op=Op.MUL, len=hd, rows=chunk * gs, group=gs,
                     a=qa, a_s=0, a_si=hd, b=stage, b_s=hd, b_si=0,
                     dst=products, dst_s=set_words, dst_si=hd)

            def after_sum():
                m.d.sync += t0.eq(t0 + chunk)
                with m.If(t0 + chunk < n):
                    m.next = "SCORES_READ"
                with m.Else():
                    m.next = "SCALE"
            # scores of head j (row j of pitch words)[t0 + t] = sum(products[(t, j)])
            vop_step("SUM", after_sum, op=Op.SUM, len=hd, rows=chunk * gs, group=gs,
                     a=products, a_s=set_words, a_si=hd, dst=scores + t0, dst_s=1, dst_si=pitch)
            vop_step("SCALE", goto("SOFTMAX"), op=Op.SCALE, len=n, rows=gs, a=scores, a_s=pitch,
                     dst=scores, dst_s=pitch, scalar0=c.scale)
            vop_step("SOFTMAX", goto("VALUES_READ", t0.eq(0)), op=Op.SOFTMAX, len=n, rows=gs, a=scores,
                     a_s=pitch, dst=scores, dst_s=pitch)

            # -- values: acc_j = fma(p_j[t], V_t, acc_j) from +0, into head j's destination row --------
            def after_fma_first():
                with m.If(chunk > 1):
                    m.next = "FMA_CHAIN"
                with m.Else():
                    m.next = "NEXT_CHUNK"
            with m.State("FMA"):
                with m.If(t0 == 0):
                    m.next = "FMA_FIRST"
                with m.Else():
                    m.next = "FMA_CHAIN"
            vop_step("FMA_FIRST", after_fma_first, op=Op.FMA, len=hd, rows=gs, a=scores, a_s=pitch,
                     b=stage, c=zero, dst=da, dst_s=hd, bcast=0b101)
            skip = t0 == 0                          # the chunk's first record was FMA_FIRST
            vop_step("FMA_CHAIN", goto("NEXT_CHUNK"), op=Op.FMA, len=hd, rows=(chunk - skip) * gs,
                     group=gs, a=scores + t0 + skip, a_s=1, a_si=pitch, b=stage + skip * hd, b_s=hd,
                     c=da, c_si=hd, dst=da, dst_si=hd, bcast=0b001, chain=1)
            with m.State("NEXT_CHUNK"):
                with m.If(t0 + chunk < n):
                    m.d.sync += t0.eq(t0 + chunk)
                    m.next = "VALUES_READ"
                with m.Else():
                    m.next = "NEXT_HEADS"
            with m.State("NEXT_HEADS"):
                m.d.sync += [qa.eq(qa + set_words), da.eq(da + set_words), t0.eq(0)]
                with m.If(h + gs < c.heads):
                    last_of_kv_head = hh + gs == group
                    m.d.sync += [h.eq(h + gs), hh.eq(Mux(last_of_kv_head, 0, hh + gs)),
                                 seq.eq(seq + last_of_kv_head)]
                    m.next = "SCORES_READ"
                with m.Elif(i + 1 < c.count):
                    m.d.sync += [h.eq(0), hh.eq(0), seq.eq(first_seq), i.eq(i + 1), n.eq(n + 1)]
                    m.next = "SCORES_READ"
                with m.Else():
                    respond(Status.OK)

            with m.State("RESPOND"):
                m.d.comb += self.ctl.resp.valid.eq(1)
                with m.If(self.ctl.resp.ready):
                    m.next = "IDLE"
        return m
