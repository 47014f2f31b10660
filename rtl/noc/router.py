"""Five-port input-queued virtual-channel mesh router with credit flow control and XY routing."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .layouts import PORT_NAMES, PORTS, E, L, N, NocParams, S, W, flow_hash, legal_inputs, legal_outputs
from .switch_allocator import SwitchAllocator
from .vc_allocator import VcAllocator
from .vc_buffer import VcBuffer

__all__ = ["Router", "xy_route"]


def xy_route(m, x, y, dest_x, dest_y, name="route"):
    """One-hot output port (bit ``N``..``L``) of XY routing at router ``(x, y)`` towards ``dest``."""
    route = Signal(PORTS, name=name)
    with m.If(dest_x > x):
        m.d.comb += route.eq(1 << E)
    with m.Elif(dest_x < x):
        m.d.comb += route.eq(1 << W)
    with m.Elif(dest_y > y):
        m.d.comb += route.eq(1 << N)
    with m.Elif(dest_y < y):
        m.d.comb += route.eq(1 << S)
    with m.Else():
        m.d.comb += route.eq(1 << L)
    return route


class Router(wiring.Component):
    """A mesh router at ``(x, y)``: 5 ports, ``vcs`` VCs of ``depth`` flits per input, XY routing.

    Pipeline (two cycles per hop at zero load)
    ------------------------------------------
    *Link / allocation cycle*: a flit arrives on an input link. While it is written into its VC buffer,
    its XY output port is computed from the header, and the VC and switch allocators decide, for the
    *next* cycle, which buffered or arriving flits cross the crossbar. The allocators work on the state
    the buffers and credit counters will have after the current traversal, so an arriving head is
    allocated in the cycle it arrives and the flit behind a departing tail can follow it without a gap.

    *Traversal cycle*: the granted flits are read (two read ports per input buffer, so an input can
    feed two outputs at once) and cross the crossbar into the output link registers.

    Allocation (see :class:`~rtl.noc.switch_allocator.SwitchAllocator` and
    :class:`~rtl.noc.vc_allocator.VcAllocator`): a head asks for its output port when an output VC of
    its class there is free, has a credit and keeps its flow in order; body flits ask when their VC has
    a credit. Credits are returned to the upstream sender as soon as a flit is granted (it leaves the
    buffer in the next cycle), and a credit arriving is usable in the same cycle, so the credit loop is
    three cycles and ``depth`` of 4 keeps one VC streaming at full rate.

    Wormhole per VC: an output VC belongs to one packet from its head until its tail crosses. Message
    class ``c`` only ever uses VCs of class ``c``.

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
        Sticky protocol error: a flit arrived on a full VC (it is dropped), or a head arrived whose XY
        route is an illegal turn (it stays at its VC head and blocks only that VC), or an internal record
        overflowed. None of these happen with correct neighbours.

    Latency and throughput
    ----------------------
    Two cycles per hop (one in the router, one on the link). Each output sends one flit per cycle; each
    input can send two (to different outputs). A stalled downstream (no credits) holds flits in their
    buffers; nothing is lost or duplicated.
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
        vb = p.vc_bits
        meta_layout = data.StructLayout({"tail": 1, "route": PORTS, "hash": p.hash_bits})

        m.submodules.sa = sa = SwitchAllocator(p, speedup=2)
        m.submodules.va = va = VcAllocator(p)

        errors = [va.error]

        # Traversal-stage registers (the grants decided in the previous cycle).
        rd_valid = [[Signal(name=f"rd_valid{i}_{r}") for r in range(2)] for i in range(PORTS)]
        rd_vc = [[Signal(vb, name=f"rd_vc{i}_{r}") for r in range(2)] for i in range(PORTS)]
        x_valid = [Signal(name=f"x_valid{o}") for o in range(PORTS)]
        x_in = [Signal(PORTS, name=f"x_in{o}") for o in range(PORTS)]
        x_rd = [Signal(name=f"x_rd{o}") for o in range(PORTS)]
        x_ovc = [Signal(vb, name=f"x_ovc{o}") for o in range(PORTS)]
        x_tail = [Signal(name=f"x_tail{o}") for o in range(PORTS)]

        # Output credit counters.
        cnt = [[Signal(range(D + 1), init=D, name=f"cnt{o}_{u}") for u in range(V)] for o in range(PORTS)]
        credit_ok = [Signal(V, name=f"credit_ok{o}") for o in range(PORTS)]
        for o in range(PORTS):
            out = self.output(o)
            sent = [x_valid[o] & (x_ovc[o] == u) for u in range(V)]
            for u in range(V):
                m.d.sync += cnt[o][u].eq(cnt[o][u] - sent[u] + out.credit[u])
            m.d.comb += [
                credit_ok[o].eq(Cat(*((cnt[o][u] > sent[u]) | out.credit[u] for u in range(V)))),
                va.credit_ok[o].eq(credit_ok[o]),
                va.credit_full[o].eq(Cat(*(cnt[o][u] == D for u in range(V)))),
                va.credit_in[o].eq(out.credit),
                va.tail_valid[o].eq(x_valid[o] & x_tail[o]),
                va.tail_vc[o].eq(x_ovc[o]),
            ]
            cnt_sel = Const(0, range(D + 1))
            cin_sel = Const(0, 1)
            for u in range(V):
                cnt_sel = cnt_sel | Mux(x_ovc[o] == u, cnt[o][u], 0)
                cin_sel = cin_sel | ((x_ovc[o] == u) & out.credit[u])
            # Credits still to come back once this tail is in the downstream buffer.
            m.d.comb += va.tail_need[o].eq(D + 1 - cnt_sel - cin_sel)

        # Input ports: buffers, VC state, requests.
        bufs = []
        state = []
        acts = {}
        for i in range(PORTS):
            link = self.input(i)
            m.submodules[f"buf_{PORT_NAMES[i]}"] = buf = VcBuffer(
                vcs=V, depth=D, shape=p.buffer_layout, meta=meta_layout, read_ports=2)
            bufs.append(buf)
            errors.append(buf.overflow)
            hdr = data.View(p.header_layout, link.flit.data)
            route_xy = xy_route(m, self._x, self._y, hdr.dest_x, hdr.dest_y, name=f"route_in{i}")
            legal = Const(sum(1 << o for o in legal_outputs(i)), PORTS)
            route_in = Signal(PORTS, name=f"route_legal{i}")
            hash_in = Signal(p.hash_bits, name=f"hash_in{i}")
            m.d.comb += [
                route_in.eq(route_xy & legal),
                hash_in.eq(flow_hash(p, hdr.src_x, hdr.src_y, hdr.dest_x, hdr.dest_y)),
                buf.w_en.eq(link.valid), buf.w_vc.eq(link.flit.vc),
                buf.w_data.data.eq(link.flit.data), buf.w_data.head.eq(link.flit.head),
                buf.w_data.tail.eq(link.flit.tail),
                buf.w_meta.tail.eq(link.flit.tail), buf.w_meta.route.eq(route_in),
                buf.w_meta.hash.eq(hash_in),
            ]
            with m.If(link.valid & link.flit.head & ~route_in.any()):
                m.d.sync += self.error.eq(1)
            for r in range(2):
                m.d.comb += [buf.r_vc[r].eq(rd_vc[i][r]), buf.r_en[r].eq(rd_valid[i][r])]

            credit_out = Signal(V, name=f"credit_out{i}")
            m.d.comb += link.credit.eq(credit_out)
            m.d.sync += credit_out.eq(sa.granted[i * V:(i + 1) * V])

            active = [Signal(name=f"active{i}_{v}") for v in range(V)]
            oport = [Signal(PORTS, name=f"oport{i}_{v}") for v in range(V)]
            ovc = [Signal(vb, name=f"ovc{i}_{v}") for v in range(V)]
            state.append((active, oport, ovc))
            for v in range(V):
                j = i * V + v
                pop = Signal(name=f"pop{i}_{v}")
                m.d.comb += pop.eq((rd_valid[i][0] & (rd_vc[i][0] == v)) |
                                   (rd_valid[i][1] & (rd_vc[i][1] == v)))
                count = buf.count[v]
                fm, nm = buf.front_meta[v], buf.next_meta[v]
                incoming = Signal(name=f"incoming{i}_{v}")
                remain = Signal(name=f"remain{i}_{v}")
                m.d.comb += [incoming.eq(link.valid & (link.flit.vc == v)),
                             remain.eq(count > pop)]
                after = Signal(meta_layout, name=f"after{i}_{v}")
                with m.If(remain):
                    with m.If(pop):
                        m.d.comb += after.eq(nm)
                    with m.Else():
                        m.d.comb += after.eq(fm)
                with m.Else():
                    m.d.comb += [after.tail.eq(link.flit.tail), after.route.eq(route_in),
                                 after.hash.eq(hash_in)]
                exists = Signal(name=f"exists{i}_{v}")
                act = Signal(name=f"act{i}_{v}")
                m.d.comb += [exists.eq(remain | incoming),
                             act.eq(active[v] & ~(pop & fm.tail))]
                # Body flits: a credit on the owned output VC.
                body_ok = Const(0, 1)
                for o in legal_outputs(i):
                    for u in p.vcs_of_class(p.class_of_vc(v)):
                        body_ok = body_ok | (oport[v][o] & (ovc[v] == u) & credit_ok[o][u])
                body = Signal(name=f"body{i}_{v}")
                head = Signal(name=f"head{i}_{v}")
                m.d.comb += [body.eq(act & exists & body_ok), head.eq(~act & exists)]
                m.d.comb += [
                    va.head_req[j].eq(head), va.head_port[j].eq(after.route), va.head_hash[j].eq(after.hash),
                    sa.req[j].eq(body | va.eligible[j]),
                    sa.port[j].eq(Mux(act, oport[v], after.route)),
                    sa.tail[j].eq(after.tail),
                    va.grant[j].eq(sa.granted[j] & head),
                ]
                acts[j] = act
                with m.If(sa.granted[j] & head):
                    m.d.sync += [active[v].eq(1), oport[v].eq(after.route), ovc[v].eq(va.pick[j])]
                with m.Else():
                    m.d.sync += active[v].eq(act)

        # Next traversal: latch the grants.
        for i in range(PORTS):
            for r in range(2):
                m.d.sync += [rd_valid[i][r].eq(sa.rd_valid[i][r]), rd_vc[i][r].eq(sa.rd_vc[i][r])]
        for o in range(PORTS):
            ins = legal_inputs(o)
            ovc_next = Const(0, vb)
            tail_next = Const(0, 1)
            for i in ins:
                active, oport, ovc = state[i]
                for v in range(V):
                    j = i * V + v
                    won = sa.out_in[o][i] & (sa.out_vc[o] == v)
                    ovc_next = ovc_next | Mux(won, Mux(acts[j], ovc[v], va.pick[j]), 0)
                    tail_next = tail_next | (won & sa.tail[j])
            m.d.sync += [x_valid[o].eq(sa.out_valid[o]), x_in[o].eq(sa.out_in[o]), x_rd[o].eq(sa.out_rd[o]),
                         x_ovc[o].eq(ovc_next), x_tail[o].eq(tail_next)]

        # Traversal: crossbar into the output link registers.
        for o in range(PORTS):
            out = self.output(o)
            word = Const(0, p.buffer_layout.size)
            for i in legal_inputs(o):
                for r in range(2):
                    sel = x_valid[o] & x_in[o][i] & (x_rd[o] == r)
                    word = word | Mux(sel, bufs[i].r_data[r].as_value(), 0)
            flit = data.View(p.buffer_layout, word)
            m.d.sync += [out.valid.eq(x_valid[o]), out.flit.data.eq(flit.data), out.flit.head.eq(flit.head),
                         out.flit.tail.eq(flit.tail), out.flit.vc.eq(x_ovc[o])]

        with m.If(Cat(*errors).any()):
            m.d.sync += self.error.eq(1)
        return m

