"""Read port of the KV-cache controller: streams a sequence's records, one per cycle."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .layouts import EngineLinkSignature, Status, access_status
from .secded_decoder import SecdedDecoder

__all__ = ["ReadEngine"]


class ReadEngine(wiring.Component):
    """Serves ``read(seq, start, count)`` requests from the block table and the SRAM banks.

    A request is checked against the sequence table *as it stands in the cycle it is accepted*
    (``bad_seq``, then ``not_live``, then ``out_of_range``: ``start + count > length``), so a read
    sees exactly the commands whose reply was presented (``cmd_reply.valid``) in or before that cycle.
    Then one record per cycle is issued down a fixed pipeline that never stalls:

    ====== ===================================================================================
    cycle  stage
    ====== ===================================================================================
    0      issue: block-table read of page ``pos // page_tokens`` (one request per cycle, or none
           while the reply FIFO lacks room for everything in flight)
    1      bank read of ``(page, pos % page_tokens)`` in bank ``pos % banks``
    2      bank select, register the codeword
    3      SECDED syndrome (registered)
    4      correction; write the item into the reply FIFO
    ====== ===================================================================================

    Parameters
    ----------
    geometry : :class:`rtl.kv.layouts.KvGeometry`
    fifo_depth : int
        Depth of the reply FIFO (at least 6 for one record per cycle under no backpressure).

    Interface attributes
    --------------------
    rd : ``In(stream.Signature(geometry.read_layout()))``
        Requests. ``rd.ready`` is low while the previous request is still issuing (it rises in the
        cycle its last record issues, so consecutive requests issue back to back) and, for a
        sequence the command engine has locked (truncate, close, inject), until that command's
        reply is presented.
    rd_reply : ``Out(stream.Signature(geometry.read_reply_layout()))``
        One item per record, in request order; ``last`` marks a request's final item. A failed or
        empty request gives one item with ``empty`` and ``last`` set. ``corrected``: a single-bit
        error was corrected; ``poisoned``: an uncorrectable error, ``data`` is as stored.
    link : ``In(EngineLinkSignature(geometry))``
        Sequence table and interlock from the command engine; returns the ECC counters.
    table : ``In(geometry.table_port())``
        A synchronous read port of the block table.
    bank : ``In(geometry.bank_port()).array(banks)``
        A synchronous read port of each SRAM bank.

    Latency and throughput
    ----------------------
    Seven cycles from a request's acceptance to its first item on ``rd_reply`` (accept, issue,
    four pipeline stages, the FIFO's output register); then one item per cycle while ``rd_reply``
    is ready, across request boundaries. Under backpressure nothing is lost: issuing pauses once
    the FIFO would fill, and resumes at full rate.

    ECC counters
    ------------
    ``link.ecc_corrected`` / ``link.ecc_uncorrectable`` count delivered items flagged ``corrected``
    / ``poisoned``, saturating at ``2**counter_bits - 1``; the value presented includes a delivery
    in the current cycle, so a ``stat`` reply counts every item delivered before it is presented.
    """

    def __init__(self, geometry, *, fifo_depth=8):
        if not isinstance(fifo_depth, int) or isinstance(fifo_depth, bool) or fifo_depth < 2:
            raise parameter_error(self, ValueError,
                                  f"fifo_depth must be an integer >= 2, not {fifo_depth!r}")
        self._geometry = geometry
        self._fifo_depth = fifo_depth
        g = geometry
        super().__init__({
            "rd": In(stream.Signature(g.read_layout())),
            "rd_reply": Out(stream.Signature(g.read_reply_layout())),
            "link": In(EngineLinkSignature(g)),
            "table": In(g.table_port()),
            "bank": In(g.bank_port()).array(g.banks),
        })

    @property
    def geometry(self):
        return self._geometry

    def elaborate(self, platform):
        m = Module()
        g = self._geometry
        link = self.link
        depth = self._fifo_depth
        reply_layout = g.read_reply_layout()

        m.submodules.fifo = reply_fifo = fifo.SyncFIFOBuffered(width=reply_layout.size, depth=depth)
        m.submodules.decoder = decoder = SecdedDecoder(g.token_bits, registered=True)

        # ---- request register (accept stage) --------------------------------------------------
        q_valid = Signal()
        q_seq = Signal(g.seq_width)
        q_start = Signal(g.len_width)
        q_end = Signal(g.len_width + 1)
        q_empty = Signal()
        q_seq_ok = Signal()
        q_live = Signal()
        q_len = Signal(g.length_width)
        q_first = Signal()
        q_pos = Signal(g.len_width)

        issue = Signal()
        issue_last = Signal()
        request = self.rd.payload
        blocked = link.lock & (link.lock_all | (link.lock_seq == request.seq))
        m.d.comb += self.rd.ready.eq((~q_valid | (issue & issue_last)) & ~blocked)
        accept = self.rd.valid & self.rd.ready

        # ---- issue stage ------------------------------------------------------------------------
        status = Signal(Status)
        access_status(m, status, exists=q_seq_ok, live=q_live, out_of_range=q_end > q_len)
        no_data = (status != Status.OK) | q_empty
        pos = Signal(g.len_width)
        m.d.comb += pos.eq(Mux(q_first, q_start, q_pos))

        inflight = Signal(range(depth + 1))
        written = Signal()
        m.d.comb += [
            issue_last.eq(no_data | (pos + 1 == q_end)),
            issue.eq(q_valid & (inflight + reply_fifo.level < depth)),
        ]
        with m.If(issue):
            m.d.sync += [q_first.eq(0), q_pos.eq(pos + 1)]
        # A request accepted in the cycle the previous one issues its last item takes over
        # (these assignments come last, so they win).
        seq_ok, seq_live, seq_len = g.sequence(link.live, link.length, request.seq)
        with m.If(accept):
            m.d.sync += [
                q_valid.eq(1),
                q_seq.eq(request.seq),
                q_start.eq(request.start),
                q_end.eq(request.start + request.count),
                q_empty.eq(request.count == 0),
                q_seq_ok.eq(seq_ok),
                q_live.eq(seq_ok & seq_live),
                q_len.eq(seq_len),
                q_first.eq(1),
            ]
        with m.Elif(issue & issue_last):
            m.d.sync += q_valid.eq(0)

        m.d.sync += inflight.eq(inflight + issue - written)

        m.d.comb += [
            self.table.addr.eq(g.table_address(q_seq, g.page_index(pos))),
            self.table.en.eq(issue & ~no_data),
        ]

        # ---- pipeline tokens --------------------------------------------------------------------
        token = data.StructLayout({
            "valid": 1, "record": 1, "status": Status, "last": 1, "empty": 1,
            "slot": max(1, g.slot_width), "seq": g.seq_width,
        })
        p1 = Signal(token)
        p2 = Signal(token)
        p3 = Signal(token)
        p4 = Signal(token)
        m.d.sync += [
            p1.valid.eq(issue),
            p1.record.eq(issue & ~no_data),
            p1.status.eq(status),
            p1.last.eq(issue_last),
            p1.empty.eq(no_data),
            p1.slot.eq(g.slot(pos)),
            p1.seq.eq(q_seq),
            p2.eq(p1),
            p3.eq(p2),
            p4.eq(p3),
        ]

        # Stage 1: bank read. Every bank sees the address; only the addressed one is enabled.
        slot = p1.slot[:g.slot_width]
        bank_addr = g.bank_address(self.table.data, slot)
        for b, port in enumerate(self.bank):
            hit = (g.bank_of(slot) == b) if g.bank_width else 1
            m.d.comb += [port.addr.eq(bank_addr), port.en.eq(p1.valid & p1.record & hit)]

        # Stage 2: select the bank's word.
        word = Signal(g.codeword_width)
        m.d.sync += word.eq(g.bank_data(list(self.bank), g.bank_of(p2.slot[:g.slot_width])))

        # Stages 3-4: decode.
        m.d.comb += decoder.codeword.eq(word)
        item = Signal(reply_layout)
        m.d.comb += [
            item.status.eq(p4.status),
            item.last.eq(p4.last),
            item.empty.eq(p4.empty),
            item.corrected.eq(p4.record & decoder.corrected),
            item.poisoned.eq(p4.record & decoder.uncorrectable),
            item.data.eq(Mux(p4.record, decoder.data, 0)),
            written.eq(p4.valid),
            reply_fifo.w_en.eq(p4.valid),
            reply_fifo.w_data.eq(item),
        ]

        # ---- reply stream -----------------------------------------------------------------------
        delivered = Signal(reply_layout)
        m.d.comb += [
            delivered.eq(reply_fifo.r_data),
            self.rd_reply.valid.eq(reply_fifo.r_rdy),
            self.rd_reply.payload.eq(delivered),
            reply_fifo.r_en.eq(self.rd_reply.ready),
        ]
        transfer = self.rd_reply.valid & self.rd_reply.ready
        counter_max = (1 << g.counter_bits) - 1
        for flag, port in ((delivered.corrected, link.ecc_corrected),
                           (delivered.poisoned, link.ecc_uncorrectable)):
            count = Signal(g.counter_bits)
            bump = transfer & flag & (count != counter_max)
            m.d.comb += port.eq(count + bump)
            m.d.sync += count.eq(port)

        # ---- interlock --------------------------------------------------------------------------
        issuing_record = p1.valid & p1.record          # its bank read happens this cycle
        m.d.comb += [
            link.query_hit.eq((accept & (request.seq == link.query_seq))
                              | (q_valid & (q_seq == link.query_seq))
                              | (issuing_record & (p1.seq == link.query_seq))),
            link.read_busy.eq(accept | q_valid | issuing_record),
        ]
        return m
