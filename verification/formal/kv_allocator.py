"""Formal properties of the KV-cache page allocator (:class:`rtl.kv.page_allocator.PageAllocator`).

The solver drives every request strobe and page number freely, legal or not, every cycle. The
harness keeps its own reference counts (``shadow``), updated only by requests that are *legal* by
the contract of :class:`rtl.kv.layouts.AllocatorSignature` (exactly one strobe; ``alloc`` only
while ``alloc_ready``; ``incref`` of a page in use below the count limit; ``decref`` of a page in
use), and proves, for every reachable state (k-induction) of a four-page, three-sequence
allocator:

* the allocator's counts equal the shadow counts: every legal request has exactly its effect and an
  illegal one changes nothing, so no count ever goes below zero or wraps;
* ``free_count`` equals the number of pages whose count was zero in the previous cycle (so, once
  settled, of pages whose count is zero): free pages + pages in use = ``pages`` (no page lost);
* ``alloc_page`` is free whenever ``alloc_ready`` (no page handed out twice), and once settled
  ``alloc_ready`` is high exactly when some page is free (a free page cannot be missed);
* the sticky ``error`` flag is set exactly when an illegal request has been made.

The cover task reaches a page shared three times while another is free again after being released.
"""

from amaranth.hdl import Array, Assert, Cover, Module, Signal

from rtl.kv.layouts import KvGeometry
from rtl.kv.page_allocator import PageAllocator

from .proof import Proof, free, reset_at_start


def _geometry():
    return KvGeometry(pages=4, page_tokens=2, token_bits=4, seqs=3, max_pages_per_seq=2, banks=1)


def _harness():
    m = Module()
    g = _geometry()
    m.submodules.dut = dut = PageAllocator(g)
    port = dut.port
    started = reset_at_start(m)
    free(m, port.alloc, port.incref, port.decref, port.ref_page, port.query_page)

    count_max = (1 << g.count_width) - 1
    shadow = Array(Signal(g.count_width, name=f"shadow{p}") for p in range(g.pages))
    target = shadow[port.ref_page]
    strobes = port.alloc + port.incref + port.decref
    legal = Signal()
    m.d.comb += legal.eq(
        (strobes == 1)
        & (~port.alloc | port.alloc_ready)
        & (~port.incref | ((target != 0) & (target != count_max)))
        & (~port.decref | (target != 0)))
    with m.If(legal):
        with m.If(port.alloc):
            m.d.sync += shadow[port.alloc_page].eq(1)
        with m.If(port.incref):
            m.d.sync += target.eq(target + 1)
        with m.If(port.decref):
            m.d.sync += target.eq(target - 1)
    illegal_seen = Signal()
    with m.If((strobes != 0) & ~legal):
        m.d.sync += illegal_seen.eq(1)

    zero_counts = sum((count == 0) for count in dut.counts)
    zero_counts_before = Signal(range(g.pages + 1), init=g.pages)
    m.d.sync += zero_counts_before.eq(zero_counts)
    with m.If(started):
        for p in range(g.pages):
            m.d.comb += Assert(dut.counts[p] == shadow[p])
        m.d.comb += [
            Assert(port.free_count == zero_counts_before),
            Assert(~port.settled | (port.free_count == zero_counts)),
            Assert(~port.alloc_ready | (dut.counts[port.alloc_page] == 0)),
            Assert(~port.settled | (port.alloc_ready == (port.free_count != 0))),
            Assert(port.error == illegal_seen),
        ]
    # Reachability (not vacuous): page 0 held three times, page 1 used and released again.
    released = Signal()
    with m.If(legal & port.decref & (port.ref_page == 1) & (target == 1)):
        m.d.sync += released.eq(1)
    m.d.comb += Cover(started & (dut.counts[0] == 3) & released & (dut.counts[1] == 0)
                      & ~port.error)
    return m


PROOFS = [
    Proof("kv_allocator", _harness, mode="prove", depth=6,
          description="4-page allocator: counts exact (never negative), free count = zero counts, "
                      "no page handed out twice, illegal requests change nothing"),
    Proof("kv_allocator_cover", _harness, mode="cover", depth=12,
          description="reachability: a page shared three times while another is released"),
]
