"""The one definition of every layout and signature of the KV-cache controller.

:class:`KvGeometry` validates the elaboration parameters (the same :class:`~sim_models.kv_cache.KvConfig`
the golden model takes) and derives every field width from them; its ``*_layout`` methods are the
``lib.data`` layouts of the four client streams, and the signature factories below connect the
controller's internal engines. Testbenches, the CLI and the benchmark pack and unpack through these
layouts with :mod:`verification.packing` and never restate a bit position.
"""

from amaranth.hdl import Array, Cat, Const, unsigned
from amaranth.lib import data, enum, memory, wiring
from amaranth.lib.wiring import In, Out

from sim_models.ecc import check_bits_for
from sim_models.kv_cache import STATUSES, KvConfig

__all__ = ["Op", "Status", "KvGeometry", "AllocatorSignature", "EngineLinkSignature",
           "access_status"]


class Op(enum.IntEnum, shape=3):
    """Command opcodes of the ``cmd`` stream. Code 7 is unassigned and answered with ``BAD_OP``."""
    OPEN = 0
    APPEND = 1
    FORK = 2
    TRUNCATE = 3
    CLOSE = 4
    STAT = 5
    INJECT = 6


class Status(enum.IntEnum, shape=3):
    """Reply status codes (names as in :data:`sim_models.kv_cache.STATUSES`, same order)."""
    OK = 0
    BAD_SEQ = 1
    NOT_LIVE = 2
    LIVE = 3
    SEQ_FULL = 4
    NO_SPACE = 5
    OUT_OF_RANGE = 6
    BAD_OP = 7


assert tuple(s.name.lower() for s in Status) == STATUSES


def _bits(n):
    """Bits to address ``n`` items (at least one, so no zero-width address)."""
    return max(1, (n - 1).bit_length())


class KvGeometry:
    """Field widths and layouts of one controller configuration.

    Parameters are those of :class:`sim_models.kv_cache.KvConfig` (checked eagerly there: a bad value
    raises :class:`TypeError` or :class:`ValueError` naming it).

    Derived widths
    --------------
    ``seq_width``   sequence-id fields: ``seqs.bit_length()``, so an id ``>= seqs`` can be sent and
                    is answered ``bad_seq``.
    ``len_width``   position/count/length fields of requests: wide enough for ``max_len + 1``, so an
                    oversized value is representable and answered ``out_of_range``.
    ``length_width`` a sequence's stored length (``0 .. max_len``).
    ``page_width``, ``index_width``, ``slot_width``, ``bank_width``: page id, block-table index within a
                    sequence, slot within a page, bank; ``codeword_width = token_bits + check_bits``.
    """

    def __init__(self, config=None, **params):
        self.config = config if config is not None else KvConfig(**params)
        c = self.config
        self.pages = c.pages
        self.page_tokens = c.page_tokens
        self.token_bits = c.token_bits
        self.seqs = c.seqs
        self.max_pages_per_seq = c.max_pages_per_seq
        self.banks = c.banks
        self.counter_bits = c.counter_bits
        self.max_len = c.max_len
        self.check_bits = check_bits_for(c.token_bits)
        self.codeword_width = c.token_bits + self.check_bits

        self.seq_width = c.seqs.bit_length()
        self.seq_addr_width = _bits(c.seqs)
        self.len_width = (self.max_len + 1).bit_length()
        self.length_width = self.max_len.bit_length()
        self.page_width = _bits(c.pages)
        self.index_width = _bits(c.max_pages_per_seq)
        self.slot_width = (c.page_tokens - 1).bit_length()          # 0 when page_tokens == 1
        self.bank_width = (c.banks - 1).bit_length()                # 0 when banks == 1
        self.count_width = c.seqs.bit_length()                      # a page has at most seqs owners
        self.free_width = c.pages.bit_length()
        self.live_width = c.seqs.bit_length()

        #: Block table: one entry per (sequence, page index); address ``seq * 2**index_width + index``.
        self.table_depth = c.seqs << self.index_width
        self.table_addr_width = _bits(self.table_depth)
        #: Each bank holds slots ``slot % banks == bank`` of every page, at ``page * rows + slot // banks``.
        self.bank_rows = c.page_tokens // c.banks
        self.bank_depth = c.pages * self.bank_rows
        self.bank_addr_width = _bits(self.bank_depth)

    def __repr__(self):
        return f"KvGeometry({self.config!r})"

    # -- addressing (the one definition of where a record lives) ---------------------------------
    def slot(self, pos):
        """Slot within its page of record ``pos`` (a value at least ``slot_width`` wide)."""
        return pos[:self.slot_width]

    def page_index(self, pos):
        """Block-table index (page of the sequence) of record ``pos``."""
        return pos[self.slot_width:self.slot_width + self.index_width]

    def pages_for(self, length):
        """``ceil(length / page_tokens)``: pages a sequence of ``length`` records holds."""
        return (length + (self.page_tokens - 1)) >> self.slot_width

    def bank_of(self, slot):
        """Bank holding slot ``slot`` of any page: ``slot % banks``."""
        return slot[:self.bank_width] if self.bank_width else Const(0, 1)

    def bank_address(self, page, slot):
        """Row of slot ``slot`` of page ``page`` in its bank: ``page * rows + slot // banks``."""
        if self.slot_width > self.bank_width:
            return Cat(slot[self.bank_width:self.slot_width], page)
        return page

    def table_address(self, seq, index):
        """Block-table address of entry ``index`` of sequence ``seq``."""
        index = Cat(index, Const(0, self.index_width))[:self.index_width]   # zero-extend, then cut
        return Cat(index, seq[:self.seq_addr_width])

    def bank_data(self, ports, bank):
        """The read data of ``ports[bank]`` (one port per bank)."""
        if len(ports) == 1:
            return ports[0].data
        return Array(port.data for port in ports)[bank]

    def sequence(self, live, lengths, seq):
        """``(exists, live, length)`` of sequence id ``seq`` in the sequence table (``live`` a bit
        vector, ``lengths`` an array). ``live`` and ``length`` are meaningless unless ``exists``."""
        index = seq[:self.seq_addr_width]
        return seq < self.seqs, live.bit_select(index, 1), lengths[index]

    # -- client streams ----------------------------------------------------------------------------
    def command_layout(self):
        """``cmd`` payload. ``arg`` is fork's ``dst``, truncate's ``length`` or inject's ``pos``;
        ``data`` is append's record; for inject, ``data`` and ``check`` are XOR masks of the stored
        data bits and check bits."""
        return data.StructLayout({
            "op": Op,
            "seq": unsigned(self.seq_width),
            "arg": unsigned(max(self.seq_width, self.len_width)),
            "data": unsigned(self.token_bits),
            "check": unsigned(self.check_bits),
        })

    def command_reply_layout(self):
        """``cmd_reply`` payload: the request's opcode and status; ``pos`` for append; the counts for
        stat (zero otherwise)."""
        return data.StructLayout({
            "op": Op,
            "status": Status,
            "pos": unsigned(self.len_width),
            "free_pages": unsigned(self.free_width),
            "live_seqs": unsigned(self.live_width),
            "ecc_corrected": unsigned(self.counter_bits),
            "ecc_uncorrectable": unsigned(self.counter_bits),
        })

    def read_layout(self):
        """``rd`` payload: read ``count`` records of ``seq`` from position ``start``."""
        return data.StructLayout({
            "seq": unsigned(self.seq_width),
            "start": unsigned(self.len_width),
            "count": unsigned(self.len_width),
        })

    def read_reply_layout(self):
        """``rd_reply`` payload: one item per record, ``last`` on the final one. A failed or empty
        (``count == 0``) read is one item with ``empty`` and ``last`` set and its status."""
        return data.StructLayout({
            "status": Status,
            "last": 1,
            "empty": 1,
            "corrected": 1,
            "poisoned": 1,
            "data": unsigned(self.token_bits),
        })

    # -- memories ----------------------------------------------------------------------------------
    def table_port(self):
        return memory.ReadPort.Signature(addr_width=self.table_addr_width, shape=self.page_width)

    def table_write_port(self):
        return memory.WritePort.Signature(addr_width=self.table_addr_width, shape=self.page_width)

    def bank_port(self):
        return memory.ReadPort.Signature(addr_width=self.bank_addr_width, shape=self.codeword_width)

    def bank_write_port(self):
        return memory.WritePort.Signature(addr_width=self.bank_addr_width, shape=self.codeword_width)


def access_status(m, status, *, exists, live, out_of_range):
    """Drive ``status`` (combinationally) with the error of an access to one sequence.

    The checks of ``read``, ``inject``, ``truncate`` and ``close`` in their documented order:
    ``bad_seq`` unless ``exists``, then ``not_live``, then ``out_of_range``; ``status`` keeps its
    default (``OK``) when all pass.
    """
    with m.If(~exists):
        m.d.comb += status.eq(Status.BAD_SEQ)
    with m.Elif(~live):
        m.d.comb += status.eq(Status.NOT_LIVE)
    with m.Elif(out_of_range):
        m.d.comb += status.eq(Status.OUT_OF_RANGE)


class AllocatorSignature(wiring.Signature):
    """Requests to :class:`rtl.kv.page_allocator.PageAllocator`, seen from the requester.

    At most one of ``alloc``, ``incref`` and ``decref`` per cycle. ``alloc`` takes ``alloc_page``
    (valid while ``alloc_ready``) with count one; ``incref``/``decref`` act on ``ref_page``.
    ``query_count`` is the count of ``query_page`` (combinational). ``settled`` is high when the
    previous cycle changed nothing, and then ``alloc_ready == (free_count != 0)``.
    """

    def __init__(self, geometry):
        g = geometry
        super().__init__({
            "alloc": Out(1),
            "alloc_ready": In(1),
            "alloc_page": In(g.page_width),
            "incref": Out(1),
            "decref": Out(1),
            "ref_page": Out(g.page_width),
            "query_page": Out(g.page_width),
            "query_count": In(g.count_width),
            "free_count": In(g.free_width),
            "settled": In(1),
            "error": In(1),
        })


class EngineLinkSignature(wiring.Signature):
    """What the command engine and the read engine share, seen from the command engine.

    ``live``/``length`` are the sequence table (registers). ``lock`` (with ``lock_seq``, or every
    sequence when ``lock_all``) stops the read engine accepting reads while a truncate, close or
    inject is changing what they would see. ``query_hit`` says the read engine holds a read of
    ``query_seq`` or is issuing one; ``read_busy`` that it holds or is issuing any read. A read being
    accepted in the current cycle is not counted (both are registers' functions): the command engine
    raises the lock first and consults them from the next cycle on.
    ``ecc_*`` are the read port's saturating ECC counters including this cycle's delivery.
    """

    def __init__(self, geometry):
        g = geometry
        super().__init__({
            "live": Out(g.seqs),
            "length": Out(data.ArrayLayout(unsigned(g.length_width), g.seqs)),
            "lock": Out(1),
            "lock_all": Out(1),
            "lock_seq": Out(g.seq_width),
            "query_seq": Out(g.seq_width),
            "query_hit": In(1),
            "read_busy": In(1),
            "ecc_corrected": In(g.counter_bits),
            "ecc_uncorrectable": In(g.counter_bits),
        })
