"""Five-port input-queued virtual-channel mesh router with credit flow control and XY routing."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .layouts import (
    PORT_NAMES,
    PORTS,
    STEP,
    L,
    NocParams,
    legal_inputs,
    legal_outputs,
    order_bucket,
    xy_route,
)
from .output_allocator import OutputAllocator
from .vc_buffer import VcBuffer

__all__ = ["Router"]


class Router(wiring.Component):
    """A mesh router at ``(x, y)``: 5 ports, ``vcs`` VCs of ``depth`` flits per input, XY routing.

    Pipeline (two cycles per hop at zero load)
    ------------------------------------------
    *Link / allocation cycle*: a flit arrives on an input link and is written into its VC buffer; at
    the same time every output port's :class:`~rtl.noc.output_allocator.OutputAllocator` picks the
    flit that crosses it *next* cycle. Routing is lookahead: a head flit arrives with its output port
    here in its ``route`` field, and the XY route at the next router is computed as it is written
    into the buffer, to leave with it. The allocators see, per VC, the tail bit and route of every flit
    not yet granted, in registers that shift when a flit is granted; their front is the VC's next flit
    to allocate, or the flit arriving now. So an arriving head is allocated in the cycle it arrives,
    a VC can send one flit every cycle, and allocation starts from registers only.

    *Traversal cycle*: every granted flit is read (each VC has its own read port, so an input can feed
    several outputs at once) and crosses the crossbar into its output link register, which is the
    link to the next router.

    Allocation is per output port only, because inputs never conflict: one round robin over the input
    VCs that can use the output now (see :class:`~rtl.noc.output_allocator.OutputAllocator`). Message
    class ``c`` stays on the VCs of class ``c``. With static VCs (``params.order_buckets == 0``, the
    default) a packet arriving on VC ``v`` leaves on VC ``v``, so a flow, whose VC the network
    interface chooses once (:func:`~rtl.noc.layouts.flow_vc`), keeps its packets in one FIFO per
    link and in order end to end. With dynamic VCs a head takes any free output VC of its class with a
    credit, except that a head whose flow's *order bucket* (:func:`~rtl.noc.layouts.order_bucket`,
    computed here as the head arrives) an output VC still remembers must take that VC, so the packets
    of a flow stay in order end to end.
    Wormhole per VC: an output VC belongs to one packet from its head until its tail crosses.

    Credits: one per downstream buffer of each output VC; a flit is only granted with one. The
    router returns a credit upstream (registered) in the cycle after it grants a flit, which leaves the
    buffer in that cycle; a credit arriving is usable in the same cycle, so the credit loop is three
    cycles and ``depth`` of 4 keeps one VC streaming at the full link rate.

    Parameters
    ----------
    params : NocParams
        Fabric parameters (default ``NocParams()``).
    x, y : int
        Coordinates of this router.

    Interface attributes
    --------------------
    i_n, i_e, i_s, i_w, i_l : In(LinkSignature)
        Input links (``i_l`` from the network interface). ``credit`` is driven by the router.
    o_n, o_e, o_s, o_w, o_l : Out(LinkSignature)
        Output links (``o_l`` to the network interface); ``valid``/``flit`` are registers.
    error : Out(1)
        Sticky protocol error: a flit arrived on a full VC (it is dropped), or a head arrived whose
        ``route`` is no legal output of its input port (it stays at its VC's front and blocks only that
        VC). Neither happens with correct neighbours.

    Latency and throughput
    ----------------------
    Two cycles per hop (one in the router, one on the link). Each output sends one flit per cycle and
    each input VC one flit per cycle. A stalled downstream (no credits) holds flits in their buffers;
    nothing is lost or duplicated.
    """

    def __init__(self, params=None, x=0, y=0):
        if params is None:
            params = NocParams()
        for name, value in (("x", x), ("y", y)):
            if not isinstance(value, int) or not 0 <= value < params.max_side:
                raise parameter_error(self, ValueError,
                                      f"{name} = {value!r} is outside 0..{params.max_side - 1}")
        self._params, self._x, self._y = params, x, y
        link = params.link_signature
        members = {}
        for name in PORT_NAMES:
            members[f"i_{name}"] = In(link)
        for name in PORT_NAMES:
            members[f"o_{name}"] = Out(link)
        members["error"] = Out(1)
        super().__init__(members)

    @property
    def params(self):
        return self._params

    @property
    def x(self):
        return self._x

    @property
    def y(self):
        return self._y

    def input(self, port):
        return getattr(self, f"i_{PORT_NAMES[port]}")

    def output(self, port):
        return getattr(self, f"o_{PORT_NAMES[port]}")

    def elaborate(self, platform):
        m = Module()
        p = self._params
        V, D = p.vcs, p.depth
        dynamic = p.dynamic_vcs
        meta_fields = {"tail": 1, "route": PORTS}
        if dynamic:
            meta_fields["bucket"] = p.bucket_bits
        meta_layout = data.StructLayout(meta_fields)

        # One allocator per output; requester k * V + v is VC v of the k-th legal input of that output.
        allocs = []
        for o in range(PORTS):
            alloc = OutputAllocator(len(legal_inputs(o)), V, p.classes, p.order_buckets)
            m.submodules[f"alloc_{PORT_NAMES[o]}"] = alloc
            allocs.append(alloc)

        # Traversal-stage registers: the grants decided in the previous cycle.
        x_valid = [Signal(name=f"x_valid{o}") for o in range(PORTS)]
        x_sel = [Signal(len(legal_inputs(o)) * V, name=f"x_sel{o}") for o in range(PORTS)]
        x_vc = [Signal(p.vc_bits, name=f"x_vc{o}") for o in range(PORTS)]
        pop = [Signal(V, name=f"pop{i}") for i in range(PORTS)]

        # Output credit counters: cnt counts the downstream buffers free before this cycle's traversal.
        for o in range(PORTS):
            out = self.output(o)
            cnt = [Signal(range(D + 1), init=D, name=f"cnt{o}_{u}") for u in range(V)]
            sent = [x_valid[o] & (x_vc[o] == u) for u in range(V)]
            for u in range(V):
                m.d.sync += cnt[u].eq(cnt[u] - sent[u] + out.credit[u])
            m.d.comb += allocs[o].credit_ok.eq(Cat(*((cnt[u] > sent[u]) | out.credit[u] for u in range(V))))
            if dynamic:
                m.d.comb += allocs[o].drained.eq(Cat(*((cnt[u] == D) & ~sent[u] for u in range(V))))

        # Input ports: buffers, per-VC packet state, requests.
        errors = []
        bufs = []
        for i in range(PORTS):
            link = self.input(i)
            m.submodules[f"buf_{PORT_NAMES[i]}"] = buf = VcBuffer(
                vcs=V, depth=D, shape=p.buffer_layout, read_ports=V)
            bufs.append(buf)
            errors.append(buf.overflow)
            hdr = data.View(p.header_layout, link.flit.data)
            legal = Const(sum(1 << o for o in legal_outputs(i)), PORTS)
            route_in = Signal(PORTS, name=f"route_in{i}")
            # Lookahead: the XY route at the router behind the output this head takes here.
            next_route = Signal(PORTS, name=f"next_route{i}")
            ahead = Const(0, PORTS)
            for o in legal_outputs(i):
                if o == L:
                    continue
                nx, ny = self._x + STEP[o][0], self._y + STEP[o][1]
                if 0 <= nx < p.max_side and 0 <= ny < p.max_side:
                    ahead = ahead | Mux(route_in[o], xy_route(nx, ny, hdr.dest_x, hdr.dest_y), 0)
            m.d.comb += [
                route_in.eq(link.flit.route & legal),
                next_route.eq(ahead),
                buf.w_en.eq(link.valid), buf.w_vc.eq(link.flit.vc),
                buf.w_data.data.eq(link.flit.data), buf.w_data.head.eq(link.flit.head),
                buf.w_data.tail.eq(link.flit.tail), buf.w_data.route.eq(next_route),
            ]
            arriving = Signal(meta_layout, name=f"arriving{i}")
            m.d.comb += [arriving.tail.eq(link.flit.tail), arriving.route.eq(route_in)]
            if dynamic:
                m.d.comb += arriving.bucket.eq(order_bucket(p, hdr.src_x, hdr.src_y, hdr.dest_x, hdr.dest_y))
            with m.If(link.valid & link.flit.head & ~route_in.any()):
                m.d.sync += self.error.eq(1)

            # A granted flit leaves its buffer next cycle: the same register pops it and returns its credit.
            m.d.comb += link.credit.eq(pop[i])
            granted = []
            for v in range(V):
                m.d.comb += [buf.r_vc[v].eq(v), buf.r_en[v].eq(pop[i][v])]
                active = Signal(name=f"active{i}_{v}")        # holds an output VC
                oport = Signal(PORTS, name=f"oport{i}_{v}")  # ... of this output port
                if dynamic:
                    ovc = Signal(p.vc_bits, name=f"ovc{i}_{v}")   # ... that VC (static VCs: v)
                # What the allocators see of this VC: the tail bit and route of every flit not yet
                # granted, oldest first, in registers that shift when a flit is granted (one cycle before
                # the buffer pops it), so the front is a register, or the flit arriving now.
                waiting = [Signal(meta_layout, name=f"waiting{i}_{v}_{k}") for k in range(D)]
                n_waiting = Signal(range(D + 1), name=f"n_waiting{i}_{v}")
                push = Signal(name=f"push{i}_{v}")
                front = Signal(meta_layout, name=f"front{i}_{v}")
                exists = Signal(name=f"exists{i}_{v}")
                # (a full VC drops the flit, as the buffer does: n_waiting == D exactly when it is full
                # and not popped this cycle)
                m.d.comb += [push.eq(link.valid & (link.flit.vc == v) & (n_waiting != D)),
                             exists.eq((n_waiting != 0) | push),
                             front.eq(Mux(n_waiting != 0, waiting[0], arriving))]

                won = Signal(name=f"won{i}_{v}")
                terms = []
                got_vc = Const(0, p.vc_bits)     # the output VC a granted head takes (dynamic VCs)
                for o in legal_outputs(i):
                    r = legal_inputs(o).index(i) * V + v
                    alloc = allocs[o]
                    m.d.comb += [alloc.head[r].eq(exists & ~active & front.route[o]),
                                 alloc.body[r].eq(exists & active & oport[o]),
                                 alloc.tail[r].eq(front.tail)]
                    if dynamic:
                        m.d.comb += [alloc.bucket[r].eq(front.bucket), alloc.ovc[r].eq(ovc)]
                    terms.append(alloc.grant[r])
                    if dynamic:
                        got_vc = got_vc | Mux(alloc.grant[r], alloc.grant_vc, 0)
                m.d.comb += won.eq(Cat(*terms).any())
                granted.append(won)
                with m.If(won & ~active):
                    m.d.sync += [active.eq(~front.tail), oport.eq(front.route)]
                    if dynamic:
                        m.d.sync += ovc.eq(got_vc)
                with m.Elif(won & front.tail):
                    m.d.sync += active.eq(0)
                m.d.sync += n_waiting.eq(n_waiting + push - won)
                for k in range(D):
                    shifted = waiting[k + 1] if k + 1 < D else waiting[k]
                    with m.If(won):
                        with m.If(push & (n_waiting == k + 1)):
                            m.d.sync += waiting[k].eq(arriving)
                        with m.Else():
                            m.d.sync += waiting[k].eq(shifted)
                    with m.Elif(push & (n_waiting == k)):
                        m.d.sync += waiting[k].eq(arriving)
            m.d.sync += pop[i].eq(Cat(*granted))

        # Next traversal: latch the grants.
        for o in range(PORTS):
            grant = allocs[o].grant
            m.d.sync += [x_valid[o].eq(grant.any()), x_sel[o].eq(grant), x_vc[o].eq(allocs[o].grant_vc)]

        # Traversal: crossbar into the output link registers.
        for o in range(PORTS):
            out = self.output(o)
            word = Const(0, p.buffer_layout.size)
            for k, i in enumerate(legal_inputs(o)):
                for v in range(V):
                    word = word | Mux(x_sel[o][k * V + v], bufs[i].r_data[v].as_value(), 0)
            flit = data.View(p.buffer_layout, word)
            m.d.sync += [out.valid.eq(x_valid[o]), out.flit.data.eq(flit.data), out.flit.head.eq(flit.head),
                         out.flit.tail.eq(flit.tail), out.flit.vc.eq(x_vc[o]), out.flit.route.eq(flit.route)]

        with m.If(Cat(*errors).any()):
            m.d.sync += self.error.eq(1)
        return m
