"""Command port of the KV-cache controller: open, append, fork, truncate, close, stat, inject."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import AllocatorSignature, EngineLinkSignature, Op, Status, access_status
from .secded_encoder import SecdedEncoder

__all__ = ["CommandEngine"]


class _State(enum.Enum, shape=4):
    """States of the command sequencer.

    Decoded with an ``If``/``Elif`` chain ending in ``Else`` (``COMMIT``), not a ``Switch``: the
    Verilog back end drops the trailing empty cases of a ``Switch`` (``Default`` included) for every
    signal a case does not assign, which Verilator reports as ``CASEINCOMPLETE``.
    """
    IDLE = 0
    CHECK = 1
    TAIL = 2
    DECIDE = 3
    COPY = 4
    RELEASE_TAIL = 5
    LOOP = 6
    INJECT_TABLE = 7
    INJECT_READ = 8
    INJECT_LATCH = 9
    DRAIN = 10
    INJECT_PAGE = 11
    SHARE = 12
    LOOKUP = 13
    COMMIT = 14


class CommandEngine(wiring.Component):
    """Executes one command at a time against the sequence table, block table, allocator and banks.

    Every command is checked first (errors in the order of :mod:`sim_models.kv_cache`; a failing
    command changes nothing), then executed, then *committed*: the sequence table (``live``,
    ``length``) changes and the reply is loaded into the ``cmd_reply`` register at one clock edge;
    the record of an append goes into the bank write registers then and is written at the next
    edge, before any read accepted after the commit reaches the bank. A read accepted in the cycle
    the reply is first presented, or later, sees the command; a read accepted earlier does not.

    ============ =======================================================================================
    op           cycles from the cycle the command is accepted to the first cycle its reply is
                 valid (``f`` filled slots of a shared tail page, ``n`` pages visited)
    ============ =======================================================================================
    open, stat   4
    append       5 (first record of a page), 7 (in place: the tail page and its count are looked
                 up), 11 + f with copy-on-write (``2f`` when ``banks == 1``)
    fork         6 + n (src's pages)
    truncate     7 + n (pages released)
    close        7 + n (pages held)
    inject       9
    errors       4 (``no_space``: 5 or 7, after the tail page is examined)
    ============ =======================================================================================

    plus the cycles spent waiting: truncate and close of a sequence lock reads of it out (inject:
    all reads) from the cycle after the check until their commit, and wait while the read engine
    still holds or issues such a read; a copy-on-write append does the same from its decision on
    (the copy overlaps the wait). A commit waits while ``cmd_reply`` holds an undelivered
    reply. The next command is accepted in the commit cycle.

    Parameters
    ----------
    geometry : :class:`rtl.kv.layouts.KvGeometry`

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(geometry.command_layout()))``
        Commands. ``cmd.ready`` is high when idle and in the commit cycle of the previous command.
    cmd_reply : ``Out(stream.Signature(geometry.command_reply_layout()))``
        One reply per command, in order; a register, held until accepted.
    link : ``Out(EngineLinkSignature(geometry))``
        Sequence table and interlock to the read engine, ECC counters from it.
    alloc : ``Out(AllocatorSignature(geometry))``
        Page allocator.
    table_rd, table_wr : block-table read port (synchronous) and write port.
    bank_rd, bank_wr : ``.array(banks)`` read and write port of each bank; both ports of a bank are
        driven with the same address (a write wins), so each pair maps onto one block-RAM port.

    Bad input
    ---------
    Every payload is valid input: out-of-range ids, lengths and positions get their error status;
    opcode 7 gets ``bad_op``.
    """

    def __init__(self, geometry):
        self._geometry = geometry
        g = geometry
        super().__init__({
            "cmd": In(stream.Signature(g.command_layout())),
            "cmd_reply": Out(stream.Signature(g.command_reply_layout())),
            "link": Out(EngineLinkSignature(g)),
            "alloc": Out(AllocatorSignature(g)),
            "table_rd": In(g.table_port()),
            "table_wr": In(g.table_write_port()),
            "bank_rd": In(g.bank_port()).array(g.banks),
            "bank_wr": In(g.bank_write_port()).array(g.banks),
        })

    @property
    def geometry(self):
        return self._geometry

    def elaborate(self, platform):
        m = Module()
        g = self._geometry
        link, alloc = self.link, self.alloc

        m.submodules.encoder = encoder = SecdedEncoder(g.token_bits)

        # ---- sequence table ---------------------------------------------------------------------
        live = Signal(g.seqs)
        lengths = Signal(data.ArrayLayout(g.length_width, g.seqs))
        live_count = Signal(g.live_width)
        m.d.comb += [link.live.eq(live), link.length.eq(lengths)]

        state = Signal(_State)

        # ---- command register -------------------------------------------------------------------
        c_op = Signal(3)
        c_seq = Signal(g.seq_width)
        c_arg = Signal(max(g.seq_width, g.len_width))
        c_word = Signal(g.codeword_width)       # append: the codeword; inject: the XOR mask
        request = self.cmd.payload
        m.d.comb += encoder.data.eq(request.data)
        accept = Signal()
        m.d.comb += accept.eq(self.cmd.valid & self.cmd.ready)
        with m.If(accept):
            m.d.sync += [
                c_op.eq(request.op),
                c_seq.eq(request.seq),
                c_arg.eq(request.arg),
                c_word.eq(Mux(request.op == Op.APPEND, encoder.codeword,
                              Cat(request.data, request.check))),
            ]

        seq_index = c_seq[:g.seq_addr_width]
        arg_index = c_arg[:g.seq_addr_width]
        # The sequence-table entries of `seq` and `arg`, registered (LOOKUP loads them; the table
        # changes only at a commit, so they hold until the next command).
        seq_ok, cur_live, arg_ok, arg_live = (Signal(name=n) for n in ("seq_ok", "cur_live",
                                                                       "arg_ok", "arg_live"))
        cur_len = Signal(g.length_width)
        with m.If(state == _State.LOOKUP):
            seq_entry = g.sequence(live, lengths, c_seq)
            arg_entry = g.sequence(live, lengths, c_arg)
            m.d.sync += [seq_ok.eq(seq_entry[0]), cur_live.eq(seq_entry[1]),
                         cur_len.eq(seq_entry[2]), arg_ok.eq(arg_entry[0]),
                         arg_live.eq(arg_entry[1])]

        # Per-command state, loaded in CHECK.
        c_len = Signal(g.length_width)
        slot = g.slot(c_len)                                         # append: slot of the record
        arg_slot = g.slot(c_arg)                                     # inject: slot of `pos`
        tail = Signal(g.page_width)             # append: the current tail page
        tail_shared = Signal()                  # append: ... and its count is above one
        target = Signal(g.page_width)           # append: page receiving the record; inject: page
        new_page = Signal()                     # append: the block table gets `target` at commit
        status = Signal(Status)
        i = Signal(g.index_width + 1)           # loops: next block-table index to read
        n = Signal(g.index_width + 1)           # loops: end index
        acting = Signal()                       # loops: an entry was read last cycle
        act_index = Signal(g.index_width)
        loop_acting = Signal()                  # loops: `loop_page` (entry `loop_index`) is acted on
        loop_index = Signal(g.index_width)
        loop_page = Signal(g.page_width)
        copy_read = Signal(g.slot_width + 1)    # copy-on-write: next slot to read
        copy_latch = Signal()                   # ... a slot was read last cycle (`copy_latch_slot`)
        copy_latch_slot = Signal(max(1, g.slot_width))
        copy_store = Signal()                   # ... and two cycles ago (`copy_store_slot`)
        copy_store_slot = Signal(max(1, g.slot_width))
        lock = Signal()
        lock_all = Signal()
        m.d.comb += [link.lock.eq(lock), link.lock_all.eq(lock_all), link.lock_seq.eq(c_seq),
                     link.query_seq.eq(c_seq)]

        # ---- allocator requests, registered ----------------------------------------------------
        # A request decided in one cycle reaches the allocator at the next edge, so that its
        # reference-count registers are enabled by flip-flops, not by the sequencer's decisions.
        # Every count the sequencer reads is current: the last request of a command is applied in
        # its commit cycle, and the next command reads a count (SHARE) three cycles later at the
        # earliest; ``alloc`` is requested only when settled and nothing is pending, so
        # ``alloc_ready`` still holds when it arrives.
        req_alloc = Signal()
        req_incref = Signal()
        req_decref = Signal()
        req_page = Signal(g.page_width)
        m.d.sync += [alloc.alloc.eq(req_alloc), alloc.incref.eq(req_incref),
                     alloc.decref.eq(req_decref), alloc.ref_page.eq(req_page)]
        alloc_pending = alloc.alloc | alloc.incref | alloc.decref
        m.d.comb += alloc.query_page.eq(tail)           # looked up in SHARE; selected by a register

        # ---- error checks, in the documented order ---------------------------------------------
        error = Signal(Status)
        with m.Switch(c_op):
            with m.Case(Op.OPEN):
                with m.If(~seq_ok):
                    m.d.comb += error.eq(Status.BAD_SEQ)
                with m.Elif(cur_live):
                    m.d.comb += error.eq(Status.LIVE)
            with m.Case(Op.APPEND):
                with m.If(~seq_ok):
                    m.d.comb += error.eq(Status.BAD_SEQ)
                with m.Elif(~cur_live):
                    m.d.comb += error.eq(Status.NOT_LIVE)
                with m.Elif(cur_len == g.max_len):
                    m.d.comb += error.eq(Status.SEQ_FULL)
            with m.Case(Op.FORK):
                with m.If(~seq_ok | ~arg_ok):
                    m.d.comb += error.eq(Status.BAD_SEQ)
                with m.Elif(~cur_live):
                    m.d.comb += error.eq(Status.NOT_LIVE)
                with m.Elif(arg_live):
                    m.d.comb += error.eq(Status.LIVE)
            with m.Case(Op.TRUNCATE):
                access_status(m, error, exists=seq_ok, live=cur_live, out_of_range=c_arg > cur_len)
            with m.Case(Op.CLOSE):
                access_status(m, error, exists=seq_ok, live=cur_live, out_of_range=0)
            with m.Case(Op.INJECT):
                access_status(m, error, exists=seq_ok, live=cur_live, out_of_range=c_arg >= cur_len)
            with m.Case(Op.STAT):
                pass
            with m.Default():
                m.d.comb += error.eq(Status.BAD_OP)

        # ---- bank port B: one read and one write per cycle, to different banks -----------------
        # A write is decided in one cycle and performed in the next, from registers (bank enable,
        # address, data), so no sequencer decision reaches a block-RAM port in the same cycle.
        # A read in the cycle a write is performed must go to another bank (the write wins).
        rd_en = Signal()
        rd_bank = Signal(max(1, g.bank_width))
        rd_addr = Signal(g.bank_addr_width)
        wr_en = Signal()                                     # decided this cycle
        wr_bank = Signal(max(1, g.bank_width))
        wr_addr = Signal(g.bank_addr_width)
        wr_data = Signal(g.codeword_width)
        writing = Signal(g.banks)                            # performed this cycle, per bank
        writing_addr = Signal(g.bank_addr_width, reset_less=True)
        writing_data = Signal(g.codeword_width, reset_less=True)
        m.d.sync += [
            writing.eq(Cat(*[wr_en & ((wr_bank == b) if g.bank_width else 1)
                             for b in range(g.banks)])),
            writing_addr.eq(wr_addr),
            writing_data.eq(wr_data),
        ]
        for b in range(g.banks):
            read_here = rd_en & ((rd_bank == b) if g.bank_width else 1)
            addr = Mux(writing[b], writing_addr, rd_addr)
            m.d.comb += [
                self.bank_wr[b].addr.eq(addr),
                self.bank_wr[b].en.eq(writing[b]),
                self.bank_wr[b].data.eq(writing_data),
                self.bank_rd[b].addr.eq(addr),
                self.bank_rd[b].en.eq(read_here),
            ]
        # Every bank's read data, captured each cycle: the block-RAM outputs (late in the cycle)
        # go straight into registers, and the bank is selected after them.
        bank_words = Array(Signal(g.codeword_width, name=f"bank_word{b}", reset_less=True)
                           for b in range(g.banks))
        for b in range(g.banks):
            m.d.sync += bank_words[b].eq(self.bank_rd[b].data)

        def captured_word(slot_value):
            return bank_words[g.bank_of(slot_value)] if g.bank_width else bank_words[0]

        def write_record(page, slot_value, word):
            m.d.comb += [wr_en.eq(1), wr_bank.eq(g.bank_of(slot_value)),
                         wr_addr.eq(g.bank_address(page, slot_value)), wr_data.eq(word)]

        def read_record(page, slot_value):
            m.d.comb += [rd_en.eq(1), rd_bank.eq(g.bank_of(slot_value)),
                         rd_addr.eq(g.bank_address(page, slot_value))]

        def read_table(seq, index):
            m.d.comb += [self.table_rd.addr.eq(g.table_address(seq, index)),
                         self.table_rd.en.eq(1)]

        # ---- reply register ---------------------------------------------------------------------
        reply = self.cmd_reply.payload
        reply_free = ~self.cmd_reply.valid | self.cmd_reply.ready
        with m.If(self.cmd_reply.valid & self.cmd_reply.ready):
            m.d.sync += self.cmd_reply.valid.eq(0)

        m.d.comb += self.table_rd.en.eq(0)

        def goto(next_state):
            m.d.sync += state.eq(next_state)

        with m.If(state == _State.IDLE):
            with m.If(accept):
                goto(_State.LOOKUP)

        with m.Elif(state == _State.LOOKUP):
            goto(_State.CHECK)

        with m.Elif(state == _State.CHECK):
            m.d.sync += [c_len.eq(cur_len), status.eq(error)]
            with m.If(error != Status.OK):
                goto(_State.COMMIT)
            with m.Else():
                with m.If(c_op == Op.APPEND):
                    if g.slot_width:
                        read_table(c_seq, g.page_index(cur_len))      # addressed from registers
                        with m.If(g.slot(cur_len) == 0):
                            goto(_State.DECIDE)
                        with m.Else():
                            goto(_State.TAIL)
                    else:
                        goto(_State.DECIDE)
                with m.Elif(c_op == Op.FORK):
                    m.d.sync += [i.eq(0), n.eq(g.pages_for(cur_len)), acting.eq(0),
                                 loop_acting.eq(0)]
                    goto(_State.LOOP)
                with m.Elif((c_op == Op.TRUNCATE) | (c_op == Op.CLOSE)):
                    m.d.sync += lock.eq(1)
                    goto(_State.DRAIN)
                with m.Elif(c_op == Op.INJECT):
                    m.d.sync += [lock.eq(1), lock_all.eq(1)]
                    goto(_State.DRAIN)
                with m.Else():                       # open, stat
                    goto(_State.COMMIT)

        # -- append ---------------------------------------------------------------------------
        with m.Elif(state == _State.TAIL):
            m.d.sync += tail.eq(self.table_rd.data)         # block-RAM output into a register
            goto(_State.SHARE)

        with m.Elif(state == _State.SHARE):
            m.d.sync += tail_shared.eq(alloc.query_count > 1)
            goto(_State.DECIDE)

        with m.Elif(state == _State.DECIDE):
            shared = (slot != 0) & tail_shared
            with m.If((slot != 0) & ~shared):
                m.d.sync += [target.eq(tail), new_page.eq(0)]
                goto(_State.COMMIT)
            with m.Elif(alloc.settled & ~alloc_pending):
                with m.If(~alloc.alloc_ready):
                    m.d.sync += status.eq(Status.NO_SPACE)
                    goto(_State.COMMIT)
                with m.Else():
                    m.d.comb += req_alloc.eq(1)
                    m.d.sync += [target.eq(alloc.alloc_page), new_page.eq(1),
                                 copy_read.eq(0), copy_latch.eq(0), copy_store.eq(0)]
                    with m.If(shared):
                        # The commit will replace the tail page's block-table entry: reads of
                        # the sequence are locked out, and the copy waits for those in flight,
                        # so that no read fetches the entry in the cycle it is written.
                        m.d.sync += lock.eq(1)
                        goto(_State.COPY)
                    with m.Else():
                        goto(_State.COMMIT)

        with m.Elif(state == _State.COPY):
            # Read slot s of the old tail page; one cycle later its word (block-RAM output) is
            # captured; the next cycle it goes into the write registers, and the cycle after it
            # is written into the new page. A read waits while a write goes to its bank, so with
            # two banks or more one slot per cycle, with one bank one in two.
            m.d.sync += [copy_store.eq(copy_latch), copy_store_slot.eq(copy_latch_slot)]
            with m.If(copy_store):
                write_record(target, copy_store_slot, captured_word(copy_store_slot))
            bank_free = ~(writing >> g.bank_of(copy_read))[0]
            can_read = (copy_read < slot) & bank_free
            with m.If(can_read):
                read_record(tail, copy_read)
                m.d.sync += [copy_latch_slot.eq(copy_read), copy_read.eq(copy_read + 1)]
            m.d.sync += copy_latch.eq(can_read)
            last_write = (copy_read == slot) & ~copy_latch & ~copy_store     # this cycle
            with m.If(last_write & ~link.query_hit):
                goto(_State.RELEASE_TAIL)

        with m.Elif(state == _State.RELEASE_TAIL):
            m.d.comb += [req_decref.eq(1), req_page.eq(tail)]
            goto(_State.COMMIT)

        # -- fork, truncate, close: walk block-table entries i .. n-1 ------------------------
        with m.Elif(state == _State.LOOP):
            # Three steps per entry, pipelined one entry per cycle: read the table, register the
            # page (block-RAM output straight into a register), act on it.
            with m.If(i < n):
                read_table(c_seq, i)
                m.d.sync += [i.eq(i + 1), act_index.eq(i)]
            m.d.sync += [acting.eq(i < n), loop_acting.eq(acting), loop_index.eq(act_index),
                         loop_page.eq(self.table_rd.data)]
            with m.If(loop_acting):
                m.d.comb += req_page.eq(loop_page)
                with m.If(c_op == Op.FORK):
                    m.d.comb += [
                        req_incref.eq(1),
                        self.table_wr.addr.eq(g.table_address(c_arg, loop_index)),
                        self.table_wr.data.eq(loop_page),
                        self.table_wr.en.eq(1),
                    ]
                with m.Else():
                    m.d.comb += req_decref.eq(1)
            with m.If((i >= n) & ~acting):                   # the last act is this cycle
                goto(_State.COMMIT)

        # -- truncate, close, inject: wait for the reads the lock did not stop -----------------
        with m.Elif(state == _State.DRAIN):
            # The lock rose at the end of CHECK, so no read of the sequence (of any sequence, for
            # inject) is accepted from now on; a read accepted before is held or issuing.
            busy = Mux(c_op == Op.INJECT, link.read_busy, link.query_hit)
            with m.If(~busy):
                with m.If(c_op == Op.INJECT):
                    goto(_State.INJECT_TABLE)
                with m.Else():
                    m.d.sync += [i.eq(Mux(c_op == Op.TRUNCATE, g.pages_for(c_arg), 0)),
                                 n.eq(g.pages_for(c_len)), acting.eq(0), loop_acting.eq(0)]
                    goto(_State.LOOP)

        # -- inject: read-modify-write of one stored codeword ---------------------------------
        with m.Elif(state == _State.INJECT_TABLE):
            read_table(c_seq, g.page_index(c_arg))
            goto(_State.INJECT_PAGE)
        with m.Elif(state == _State.INJECT_PAGE):
            m.d.sync += target.eq(self.table_rd.data)       # block-RAM output into a register
            goto(_State.INJECT_READ)
        with m.Elif(state == _State.INJECT_READ):
            read_record(target, arg_slot)
            goto(_State.INJECT_LATCH)
        with m.Elif(state == _State.INJECT_LATCH):
            # The word read is captured at the end of this cycle; it stays in the capture
            # register through COMMIT, which reads nothing.
            goto(_State.COMMIT)

        # -- commit: state, record and reply change at one edge -------------------------------
        with m.Else():                                    # _State.COMMIT (state 15 unused)
            with m.If(reply_free):
                m.d.sync += [
                    self.cmd_reply.valid.eq(1),
                    reply.op.eq(c_op),
                    reply.status.eq(status),
                    reply.pos.eq(Mux((c_op == Op.APPEND) & (status == Status.OK), c_len, 0)),
                    reply.free_pages.eq(Mux(c_op == Op.STAT, alloc.free_count, 0)),
                    reply.live_seqs.eq(Mux(c_op == Op.STAT, live_count, 0)),
                    reply.ecc_corrected.eq(Mux(c_op == Op.STAT, link.ecc_corrected, 0)),
                    reply.ecc_uncorrectable.eq(Mux(c_op == Op.STAT, link.ecc_uncorrectable, 0)),
                    lock.eq(0),
                    lock_all.eq(0),
                ]
                with m.If(status == Status.OK):
                    with m.If(c_op == Op.OPEN):
                        m.d.sync += [live.bit_select(seq_index, 1).eq(1),
                                     lengths[seq_index].eq(0),
                                     live_count.eq(live_count + 1)]
                    with m.Elif(c_op == Op.APPEND):
                        write_record(target, slot, c_word)
                        m.d.comb += [
                            self.table_wr.addr.eq(g.table_address(c_seq, g.page_index(c_len))),
                            self.table_wr.data.eq(target),
                            self.table_wr.en.eq(new_page),
                        ]
                        m.d.sync += lengths[seq_index].eq(c_len + 1)
                    with m.Elif(c_op == Op.FORK):
                        m.d.sync += [live.bit_select(arg_index, 1).eq(1),
                                     lengths[arg_index].eq(c_len),
                                     live_count.eq(live_count + 1)]
                    with m.Elif(c_op == Op.TRUNCATE):
                        m.d.sync += lengths[seq_index].eq(c_arg)
                    with m.Elif(c_op == Op.CLOSE):
                        m.d.sync += [live.bit_select(seq_index, 1).eq(0),
                                     lengths[seq_index].eq(0),
                                     live_count.eq(live_count - 1)]
                    with m.Elif(c_op == Op.INJECT):
                        write_record(target, arg_slot, captured_word(arg_slot) ^ c_word)
                with m.If(accept):
                    goto(_State.LOOKUP)
                with m.Else():
                    goto(_State.IDLE)
        # Outside the state decoder, as one expression: a plain continuous assignment in Verilog, so that
        # event-driven simulators evaluate it at time zero.
        m.d.comb += self.cmd.ready.eq((state == _State.IDLE)
                                      | ((state == _State.COMMIT) & reply_free))
        return m
