"""Reference-counted page allocator of the KV-cache controller."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from .layouts import AllocatorSignature

__all__ = ["PageAllocator"]


def _lowest_set(bits):
    """``(any bit set, index of the lowest set bit)`` of ``bits``, as a balanced tree."""
    if len(bits) == 1:
        return bits[0], Const(0, 0)
    half = 1 << ((len(bits) - 1).bit_length() - 1)
    lo_any, lo_index = _lowest_set(bits[:half])
    hi_any, hi_index = _lowest_set(bits[half:])
    width = (len(bits) - 1).bit_length()
    index = Mux(lo_any, lo_index, Cat(hi_index, Const(0, width - 1 - len(hi_index)), Const(1, 1)))
    return lo_any | hi_any, index[:width]


class PageAllocator(wiring.Component):
    """Reference counts of ``pages`` pages; a page is free exactly when its count is zero.

    The counts are registers (``pages * count_width`` flip-flops; 320 at the default 64 pages), so
    the free set is the set of zero counts by construction: a page cannot be free twice, nor free
    and in use. ``free_count``, the number of zero counts, is a register that follows the counts'
    changes, and the next page to hand out, the lowest-numbered free page (a balanced priority
    tree), is registered from the counts: both are one cycle behind the counts, so exact whenever
    ``settled`` (proved in ``verification/formal/kv_allocator.py``).

    Parameters
    ----------
    geometry : :class:`rtl.kv.layouts.KvGeometry`
        Uses ``pages``, ``page_width``, ``count_width`` (counts run ``0 .. seqs``).

    Interface attributes
    --------------------
    port : ``In(AllocatorSignature(geometry))``
        See :class:`~rtl.kv.layouts.AllocatorSignature`. ``alloc`` with ``alloc_ready`` sets
        ``alloc_page``'s count to one; ``incref``/``decref`` add or subtract one on ``ref_page``.

    Latency and throughput
    ----------------------
    Every request takes effect at the next clock edge; one request per cycle. ``alloc_ready`` is
    low in the cycle after any change (the registered candidate is being recomputed); ``settled``
    says so.

    Bad input
    ---------
    A request that would break the invariant does nothing and sets the sticky ``error`` flag
    (until reset): more than one request in a cycle, ``alloc`` without ``alloc_ready``, ``incref``
    of a free page or of a count already at ``2**count_width - 1``, ``decref`` of a free page. The
    command engine is designed never to make one; this is checked by simulation (the cocotb
    regression compares every ``stat`` free-page count with the golden model), not proved.
    """

    def __init__(self, geometry):
        self._geometry = geometry
        super().__init__({"port": In(AllocatorSignature(geometry))})
        self._counts = Array(Signal(geometry.count_width, name=f"count{p}")
                             for p in range(geometry.pages))

    @property
    def geometry(self):
        return self._geometry

    @property
    def counts(self):
        """The count registers (an :class:`~amaranth.hdl.Array`), for formal harnesses."""
        return self._counts

    def elaborate(self, platform):
        m = Module()
        g = self._geometry
        port = self.port
        count_max = (1 << g.count_width) - 1

        counts = self._counts
        free = Signal(g.pages)
        m.d.comb += free.eq(Cat(*[c == 0 for c in counts]))
        free_count = Signal(g.free_width, init=g.pages)
        candidate = Signal(g.page_width)
        candidate_valid = Signal()
        changed = Signal()
        error = Signal()

        # Lowest free page, registered: a balanced tree, log2(pages) multiplexers deep.
        any_free, lowest = _lowest_set(free)
        m.d.sync += [candidate.eq(lowest), candidate_valid.eq(any_free)]

        requests = Cat(port.alloc, port.incref, port.decref)
        one_request = (requests & (requests - 1)) == 0
        # What the request needs to know of the addressed count, as OR trees over the pages
        # (each term decided at its own count register) rather than a pages-to-one multiplexer of
        # the count followed by comparisons: shallower, and shared with the count enables.
        addressed = [port.ref_page == p for p in range(g.pages)]
        def addressed_count_is(value):
            return Cat(*[addressed[p] & (counts[p] == value) for p in range(g.pages)]).any()

        target_zero = addressed_count_is(0)
        target_one = addressed_count_is(1)
        target_max = addressed_count_is(count_max)
        bad = Signal()
        m.d.comb += bad.eq(
            ~one_request
            | (port.alloc & ~port.alloc_ready)
            | (port.incref & (target_zero | target_max))
            | (port.decref & target_zero))

        # Each count register has its own incrementer and its own enable, decided from its own
        # value: a request that is bad for the page it addresses changes no count, which is what
        # ``bad`` says, without ``bad`` on the path to every count register. ``settled`` falls
        # after any request, good or bad.
        m.d.sync += changed.eq(requests.any())
        with m.If(bad):
            m.d.sync += error.eq(1)
        for p, count in enumerate(counts):
            with m.If(one_request):
                with m.If(port.alloc & port.alloc_ready & (candidate == p)):
                    m.d.sync += count.eq(1)
                with m.If(port.incref & addressed[p] & (count != 0) & (count != count_max)):
                    m.d.sync += count.eq(count + 1)
                with m.If(port.decref & addressed[p] & (count != 0)):
                    m.d.sync += count.eq(count - 1)
        # The free count follows the counts a cycle behind (like the candidate): an alloc takes a
        # free page, a decref of a count of one releases one; nothing else (a bad request
        # included) changes which counts are zero. The two events are registered first.
        allocated = Signal()
        released = Signal()
        m.d.sync += [
            allocated.eq(one_request & port.alloc & port.alloc_ready),
            released.eq(one_request & port.decref & target_one),
            free_count.eq(free_count - allocated + released),
        ]

        m.d.comb += [
            port.alloc_ready.eq(candidate_valid & ~changed),
            port.alloc_page.eq(candidate),
            port.query_count.eq(counts[port.query_page]),
            port.free_count.eq(free_count),
            port.settled.eq(~changed),
            port.error.eq(error),
        ]
        return m
