"""The tile's KV engine: runs ``KVOPEN`` and ``KVAPPEND`` on the KV-cache controller, turning K and
V rows of the scratchpad into bfloat16 records."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.kv.layouts import KvGeometry
from rtl.kv.layouts import Op as KvOp
from rtl.kv.layouts import Status as KvStatus
from rtl.tile.layouts import KvCommand, Status, kv_signature, wide_port_signature
from sim_models.tile_isa import TileConfig

__all__ = ["KvEngine", "to_bfloat16"]

_SEQ_BITS = 34
"""Width of a sequence id as the engine computes it: ``KVOPEN``'s ``seq + count`` and
``KVAPPEND``'s ``r[seq_r] + layer * kvh + g`` never wrap, so an id too wide for the controller's
``seq`` field is seen as out of range instead of aliasing a valid one."""


def to_bfloat16(word):
    """The bfloat16 pattern of binary32 ``word``, exactly ``sim_models.vpu.to_bfloat16``: nearest-
    even (``(b + 0x7FFF + b[16]) >> 16``: a carry may reach the exponent, an overflow gives Inf),
    any NaN -> 0x7FC0."""
    nan = (word[23:31] == 0xFF) & (word[:23] != 0)
    return Mux(nan, 0x7FC0, (word + 0x7FFF + word[16])[16:32])


class KvEngine(wiring.Component):
    """Runs one ``KVOPEN`` or ``KVAPPEND`` exactly like ``sim_models.tile_iss.TileIss``: the same
    status and the same KV-cache contents afterwards.

    ``KVOPEN`` opens ``seq .. seq + count - 1`` in order; an id of ``kv_seqs`` or above stops it with
    ``kv_error`` before anything is sent for it, and so does any reply but ``ok`` (the sequences
    opened before stay open, as in the ISS). ``count`` 0 is ``ok``.

    ``KVAPPEND`` checks, in order (each answers without touching the controller): ``hd`` other than
    ``head_dim``, then ``kvh`` or ``count`` 0 (``bad_field``); the K rows ``k .. k + count*kvh*hd``,
    then the V rows, beyond the scratchpad (``spad_range``). Then for each head ``g``: sequence
    ``seq + layer*kvh + g`` (an id of ``kv_seqs`` or above: ``kv_error``, nothing sent), and for each
    ``t < count`` one append of the record of K row ``t`` head ``g`` (words ``k + t*kvh*hd + g*hd``
    on, each rounded by :func:`to_bfloat16`, element ``j`` in bits ``16j..16j+15``) then V likewise
    (from bit ``16*head_dim``). Any reply but ``ok`` stops it with ``kv_error``; the heads before
    keep their appends, as in the ISS.

    The controller has no length query, so the ISS's position rule (a live sequence must hold
    exactly ``pos`` records before its first append) is checked on the reply of that first append:
    if it wrote position ``p != pos``, the engine sends ``TRUNCATE(seq, p)``, which removes the record
    and frees a page it took, and stops with ``kv_error``. The net KV contents (records, lengths,
    free pages) are then the ISS's, which appends nothing to that sequence. A sequence that is not
    live, or full, or needs a page when none is free gets the controller's error: ``kv_error`` with
    nothing changed, as in the ISS. (Tile programs never fork, so no tail page is shared and no
    first append copies one.)

    Interface attributes
    --------------------
    ctl : ``In(kv_signature())``
        The sequencer's: one :data:`~rtl.tile.layouts.KvCommand`, then one status.
    spad : ``Out(wide_port_signature(spad_words, lanes))``
        The scratchpad's row port: read only (``wr_en`` stays low), and only from the cycle after a
        command is accepted to the first cycle its status is valid.
    kv_cmd : ``Out(stream.Signature(geometry.command_layout()))``
        To :class:`rtl.kv.kv_cache.KvCache`'s ``cmd``: ``OPEN``, ``APPEND``, ``TRUNCATE``.
    kv_reply : ``In(stream.Signature(geometry.command_reply_layout()))``
        From its ``cmd_reply``; one command is outstanding at a time.

    Timing (from the cycle the command is accepted to the status; measured in
    ``tests/rtl/tile/test_kv_engine.py``): a fault of the fields 2 cycles, of the ranges 3; ``KVOPEN``
    3 + 5 per sequence. ``KVAPPEND``: a record is ``r = 2 * head_dim / min(lanes, head_dim)`` row
    reads, one a cycle, shifted into the record register as they arrive; the next record is read
    while the controller runs the append before (it latches its payload when it accepts it), so an
    append goes out every ``r + 1`` cycles, or every 8 when the controller is the slower (6 after an
    append that starts a page): 17 with ``lanes`` 4 and ``head_dim`` 32 (8 records into one sequence:
    147 cycles), 9 with ``lanes`` 8.

    Parameters
    ----------
    config : TileConfig
        ``spad_words`` and ``lanes`` (the row port), ``kv_*`` (the controller).
    head_dim : int
        The model's head dimension, a positive multiple of 32 below 4096 (``hd`` is a 12-bit field);
        ``lanes`` must divide it or be at least as large (then one read brings a half record).
    """

    def __init__(self, config: TileConfig, head_dim: int):
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 32 \
                or head_dim % 32 or head_dim >= 1 << 12:
            raise parameter_error(self, ValueError, f"head_dim must be a positive multiple of 32 below "
                                  f"4096, got {head_dim!r}")
        if config.lanes < head_dim and head_dim % config.lanes:
            raise parameter_error(self, ValueError, f"lanes ({config.lanes}) must divide head_dim "
                                  f"({head_dim}) or be at least head_dim: a half record is whole rows")
        try:
            kv_config = config.kv_config(head_dim)
            self._geometry = KvGeometry(kv_config)
        except (TypeError, ValueError) as error:
            raise parameter_error(self, type(error), str(error)) from None
        self.config = config
        self.head_dim = head_dim
        g = self._geometry
        super().__init__({
            "ctl": In(kv_signature()),
            "spad": Out(wide_port_signature(config.spad_words, config.lanes)),
            "kv_cmd": Out(stream.Signature(g.command_layout())),
            "kv_reply": In(stream.Signature(g.command_reply_layout())),
        })

    @property
    def geometry(self) -> KvGeometry:
        """The KV-cache controller's geometry (``config.kv_config(head_dim)``)."""
        return self._geometry

    def elaborate(self, platform):
        m = Module()
        g, hd = self._geometry, self.head_dim
        chunk = min(self.config.lanes, hd)          # words of one row read
        addr_bits = len(self.spad.rd_addr)
        c = Signal(KvCommand)                       # the command being run
        status = self.ctl.resp.payload.status

        # -- reader: K row then V row of one record, one row read a cycle -----------------------------
        record = Signal(g.token_bits)
        full = Signal()                             # record holds the next append's data
        reading = Signal()
        start = Signal()                            # read the next record from this cycle on
        half = Signal()                             # reading V
        col = Signal(range(hd))
        r_t = Signal(16)                            # position within the head of the record read
        stride = Signal(20)                         # kvh * hd: words between a head's K rows
        k_row, v_row, k_head, v_head = (Signal(addr_bits, name=n) for n in ("k_row", "v_row",
                                                                           "k_head", "v_head"))
        issue = reading | start
        end_of_half = col == hd - chunk
        m.d.comb += [self.spad.rd_en.eq(issue),
                     self.spad.rd_addr.eq(Mux(half, v_row, k_row) + col)]
        tag, tag_last = Signal(), Signal()
        m.d.sync += [tag.eq(issue), tag_last.eq(issue & half & end_of_half)]
        with m.If(issue):
            with m.If(~end_of_half):
                m.d.sync += [col.eq(col + chunk), reading.eq(1)]
            with m.Elif(~half):
                m.d.sync += [col.eq(0), half.eq(1), reading.eq(1)]
            with m.Else():                          # the record's last read: on to the next record
                m.d.sync += [col.eq(0), half.eq(0), reading.eq(0)]
                with m.If(r_t + 1 == c.count):
                    m.d.sync += [r_t.eq(0), k_head.eq(k_head + hd), v_head.eq(v_head + hd),
                                 k_row.eq(k_head + hd), v_row.eq(v_head + hd)]
                with m.Else():
                    m.d.sync += [r_t.eq(r_t + 1), k_row.eq(k_row + stride), v_row.eq(v_row + stride)]
        with m.If(tag):
            words = [to_bfloat16(self.spad.rd_data[j]) for j in range(chunk)]
            m.d.sync += record.eq(Cat(record[16 * chunk:], *words))
        with m.If(tag_last):
            m.d.sync += full.eq(1)

        # -- sequencing ------------------------------------------------------------------------------
        seq = Signal(_SEQ_BITS)                     # the sequence being opened or appended to
        left = Signal(16)                           # KVOPEN: sequences still to open
        span = Signal(36)                           # KVAPPEND: count * kvh * hd
        t = Signal(16)                              # position within the head of the record sent
        head = Signal(8)
        undo = Signal(g.len_width)                  # the position a mismatched first append wrote
        last = (t + 1 == c.count) & (head + 1 == c.kvh)
        reply = self.kv_reply.payload
        request = self.kv_cmd.payload
        m.d.comb += [request.seq.eq(seq[:g.seq_width]), request.data.eq(record)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.ctl.cmd.ready.eq(1)
                with m.If(self.ctl.cmd.valid):
                    m.d.sync += c.eq(self.ctl.cmd.payload)
                    m.next = "FIELDS"
            with m.State("FIELDS"):
                with m.If(~c.append):
                    m.d.sync += [seq.eq(c.seq), left.eq(c.count)]
                    m.next = "OPEN"
                with m.Elif((c.hd != hd) | (c.kvh == 0) | (c.count == 0)):
                    m.d.sync += status.eq(Status.BAD_FIELD)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += [span.eq(c.count * c.kvh * hd), stride.eq(c.kvh * hd),
                                 seq.eq(c.seq + c.layer * c.kvh)]
                    m.next = "RANGES"
            with m.State("RANGES"):
                with m.If((c.k + span > self.config.spad_words) | (c.v + span > self.config.spad_words)):
                    m.d.sync += status.eq(Status.SPAD_RANGE)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += [reading.eq(1), half.eq(0), col.eq(0), r_t.eq(0), full.eq(0),
                                 k_row.eq(c.k), v_row.eq(c.v), k_head.eq(c.k), v_head.eq(c.v),
                                 t.eq(0), head.eq(0)]
                    m.next = "APPEND"

            # KVOPEN
            with m.State("OPEN"):
                m.d.comb += request.op.eq(KvOp.OPEN)
                with m.If(left == 0):
                    m.d.sync += status.eq(Status.OK)
                    m.next = "RESPOND"
                with m.Elif(seq >= g.seqs):
                    m.d.sync += status.eq(Status.KV_ERROR)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.comb += self.kv_cmd.valid.eq(1)
                    with m.If(self.kv_cmd.ready):
                        m.next = "OPEN_REPLY"
            with m.State("OPEN_REPLY"):
                m.d.comb += self.kv_reply.ready.eq(1)
                with m.If(self.kv_reply.valid):
                    with m.If(reply.status != KvStatus.OK):
                        m.d.sync += status.eq(Status.KV_ERROR)
                        m.next = "RESPOND"
                    with m.Else():
                        m.d.sync += [seq.eq(seq + 1), left.eq(left - 1)]
                        m.next = "OPEN"

            # KVAPPEND
            with m.State("APPEND"):
                # (inject's check-bit mask is zero for every command sent; assigned here so that the
                # back end writes it into the FSM's process, not as a constant Verilator flags)
                m.d.comb += [request.op.eq(KvOp.APPEND), request.check.eq(0)]
                with m.If(seq >= g.seqs):           # no such sequence: nothing is sent
                    m.d.sync += status.eq(Status.KV_ERROR)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.comb += self.kv_cmd.valid.eq(full)
                    with m.If(full & self.kv_cmd.ready):
                        m.d.sync += full.eq(0)
                        m.d.comb += start.eq(~last)
                        m.next = "APPEND_REPLY"
            with m.State("APPEND_REPLY"):
                m.d.comb += self.kv_reply.ready.eq(1)
                with m.If(self.kv_reply.valid):
                    with m.If(reply.status != KvStatus.OK):
                        m.d.sync += status.eq(Status.KV_ERROR)
                        m.next = "RESPOND"
                    with m.Elif((t == 0) & (reply.pos != c.pos)):
                        m.d.sync += undo.eq(reply.pos)
                        m.next = "UNDO"
                    with m.Elif(last):
                        m.d.sync += status.eq(Status.OK)
                        m.next = "RESPOND"
                    with m.Elif(t + 1 == c.count):
                        m.d.sync += [t.eq(0), head.eq(head + 1), seq.eq(seq + 1)]
                        m.next = "APPEND"
                    with m.Else():
                        m.d.sync += t.eq(t + 1)
                        m.next = "APPEND"
            with m.State("UNDO"):
                m.d.comb += [request.op.eq(KvOp.TRUNCATE), request.arg.eq(undo), self.kv_cmd.valid.eq(1)]
                with m.If(self.kv_cmd.ready):
                    m.next = "UNDO_REPLY"
            with m.State("UNDO_REPLY"):
                m.d.comb += self.kv_reply.ready.eq(1)
                with m.If(self.kv_reply.valid):
                    m.d.sync += status.eq(Status.KV_ERROR)
                    m.next = "RESPOND"

            with m.State("RESPOND"):
                m.d.sync += reading.eq(0)
                m.d.comb += self.ctl.resp.valid.eq(1)
                with m.If(self.ctl.resp.ready):
                    m.next = "IDLE"
        return m
