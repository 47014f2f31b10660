"""Read port of the KV-cache controller: streams a sequence's records, one per cycle."""

from amaranth.hdl import Cat, Module, Mux, Signal
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
    The request is registered with the table's entries for it, checked a cycle later (the check
    register), then one record per cycle is issued down a fixed pipeline that never stalls:

    ====== ===================================================================================
    cycle  stage
    ====== ===================================================================================
    0      issue: block-table read of page ``pos // page_tokens`` (one request per cycle, or none
           while the reply FIFO lacks room for everything in flight)
    1      register the page (the block-RAM output)
    2      bank read of ``(page, pos % page_tokens)`` in bank ``pos % banks``
    3      bank select, register the codeword
    4      SECDED syndrome (registered)
    5      correction; write the item into the reply FIFO
    ====== ===================================================================================

    Parameters
    ----------
    geometry : :class:`rtl.kv.layouts.KvGeometry`
    fifo_depth : int
        Depth of the reply FIFO (at least 7 for one record per cycle under no backpressure).

    Interface attributes
    --------------------
    rd : ``In(stream.Signature(geometry.read_layout()))``
        Requests. One request waits in the accept register while the one before it issues;
        ``rd.ready`` is low while that register is held (it rises in the cycle the request before
        issues its last record, so consecutive requests issue back to back) and, for a sequence
        the command engine has locked (truncate, close, inject), until that command's reply is
        presented.
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
    Nine cycles from a request's acceptance to its first item on ``rd_reply`` (accept, check,
    issue, five pipeline stages, the FIFO's output register); then one item per cycle while ``rd_reply``
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

        # ---- accept stage: the request and what the sequence table says of it, registered -------
        # A request is checked against the sequence table as it stands in the cycle it is
        # accepted: the table's entries for it are captured then, and compared a cycle later.
        a_valid = Signal()
        a_seq = Signal(g.seq_width)
        a_start = Signal(g.len_width)
        a_count = Signal(g.len_width)
        a_end = Signal(g.len_width + 1)
        a_seq_ok = Signal()
        a_live = Signal()
        a_len = Signal(g.length_width)

        # ---- check stage: everything the issue stage decides on, as registers ------------------
        q_valid = Signal()
        q_seq = Signal(g.seq_width)
        q_status = Signal(Status)
        q_no_data = Signal()                    # a failed or empty request: one item, no record
        q_pos = Signal(g.len_width)             # position of the next record to issue
        q_left = Signal(g.len_width)            # records still to issue
        q_one_left = Signal()                   # the next item is the last

        issue = Signal()
        issue_last = Signal()
        take = Signal()                         # the accepted request moves to the check stage
        request = self.rd.payload
        blocked = link.lock & (link.lock_all | (link.lock_seq == request.seq))
        m.d.comb += [
            issue_last.eq(q_no_data | q_one_left),
            take.eq(a_valid & (~q_valid | (issue & issue_last))),
            self.rd.ready.eq((~a_valid | take) & ~blocked),
        ]
        accept = self.rd.valid & self.rd.ready

        seq_ok, seq_live, seq_len = g.sequence(link.live, link.length, request.seq)
        with m.If(accept):
            m.d.sync += [
                a_valid.eq(1),
                a_seq.eq(request.seq),
                a_start.eq(request.start),
                a_count.eq(request.count),
                a_end.eq(request.start + request.count),
                a_seq_ok.eq(seq_ok),
                a_live.eq(seq_ok & seq_live),
                a_len.eq(seq_len),
            ]
        with m.Elif(take):
            m.d.sync += a_valid.eq(0)

        # Items issued and not yet delivered (in the pipeline or the FIFO) stay below `depth`;
        # `has_room` says one more may issue, kept as a register beside the count.
        occupancy = Signal(range(depth + 1))
        has_room = Signal(init=1)
        delivered_now = Signal()
        next_occupancy = occupancy + issue - delivered_now
        m.d.sync += [occupancy.eq(next_occupancy), has_room.eq(next_occupancy < depth)]

        # ---- issue stage ------------------------------------------------------------------------
        m.d.comb += issue.eq(q_valid & has_room)
        with m.If(issue):
            m.d.sync += [q_pos.eq(q_pos + 1), q_left.eq(q_left - 1), q_one_left.eq(q_left == 2)]
        # A request taken in the cycle the previous one issues its last item takes over (these
        # assignments come last, so they win).
        a_status = Signal(Status)
        access_status(m, a_status, exists=a_seq_ok, live=a_live, out_of_range=a_end > a_len)
        with m.If(take):
            m.d.sync += [
                q_valid.eq(1),
                q_seq.eq(a_seq),
                q_status.eq(a_status),
                q_no_data.eq((a_status != Status.OK) | (a_count == 0)),
                q_pos.eq(a_start),
                q_left.eq(a_count),
                q_one_left.eq(a_count == 1),
            ]
        with m.Elif(issue & issue_last):
            m.d.sync += q_valid.eq(0)

        m.d.comb += [
            self.table.addr.eq(g.table_address(q_seq, g.page_index(q_pos))),
            self.table.en.eq(issue & ~q_no_data),
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
        p5 = Signal(token)
        m.d.sync += [
            p1.valid.eq(issue),
            p1.record.eq(issue & ~q_no_data),
            p1.status.eq(q_status),
            p1.last.eq(issue_last),
            p1.empty.eq(q_no_data),
            p1.slot.eq(g.slot(q_pos)),
            p1.seq.eq(q_seq),
            p2.eq(p1),
            p3.eq(p2),
            p4.eq(p3),
            p5.eq(p4),
        ]

        # Stage 1: the page, from the block-RAM output straight into a register.
        page = Signal(g.page_width)
        m.d.sync += page.eq(self.table.data)

        # Stage 2: bank read. Every bank sees the address; only the addressed one is enabled.
        slot = p2.slot[:g.slot_width]
        bank_addr = g.bank_address(page, slot)
        for b, port in enumerate(self.bank):
            hit = (g.bank_of(slot) == b) if g.bank_width else 1
            m.d.comb += [port.addr.eq(bank_addr), port.en.eq(p2.valid & p2.record & hit)]

        # Stage 3: select the bank's word.
        word = Signal(g.codeword_width)
        m.d.sync += word.eq(g.bank_data(list(self.bank), g.bank_of(p3.slot[:g.slot_width])))

        # Stages 4-5: decode.
        m.d.comb += decoder.codeword.eq(word)
        item = Signal(reply_layout)
        m.d.comb += [
            item.status.eq(p5.status),
            item.last.eq(p5.last),
            item.empty.eq(p5.empty),
            item.corrected.eq(p5.record & decoder.corrected),
            item.poisoned.eq(p5.record & decoder.uncorrectable),
            item.data.eq(Mux(p5.record, decoder.data, 0)),
            reply_fifo.w_en.eq(p5.valid),
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
        m.d.comb += delivered_now.eq(transfer)
        counter_max = (1 << g.counter_bits) - 1
        for flag, port in ((delivered.corrected, link.ecc_corrected),
                           (delivered.poisoned, link.ecc_uncorrectable)):
            count = Signal(g.counter_bits)
            bump = transfer & flag & (count != counter_max)
            m.d.comb += port.eq(count + bump)
            m.d.sync += count.eq(port)

        # ---- interlock --------------------------------------------------------------------------
        # A record is in flight until its bank read (stage 2) is done.
        in_flight = [(p.valid & p.record, p.seq) for p in (p1, p2)]
        held = [(a_valid, a_seq), (q_valid, q_seq)] + in_flight
        m.d.comb += [
            link.query_hit.eq(Cat(*[busy & (seq == link.query_seq) for busy, seq in held]).any()),
            link.read_busy.eq(Cat(*[busy for busy, _ in held]).any()),
        ]
        return m
