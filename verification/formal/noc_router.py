"""Formal properties of the fabric's router and output allocator on a small configuration.

Router (:class:`rtl.noc.router.Router` at ``(0, 0)`` of a 2x2 mesh, 9-bit flits, 2 VCs of 2 flits per
port), with static VCs (2 classes x 1 VC) and with dynamic VCs (1 class x 2 VCs, so heads choose
their output VC, 2 order buckets), with free upstream senders on every input and free credit return
downstream:

* *credit counters within 0..depth*: the router never sends a flit on an output VC whose downstream
  buffer (modelled in the harness, ``depth`` flits) is full, and never returns more credits on an input
  VC than flits it received there;
* *no flit dropped or duplicated inside*: every credit the router returns is one flit leaving its
  buffer, and every such flit appears on exactly one output link one cycle after its credit (the
  count of credits returned in cycle ``t - 1`` equals the count of output flits in cycle ``t``), and
  the router never flags an error (no buffer overflow, no illegal route);
* *an output VC is never given twice*: on every output VC, flits form whole packets (a head only
  when no packet holds the VC, body and tail flits only inside one) -- two packets granted the same
  output VC would interleave.

Output allocator (4 inputs x 2 VCs, k-induction; static VCs, and dynamic VCs of one class with 2
order buckets), in an environment that presents a body flit only on the output VC its packet holds:
at most one grant per cycle, only to a requester with a credit on the VC it takes, a body flit on
its packet's VC (static VCs: every flit on its own VC), a held output VC never granted to another
head, ``free`` equal to the VCs no packet holds, and, with dynamic VCs, the order rule: the buckets
each output VC remembers are those it carried since its buffer last drained, no bucket is
remembered by two VCs, and a head never takes a VC other than the one remembering its bucket.

The router tasks are bounded (``bmc``: static VCs 7 cycles, about 2 minutes; dynamic VCs 6 cycles,
about 30 s); the others are unbounded.
"""

from functools import partial

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, Signal

from rtl.noc.layouts import PORTS, NocParams, legal_outputs
from rtl.noc.output_allocator import OutputAllocator
from rtl.noc.router import Router
from rtl.noc.vc_buffer import VcBuffer

from .proof import Proof, free, reset_at_start

#: Static VCs: 2 classes x 1 VC, so the classes' VCs stay disjoint through the router.
STATIC_PARAMS = NocParams(width=9, vcs=2, depth=2, classes=2, coord_bits=1)
#: Dynamic VCs: 1 class x 2 VCs, so heads choose their output VC, with 2 order buckets.
DYNAMIC_PARAMS = NocParams(width=9, vcs=2, depth=2, classes=1, coord_bits=1, order_buckets=2)
X, Y = 0, 0


def _popcount(bits):
    return sum(bit for bit in bits) if bits else Const(0, 1)


def _xy(dest_x, dest_y):
    """Python XY route of the router at (X, Y) as a list of (condition, port)."""
    from rtl.noc.layouts import E, L, N, S, W
    return [(dest_x > X, E), (dest_x < X, W), (dest_y > Y, N), (dest_y < Y, S), (None, L)]


def _router_harness(p):
    V, D = p.vcs, p.depth
    m = Module()
    m.submodules.dut = dut = Router(p, X, Y)
    started = reset_at_start(m)

    cnt_bits = 4
    # ---- upstream senders on every input: credits, packet framing, legal routes
    for i in range(PORTS):
        link = dut.input(i)
        free(m, link.valid, link.flit.as_value())
        credits = [Signal(range(D + 1), init=D, name=f"up_cred{i}_{v}") for v in range(V)]
        inpkt = [Signal(name=f"up_inpkt{i}_{v}") for v in range(V)]
        for v in range(V):
            send = Signal(name=f"up_send{i}_{v}")
            m.d.comb += send.eq(link.valid & (link.flit.vc == v))
            with m.If(send):
                m.d.comb += [Assume(credits[v] != 0), Assume(link.flit.head == ~inpkt[v])]
                m.d.sync += inpkt[v].eq(~link.flit.tail)
            m.d.sync += credits[v].eq(credits[v] - send + link.credit[v])
            with m.If(started):
                # the router returns a credit only for a flit it holds
                m.d.comb += Assert((credits[v] + link.credit[v]) <= D)
        m.d.comb += Assume(link.flit.vc < V)
        hdr_dx = link.flit.data[0:p.coord_bits]
        hdr_dy = link.flit.data[p.coord_bits:2 * p.coord_bits]
        hdr_cls = link.flit.data[4 * p.coord_bits:4 * p.coord_bits + p.class_bits]
        legal = legal_outputs(i)
        # what correct neighbours send: a head's lookahead route is its XY route here, a legal turn
        route_ok = Const(0, 1)
        taken = Const(0, 1)
        for cond, port in _xy(hdr_dx, hdr_dy):
            hit = ~taken if cond is None else (~taken & cond)
            if port in legal:
                route_ok = route_ok | (hit & (link.flit.route == (1 << port)))
            taken = taken | (Const(1, 1) if cond is None else cond)
        with m.If(link.valid & link.flit.head):
            m.d.comb += [Assume(route_ok), Assume(hdr_cls == (link.flit.vc // p.vcs_per_class))]
    from rtl.noc.layouts import S, W
    for i in (W, S):
        m.d.comb += Assume(~dut.input(i).valid)

    # ---- downstream receivers on every output: buffer occupancy, packet framing, credit return
    out_valid_bits = []
    for o in range(PORTS):
        link = dut.output(o)
        free(m, link.credit)
        occ = [Signal(range(D + 1), name=f"dn_occ{o}_{u}") for u in range(V)]
        inpkt = [Signal(name=f"dn_inpkt{o}_{u}") for u in range(V)]
        for u in range(V):
            arrive = Signal(name=f"dn_arrive{o}_{u}")
            m.d.comb += arrive.eq(link.valid & (link.flit.vc == u))
            m.d.comb += Assume(~link.credit[u] | (occ[u] != 0))
            m.d.sync += occ[u].eq(occ[u] + arrive - link.credit[u])
            with m.If(started & arrive):
                m.d.comb += [Assert(occ[u] - link.credit[u] < D),         # a credit was available
                             Assert(link.flit.head == ~inpkt[u])]           # whole packets per VC
            with m.If(arrive):
                m.d.sync += inpkt[u].eq(~link.flit.tail)
        out_valid_bits.append(link.valid)

    # ---- conservation: credits returned in cycle t-1 == flits out in cycle t
    credit_bits = [dut.input(i).credit[v] for i in range(PORTS) for v in range(V)]
    credits_now = Signal(cnt_bits)
    credits_last = Signal(cnt_bits)
    outs_now = Signal(cnt_bits)
    m.d.comb += [credits_now.eq(_popcount(credit_bits)), outs_now.eq(_popcount(out_valid_bits))]
    m.d.sync += credits_last.eq(credits_now)
    second = Signal()
    m.d.sync += second.eq(started)
    with m.If(second):
        m.d.comb += [Assert(outs_now == credits_last), Assert(~dut.error)]

    # ---- cover: a two-flit packet crosses from E to L while another goes N -> L's other class
    seen_tail = Signal()
    with m.If(dut.output(4).valid & dut.output(4).flit.tail & ~dut.output(4).flit.head):
        m.d.sync += seen_tail.eq(1)
    m.d.comb += Cover(started & seen_tail & dut.output(4).valid & (dut.output(4).flit.vc == 1))
    return m


def _allocator_harness(buckets):
    """One output allocator (4 inputs x 2 VCs; static VCs, or dynamic VCs of one class with ``buckets``
    order buckets) in an environment that keeps packets whole per output VC."""
    K, V, B = 4, 2, buckets
    n = K * V
    m = Module()
    m.submodules.alloc = alloc = OutputAllocator(K, V, classes=1, buckets=B)
    started = reset_at_start(m)
    free(m, alloc.head, alloc.body, alloc.tail, alloc.credit_ok)
    if alloc.dynamic:
        free(m, alloc.drained, *(alloc.bucket[r] for r in range(n)), *(alloc.ovc[r] for r in range(n)))
        ovc = [alloc.ovc[r] for r in range(n)]
    else:
        ovc = [Const(r % V, 1) for r in range(n)]    # static VCs: VC v goes out on VC v
    held = [Signal(name=f"held{u}") for u in range(V)]          # some packet holds output VC u
    holder = [Signal(range(n), name=f"holder{u}") for u in range(V)]
    # per output VC: the order buckets it carried since its downstream buffer was last empty
    remembered = [Signal(max(B, 1), name=f"remembered{u}") for u in range(V)]
    for r in range(n):
        owns = [held[u] & (holder[u] == r) for u in range(V)]
        # a requester presents a body flit only on the output VC it holds, a head only when it holds none
        m.d.comb += [Assume(~alloc.body[r] | Cat(*owns).bit_select(ovc[r], 1)),
                     Assume(ovc[r] < V), Assume(~alloc.head[r] | ~Cat(*owns).any())]
    granted = alloc.grant.any()
    head_granted = (alloc.grant & alloc.head).any()
    u = alloc.grant_vc
    bucket = Const(0, 1)
    if alloc.dynamic:
        for r in range(n):
            bucket = bucket | (alloc.grant[r] & alloc.bucket[r])
    with m.If(started & granted):
        m.d.comb += [Assert(u < V), Assert(alloc.credit_ok.bit_select(u, 1)),
                     Assert((alloc.grant & (alloc.head | alloc.body)).any())]
        for r in range(n):
            # a body flit stays on its packet's VC; with static VCs every flit stays on its own VC
            with m.If(alloc.grant[r] & alloc.body[r] if alloc.dynamic else alloc.grant[r]):
                m.d.comb += Assert(u == ovc[r])
    with m.If(started & head_granted):
        m.d.comb += Assert(~Cat(*held).bit_select(u, 1))        # a held output VC is never given again
        if alloc.dynamic:
            for w in range(V):
                # the order rule: a head never takes a VC other than the one that remembers its bucket
                m.d.comb += Assert((w == u) | ~remembered[w].bit_select(bucket, 1))
    for w in range(V):
        taken = head_granted & (u == w)
        with m.If(taken & ~(alloc.grant & alloc.tail).any()):
            m.d.sync += held[w].eq(1)
            for r in range(n):
                with m.If(alloc.grant[r]):
                    m.d.sync += holder[w].eq(r)
        with m.If(granted & ~head_granted & (alloc.grant & alloc.tail).any() & (u == w)):
            m.d.sync += held[w].eq(0)
        if alloc.dynamic:
            kept = Mux(alloc.drained[w] & ~held[w], 0, remembered[w])
            m.d.sync += remembered[w].eq(kept | Mux(taken, 1 << bucket, 0))
    with m.If(started):
        m.d.comb += Assert(_popcount([alloc.grant[r] for r in range(n)]) <= 1)
        for w in range(V):
            m.d.comb += Assert(alloc.free[w] == ~held[w])
            if alloc.dynamic:
                m.d.comb += Assert(alloc.seen[w] == remembered[w])
        for b in range(B):
            # a flow's packets are downstream in one VC at most
            m.d.comb += Assert(_popcount([remembered[w][b] for w in range(V)]) <= 1)
    m.d.comb += Cover(started & held[0] & held[1] & (holder[0] // V != holder[1] // V))
    return m


def _vc_buffer_harness():
    """A VC buffer behind a credit-respecting sender: occupancy within 0..depth, writes == stored + popped."""
    V, D = 2, 3
    m = Module()
    m.submodules.buf = buf = VcBuffer(vcs=V, depth=D, shape=2, read_ports=2)
    started = reset_at_start(m)
    free(m, buf.w_en, buf.w_vc, buf.w_data, *buf.r_vc, *buf.r_en)
    m.d.comb += Assume(buf.r_vc[0] != buf.r_vc[1])
    credits = [Signal(range(D + 1), init=D, name=f"credits{v}") for v in range(V)]
    written = [Signal(8, name=f"written{v}") for v in range(V)]
    popped = [Signal(8, name=f"popped{v}") for v in range(V)]
    for v in range(V):
        push = buf.w_en & (buf.w_vc == v)
        pop = Cat(*(buf.r_en[k] & (buf.r_vc[k] == v) for k in range(2))).any() & (buf.count[v] != 0)
        with m.If(push):
            m.d.comb += Assume(credits[v] != 0)          # the sender only writes with a credit
        m.d.sync += [credits[v].eq(credits[v] - push + pop), written[v].eq(written[v] + push),
                     popped[v].eq(popped[v] + pop)]
        with m.If(started):
            m.d.comb += [Assert(buf.count[v] <= D), Assert(credits[v] + buf.count[v] == D),
                         Assert((written[v] - popped[v])[:8] == buf.count[v]), Assert(~buf.overflow)]
    m.d.comb += Cover(started & (buf.count[0] == D) & (buf.count[1] == D))
    return m


PROOFS = [
    Proof("noc_vc_buffer_credits", _vc_buffer_harness, mode="prove", depth=6,
          description="VC buffer behind credits: occupancy in 0..depth, credits + occupancy == depth, "
                      "written - popped == held, never overflows"),
    Proof("noc_vc_buffer_cover", _vc_buffer_harness, mode="cover", depth=10,
          description="reachability: both VCs full"),
    Proof("noc_router_credits_conservation", partial(_router_harness, STATIC_PARAMS), mode="bmc", depth=7,
          description="router, static VCs: credits within 0..depth both ways, credits returned == "
                      "flits sent on, whole packets on every output VC, no error"),
    Proof("noc_router_dynamic_vcs_credits_conservation", partial(_router_harness, DYNAMIC_PARAMS),
          mode="bmc", depth=6,
          description="router, dynamic VCs: the same properties with heads choosing their output VC"),
    Proof("noc_output_allocator_grants", partial(_allocator_harness, 0), mode="prove", depth=4,
          description="output allocator, static VCs: one grant per cycle, only with a credit, on the "
                      "requester's own VC, a held output VC never given to another head, free flags "
                      "match the packets in flight"),
    Proof("noc_output_allocator_dynamic_vcs_grants", partial(_allocator_harness, 2), mode="prove", depth=4,
          description="output allocator, dynamic VCs: the same, and a head never leaves the VC its "
                      "order bucket is pinned to"),
    Proof("noc_output_allocator_cover", partial(_allocator_harness, 0), mode="cover", depth=6,
          description="reachability: both output VCs held by packets of different inputs"),
    Proof("noc_output_allocator_dynamic_vcs_cover", partial(_allocator_harness, 2), mode="cover", depth=6,
          description="reachability, dynamic VCs: both output VCs held by packets of different inputs"),
]
