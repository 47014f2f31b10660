"""Golden model of the KV-cache SRAM controller (:class:`rtl.kv.kv_cache.KvCache`).

The controller keeps many sequences' token records (one token's K and V data, ``token_bits`` wide)
in pages of ``page_tokens`` slots, managed the way vLLM's PagedAttention manages GPU memory: each
live sequence has a block table (its page list), pages carry reference counts so that forked
sequences share their common prefix, and an append into a shared tail page copies it first
(copy-on-write). Every stored word is a SECDED codeword (:mod:`sim_models.ecc`).

This model is *physical*: it holds the codewords of every page slot, so injected bit errors behave
exactly as in the hardware (they are shared by every sequence sharing the page, survive a
copy-on-write copy, which copies raw codewords, and disappear when the slot is written again).
Free pages are handed out lowest index first, as the RTL does; which physical page a sequence gets
is not otherwise visible.

Operations and their exact semantics
------------------------------------
Errors are checked in the order listed; an operation that returns an error changes nothing.
``max_len = max_pages_per_seq * page_tokens``.

``open(seq)``
    ``bad_seq`` (``seq >= seqs``), ``live`` (already open); else the sequence is live, length 0.
``append(seq, data)``
    ``bad_seq``, ``not_live``, ``seq_full`` (length == max_len), ``no_space`` (a new page is needed
    and none is free); else the record is stored at position ``length`` and the reply carries that
    position. A new page is needed when ``length`` is a multiple of ``page_tokens`` or when the tail
    page is shared (count > 1); then its filled slots are copied into the fresh page, the old
    page's count falls by one and the block table points at the copy, before the record is written.
``read(seq, start, count)``
    ``bad_seq``, ``not_live``, ``out_of_range`` (``start + count > length``); else the records in
    order, each decoded: a single-bit error is corrected and counted, a double-bit error is
    detected, counted, and the record reported poisoned (its data bits returned as stored).
``fork(src, dst)``
    ``bad_seq`` (either id), ``not_live`` (src), ``live`` (dst already open, including dst == src);
    else dst is live with src's length and page list, and every page's count rises by one.
``truncate(seq, length)``
    ``bad_seq``, ``not_live``, ``out_of_range`` (``length`` > current); else the length shrinks and
    pages wholly beyond it are released (count falls by one, freed at zero).
``close(seq)``
    ``bad_seq``, ``not_live``; else every page's count falls by one, pages reaching zero are freed
    and the slot can be opened again.
``stat()``
    Always ok: ``free_pages``, ``live_seqs``, ``ecc_corrected``, ``ecc_uncorrectable`` (the last two
    saturate at ``2**counter_bits - 1``).
``inject(seq, pos, bits)`` (fault injection, for tests)
    The errors of ``read(seq, pos, 1)``; else flips the given bits of the stored codeword of record
    ``pos`` (bit ``i < token_bits`` is data bit ``i``, bit ``token_bits + j`` is check bit ``j``).

Invariant after every operation (:meth:`KvCacheModel.check_invariant`): free pages + distinct pages
in use = ``pages``; a page's count is the number of live sequences whose page list holds it; a page
is free exactly when its count is zero; every live sequence holds exactly ``ceil(length /
page_tokens)`` distinct pages.
"""

from collections import Counter
from dataclasses import asdict, dataclass

from .ecc import CORRECTED, UNCORRECTABLE, SecdedCode

__all__ = ["KvConfig", "KvCacheModel", "STATUSES", "OPS", "InvariantError"]

#: Every status code, in the order the RTL encodes them (``rtl.kv.layouts.Status``).
STATUSES = ("ok", "bad_seq", "not_live", "live", "seq_full", "no_space", "out_of_range", "bad_op")

#: Every operation of a trace (``read`` goes to the read port, the rest to the command port).
OPS = ("open", "append", "read", "fork", "truncate", "close", "stat", "inject")


class InvariantError(AssertionError):
    """The model's own bookkeeping is inconsistent (a bug in the model, never in its input)."""


def _pow2(value):
    return value >= 1 and value & (value - 1) == 0


@dataclass(frozen=True)
class KvConfig:
    """Elaboration parameters of the controller (shared by the model, the RTL and the CLI).

    ``page_tokens`` and ``banks`` are powers of two with ``banks <= page_tokens`` (record ``pos``
    of a page lives in bank ``pos % banks``); ``counter_bits`` is the width of the saturating ECC
    counters.
    """
    pages: int = 64
    page_tokens: int = 16
    token_bits: int = 64
    seqs: int = 16
    max_pages_per_seq: int = 16
    banks: int = 4
    counter_bits: int = 16

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if not _pow2(self.page_tokens):
            raise ValueError(f"page_tokens must be a power of two, not {self.page_tokens}")
        if not _pow2(self.banks) or self.banks > self.page_tokens:
            raise ValueError(f"banks must be a power of two no larger than page_tokens "
                             f"({self.page_tokens}), not {self.banks}")
        if self.pages < 2:
            raise ValueError(f"pages must be at least 2, not {self.pages}")
        if self.max_pages_per_seq > self.pages:
            raise ValueError(f"max_pages_per_seq ({self.max_pages_per_seq}) cannot exceed "
                             f"pages ({self.pages})")

    @property
    def max_len(self):
        """Most records one sequence can hold."""
        return self.max_pages_per_seq * self.page_tokens

    @property
    def check_bits(self):
        return SecdedCode(self.token_bits).check_bits

    def as_dict(self):
        return asdict(self)


class KvCacheModel:
    """Sequential golden model; every operation returns a reply ``dict`` with a ``"status"``.

    Replies: ``append`` adds ``"pos"``; ``read`` adds ``"data"`` (list of ints) and ``"poisoned"``
    and ``"corrected"`` (lists of indices into ``data``); ``stat`` adds ``"free_pages"``,
    ``"live_seqs"``, ``"ecc_corrected"`` and ``"ecc_uncorrectable"``.
    """

    def __init__(self, config=None, **params):
        if config is None:
            config = KvConfig(**params)
        elif params:
            raise TypeError("give either a KvConfig or keyword parameters, not both")
        self.config = config
        self.code = SecdedCode(config.token_bits)
        c = config
        self.live = [False] * c.seqs
        self.length = [0] * c.seqs
        self.page_list = [[] for _ in range(c.seqs)]
        self.refcount = [0] * c.pages
        # Every slot starts as the codeword of zero, like the RTL's zero-initialised memories;
        # it is never visible (a slot is always written before a read can reach it).
        self.store = [[0] * c.page_tokens for _ in range(c.pages)]
        self.ecc_corrected = 0
        self.ecc_uncorrectable = 0
        self._counter_max = (1 << c.counter_bits) - 1
        #: How often each internal event happened (``copy_on_write``, ``new_page``, ``page_freed``,
        #: ``status:<op>:<status>``): functional coverage for testbenches.
        self.events = Counter()

    # -- helpers -----------------------------------------------------------------------------------
    @property
    def free_pages(self):
        return sum(1 for count in self.refcount if count == 0)

    @property
    def live_seqs(self):
        return sum(self.live)

    def _bad(self, seq):
        return not isinstance(seq, int) or seq < 0 or seq >= self.config.seqs

    def _alloc(self):
        for page, count in enumerate(self.refcount):
            if count == 0:
                self.refcount[page] = 1
                self.events["new_page"] += 1
                return page
        raise InvariantError("allocation with no free page")

    def _release(self, page):
        if self.refcount[page] <= 0:
            raise InvariantError(f"page {page} released with count {self.refcount[page]}")
        self.refcount[page] -= 1
        if self.refcount[page] == 0:
            self.events["page_freed"] += 1

    def _pages_for(self, length):
        return -(-length // self.config.page_tokens)

    def _read_error(self, seq, start, count):
        if self._bad(seq):
            return "bad_seq"
        if not self.live[seq]:
            return "not_live"
        if start < 0 or count < 0 or start + count > self.length[seq]:
            return "out_of_range"
        return None

    # -- operations --------------------------------------------------------------------------------
    def open(self, seq):
        if self._bad(seq):
            return {"status": "bad_seq"}
        if self.live[seq]:
            return {"status": "live"}
        self.live[seq] = True
        self.length[seq] = 0
        self.page_list[seq] = []
        return {"status": "ok"}

    def append(self, seq, data):
        c = self.config
        if self._bad(seq):
            return {"status": "bad_seq"}
        if not self.live[seq]:
            return {"status": "not_live"}
        length = self.length[seq]
        if length == c.max_len:
            return {"status": "seq_full"}
        slot = length % c.page_tokens
        shared = slot != 0 and self.refcount[self.page_list[seq][-1]] > 1
        if (slot == 0 or shared) and self.free_pages == 0:
            return {"status": "no_space"}
        codeword = self.code.encode(data)
        if slot == 0:
            self.page_list[seq].append(self._alloc())
        elif shared:
            old = self.page_list[seq][-1]
            new = self._alloc()
            self.store[new][:slot] = self.store[old][:slot]      # raw codewords, errors and all
            self.events["copy_on_write"] += 1
            self._release(old)
            self.page_list[seq][-1] = new
        self.store[self.page_list[seq][-1]][slot] = codeword
        self.length[seq] = length + 1
        return {"status": "ok", "pos": length}

    def read(self, seq, start, count):
        error = self._read_error(seq, start, count)
        if error:
            return {"status": error}
        c = self.config
        data, poisoned, corrected = [], [], []
        for index, pos in enumerate(range(start, start + count)):
            page = self.page_list[seq][pos // c.page_tokens]
            value, status = self.code.decode(self.store[page][pos % c.page_tokens])
            data.append(value)
            if status == CORRECTED:
                corrected.append(index)
                self.ecc_corrected = min(self.ecc_corrected + 1, self._counter_max)
            elif status == UNCORRECTABLE:
                poisoned.append(index)
                self.ecc_uncorrectable = min(self.ecc_uncorrectable + 1, self._counter_max)
        return {"status": "ok", "data": data, "poisoned": poisoned, "corrected": corrected}

    def fork(self, src, dst):
        if self._bad(src) or self._bad(dst):
            return {"status": "bad_seq"}
        if not self.live[src]:
            return {"status": "not_live"}
        if self.live[dst]:
            return {"status": "live"}
        self.live[dst] = True
        self.length[dst] = self.length[src]
        self.page_list[dst] = list(self.page_list[src])
        for page in self.page_list[dst]:
            self.refcount[page] += 1
        return {"status": "ok"}

    def truncate(self, seq, length):
        if self._bad(seq):
            return {"status": "bad_seq"}
        if not self.live[seq]:
            return {"status": "not_live"}
        if length < 0 or length > self.length[seq]:
            return {"status": "out_of_range"}
        keep = self._pages_for(length)
        for page in self.page_list[seq][keep:]:
            self._release(page)
        del self.page_list[seq][keep:]
        self.length[seq] = length
        return {"status": "ok"}

    def close(self, seq):
        if self._bad(seq):
            return {"status": "bad_seq"}
        if not self.live[seq]:
            return {"status": "not_live"}
        for page in self.page_list[seq]:
            self._release(page)
        self.page_list[seq] = []
        self.live[seq] = False
        self.length[seq] = 0
        return {"status": "ok"}

    def stat(self):
        return {"status": "ok", "free_pages": self.free_pages, "live_seqs": self.live_seqs,
                "ecc_corrected": self.ecc_corrected, "ecc_uncorrectable": self.ecc_uncorrectable}

    def inject(self, seq, pos, bits):
        error = self._read_error(seq, pos, 1)
        if error:
            return {"status": error}
        mask = 0
        for bit in bits:
            if not 0 <= bit < self.code.width:
                raise ValueError(f"bit {bit} is outside the {self.code.width}-bit codeword")
            mask ^= 1 << bit
        c = self.config
        page = self.page_list[seq][pos // c.page_tokens]
        self.store[page][pos % c.page_tokens] ^= mask
        return {"status": "ok"}

    def apply(self, op):
        """Run one trace operation, a ``dict`` like ``{"op": "read", "seq": 0, "start": 0, "count": 4}``
        (``data`` an int, ``bits`` a list of ints), and return its reply."""
        name = op["op"]
        if name == "open":
            reply = self.open(op["seq"])
        elif name == "append":
            reply = self.append(op["seq"], op["data"])
        elif name == "read":
            reply = self.read(op["seq"], op["start"], op["count"])
        elif name == "fork":
            reply = self.fork(op["src"], op["dst"])
        elif name == "truncate":
            reply = self.truncate(op["seq"], op["length"])
        elif name == "close":
            reply = self.close(op["seq"])
        elif name == "stat":
            reply = self.stat()
        elif name == "inject":
            reply = self.inject(op["seq"], op["pos"], op["bits"])
        else:
            raise ValueError(f"unknown operation {name!r}; expected one of {', '.join(OPS)}")
        self.events[f"status:{name}:{reply['status']}"] += 1
        return reply

    # -- invariant ---------------------------------------------------------------------------------
    def check_invariant(self):
        """Raise :class:`InvariantError` unless the bookkeeping is consistent (see module docstring)."""
        c = self.config
        references = [0] * c.pages
        for seq in range(c.seqs):
            pages = self.page_list[seq]
            if not self.live[seq]:
                if pages or self.length[seq]:
                    raise InvariantError(f"closed sequence {seq} still holds pages or length")
                continue
            if not 0 <= self.length[seq] <= c.max_len:
                raise InvariantError(f"sequence {seq} length {self.length[seq]} out of bounds")
            if len(pages) != self._pages_for(self.length[seq]):
                raise InvariantError(f"sequence {seq} has {len(pages)} pages for length "
                                     f"{self.length[seq]}")
            if len(set(pages)) != len(pages):
                raise InvariantError(f"sequence {seq} holds a page twice: {pages}")
            for page in pages:
                references[page] += 1
        if references != self.refcount:
            raise InvariantError(f"reference counts {self.refcount} differ from the page lists' "
                                 f"references {references}")
        in_use = sum(1 for r in references if r)
        if self.free_pages + in_use != c.pages:
            raise InvariantError(f"free {self.free_pages} + in use {in_use} != {c.pages} pages")
        if not (0 <= self.ecc_corrected <= self._counter_max
                and 0 <= self.ecc_uncorrectable <= self._counter_max):
            raise InvariantError("ECC counter out of range")
