"""Network interface: turns message streams into packets on a router's local port, and back."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .arbiter import RoundRobinArbiter
from .layouts import PORTS, flow_vc, xy_route
from .vc_buffer import VcBuffer

__all__ = ["NetworkInterface"]


class NetworkInterface(wiring.Component):
    """The endpoint of the fabric at node ``(x, y)`` of a ``kx`` by ``ky`` mesh.

    Messages are valid/ready streams of :meth:`~rtl.noc.layouts.NocParams.message_layout` words, one
    stream per message class and direction, so that a consumer that cannot take a request right now
    still receives responses (the classes never block each other, here or in the routers). The first
    word of a message is its header (:meth:`~rtl.noc.layouts.NocParams.header_layout`; ``src_x``,
    ``src_y`` and ``mclass`` are filled in by the interface), the word with ``last`` ends it; every word
    becomes one flit.

    Injection: each class has an injection queue of ``inj_depth`` flits; every head flit carries its XY
    route at the local router (lookahead routing, see :class:`~rtl.noc.router.Router`), and every packet
    is injected on the VC of its flow (:func:`~rtl.noc.layouts.flow_vc`), so the packets of a flow
    enter the fabric through one FIFO; the routers keep them in order (on that VC end to end with
    static VCs, by order buckets with dynamic VCs; see
    :class:`~rtl.noc.output_allocator.OutputAllocator`). The interface holds the credits of the
    router's local input VCs and sends at most one flit per cycle, round robin between classes but
    finishing a packet first.

    Ejection: each VC has an ejection buffer of ``depth`` flits whose credits go back to the router;
    each class delivers one packet at a time on its ``rx`` stream.

    Parameters
    ----------
    params : NocParams
    x, y : int
        This node.
    kx, ky : int
        Mesh size (headers addressed outside it are dropped).
    inj_depth : int
        Injection queue flits per class.

    Interface attributes
    --------------------
    tx : In(stream.Signature(message_layout)).array(classes)
        Messages to send. Accepts a word per cycle per class while its queue has room.
    rx : Out(stream.Signature(message_layout)).array(classes)
        Messages received, words of one packet contiguous, per flow in order.
    inj : Out(LinkSignature)
        To the router's local input port.
    ej : In(LinkSignature)
        From the router's local output port.
    dropped : Out(16)
        Messages dropped because their destination is outside the mesh (saturates at 65535).
    error : Out(1)
        Sticky: a message was dropped, or a protocol error (an ejection buffer overflowed).

    Latency and throughput
    ----------------------
    A header accepted on ``tx`` in cycle ``t`` leaves on ``inj`` in cycle ``t + 1`` at the earliest
    (it is in the queue during ``t + 1`` and in the link register after it); a flit arriving on ``ej``
    in cycle ``t`` is offered on ``rx`` in cycle ``t + 1``. One flit per cycle in each direction; a
    stalled ``rx`` backs up into the network through the credits, without losing or duplicating flits.

    Bad input: a message whose header addresses a node outside the mesh is consumed entirely and
    dropped (counted in ``dropped``, flagged in ``error``); it never enters the network.
    """

    def __init__(self, params, x, y, kx, ky, *, inj_depth=4):
        if not (1 <= kx <= params.max_side and 1 <= ky <= params.max_side):
            raise parameter_error(self, ValueError,
                                  f"a {kx}x{ky} mesh does not fit {params.coord_bits}-bit coordinates")
        if not (0 <= x < kx and 0 <= y < ky):
            raise parameter_error(self, ValueError, f"node ({x}, {y}) is outside the {kx}x{ky} mesh")
        if inj_depth < 1:
            raise parameter_error(self, ValueError, f"inj_depth must be at least 1, not {inj_depth}")
        self._params, self._x, self._y, self._kx, self._ky = params, x, y, kx, ky
        self._inj_depth = inj_depth
        msg = stream.Signature(params.message_layout)
        super().__init__({
            "tx": In(msg).array(params.classes),
            "rx": Out(msg).array(params.classes),
            "inj": Out(params.link_signature),
            "ej": In(params.link_signature),
            "dropped": Out(16),
            "error": Out(1),
        })

    @property
    def params(self):
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        V, D, C, vpc = p.vcs, p.depth, p.classes, p.vcs_per_class
        entry = data.StructLayout({"data": p.width, "head": 1, "tail": 1, "vc": p.vc_bits, "route": PORTS})
        errors = []

        # ---------------------------------------------------------------- injection queues
        queues = []
        drop_events = []
        for c in range(C):
            tx = self.tx[c]
            m.submodules[f"injq{c}"] = q = VcBuffer(vcs=1, depth=self._inj_depth, shape=entry)
            queues.append(q)
            in_msg = Signal(name=f"in_msg{c}")
            dropping = Signal(name=f"dropping{c}")
            hdr = data.View(p.header_layout, tx.payload.data)
            in_mesh = Signal(name=f"in_mesh{c}")
            m.d.comb += in_mesh.eq((hdr.dest_x < self._kx) & (hdr.dest_y < self._ky))
            rewritten = Signal(p.header_layout, name=f"rewritten{c}")
            m.d.comb += [rewritten.eq(hdr), rewritten.src_x.eq(self._x), rewritten.src_y.eq(self._y),
                         rewritten.mclass.eq(c)]
            drop = Signal(name=f"drop{c}")
            m.d.comb += drop.eq(dropping | (~in_msg & ~in_mesh))
            head_vc = Signal(p.vc_bits, name=f"head_vc{c}")
            msg_vc = Signal(p.vc_bits, name=f"msg_vc{c}")
            room = Signal(name=f"room{c}")
            m.d.comb += room.eq(q.count[0] != self._inj_depth)
            m.d.comb += tx.ready.eq(drop | room)
            m.d.comb += [
                q.w_en.eq(tx.valid & ~drop & room),
                q.w_vc.eq(0),
                q.w_data.data.eq(Mux(in_msg, tx.payload.data, rewritten.as_value())),
                q.w_data.head.eq(~in_msg),
                q.w_data.tail.eq(tx.payload.last),
                q.w_data.route.eq(xy_route(self._x, self._y, hdr.dest_x, hdr.dest_y)),
                head_vc.eq(flow_vc(p, Const(c, p.class_bits), Const(self._x, p.coord_bits),
                                   Const(self._y, p.coord_bits), hdr.dest_x, hdr.dest_y)),
                q.w_data.vc.eq(Mux(in_msg, msg_vc, head_vc)),
            ]
            with m.If(tx.valid & tx.ready):
                m.d.sync += in_msg.eq(~tx.payload.last)
                with m.If(~in_msg):
                    m.d.sync += msg_vc.eq(head_vc)      # the rest of the message follows its header
                with m.If(~in_msg & ~in_mesh):
                    m.d.sync += dropping.eq(~tx.payload.last)
                with m.If(dropping & tx.payload.last):
                    m.d.sync += dropping.eq(0)
            event = Signal(name=f"drop_event{c}")
            m.d.comb += event.eq(tx.valid & ~in_msg & ~in_mesh)
            drop_events.append(event)

        n_drops = Signal(range(C + 1))
        m.d.comb += n_drops.eq(sum(drop_events))
        with m.If(n_drops != 0):
            m.d.sync += self.error.eq(1)
            with m.If(self.dropped + n_drops > 0xFFFF):
                m.d.sync += self.dropped.eq(0xFFFF)
            with m.Else():
                m.d.sync += self.dropped.eq(self.dropped + n_drops)

        # ---------------------------------------------------------------- injection link
        # A flit needs only a buffer in the router. (Wormhole holds by construction: a class's VCs carry
        # only that class's queue, which is a FIFO of whole messages, so a head reaches the front only
        # after the tail of the packet before it has been sent.)
        inj = self.inj
        cnt = [Signal(range(D + 1), init=D, name=f"cnt{u}") for u in range(V)]
        credit_ok = Signal(V)
        m.d.comb += credit_ok.eq(Cat(*((cnt[u] != 0) | inj.credit[u] for u in range(V))))

        sendable = Signal(C)
        for c in range(C):
            front = queues[c].r_data[0]
            m.d.comb += queues[c].r_vc[0].eq(0)
            m.d.comb += sendable[c].eq((queues[c].count[0] != 0) & credit_ok.bit_select(front.vc, 1))

        m.submodules.cls_arb = cls_arb = RoundRobinArbiter(C)
        sticky_valid = Signal()
        sticky = Signal(C)
        choice = Signal(C)
        m.d.comb += cls_arb.requests.eq(sendable)
        with m.If(sticky_valid & (sticky & sendable).any()):
            m.d.comb += choice.eq(sticky)
        with m.Else():
            m.d.comb += [choice.eq(cls_arb.grant), cls_arb.advance.eq(1)]

        send = Signal()
        s_data = Signal(p.width)
        s_head = Signal()
        s_tail = Signal()
        s_vc = Signal(p.vc_bits)
        s_route = Signal(PORTS)
        m.d.comb += send.eq(choice.any())
        for c in range(C):
            front = queues[c].r_data[0]
            with m.If(choice[c]):
                m.d.comb += [s_data.eq(front.data), s_head.eq(front.head), s_tail.eq(front.tail),
                             s_vc.eq(front.vc), s_route.eq(front.route), queues[c].r_en[0].eq(1)]
        m.d.sync += [inj.valid.eq(send), inj.flit.data.eq(s_data), inj.flit.head.eq(s_head),
                     inj.flit.tail.eq(s_tail), inj.flit.vc.eq(s_vc), inj.flit.route.eq(s_route)]
        with m.If(send):
            m.d.sync += [sticky_valid.eq(~s_tail), sticky.eq(choice)]

        sent = Signal(V)
        m.d.comb += sent.eq(Cat(*(send & (s_vc == u) for u in range(V))))
        for u in range(V):
            m.d.sync += cnt[u].eq(cnt[u] - sent[u] + inj.credit[u])

        # ---------------------------------------------------------------- ejection
        ej = self.ej
        ej_entry = data.StructLayout({"data": p.width, "tail": 1})
        credit_bits = []
        for c in range(C):
            rx = self.rx[c]
            m.submodules[f"ejq{c}"] = buf = VcBuffer(vcs=vpc, depth=D, shape=ej_entry)
            errors.append(buf.overflow)
            base = c * vpc
            lvb = max(1, (vpc - 1).bit_length())
            m.d.comb += [
                buf.w_en.eq(ej.valid & _vc_in_class(ej.flit.vc, base, base + vpc, V)),
                buf.w_vc.eq((ej.flit.vc - base)[:lvb]),
                buf.w_data.data.eq(ej.flit.data), buf.w_data.tail.eq(ej.flit.tail),
            ]
            nonempty = Signal(vpc, name=f"nonempty{c}")
            m.d.comb += nonempty.eq(Cat(*(buf.count[u] != 0 for u in range(vpc))))
            m.submodules[f"ej_arb{c}"] = arb = RoundRobinArbiter(vpc)
            locked = Signal(name=f"locked{c}")
            lock_vc = Signal(lvb, name=f"lock_vc{c}")
            choice_index = Const(0, lvb)
            for u in range(1, vpc):
                choice_index = choice_index | Mux(arb.grant[u], u, 0)
            cur = Signal(lvb, name=f"cur{c}")
            m.d.comb += [arb.requests.eq(nonempty), cur.eq(Mux(locked, lock_vc, choice_index))]
            m.d.comb += [buf.r_vc[0].eq(cur), rx.valid.eq(nonempty.bit_select(cur, 1)),
                         rx.payload.data.eq(buf.r_data[0].data), rx.payload.last.eq(buf.r_data[0].tail),
                         buf.r_en[0].eq(rx.valid & rx.ready),
                         arb.advance.eq(~locked & rx.valid)]
            with m.If(rx.valid):
                with m.If(rx.ready & buf.r_data[0].tail):
                    m.d.sync += locked.eq(0)
                with m.Else():
                    m.d.sync += [locked.eq(1), lock_vc.eq(cur)]
            for u in range(vpc):
                credit_bits.append(rx.valid & rx.ready & (cur == u))
        credit = Signal(V)
        m.d.sync += credit.eq(Cat(*credit_bits))
        m.d.comb += ej.credit.eq(credit)

        with m.If(Cat(*errors).any()):
            m.d.sync += self.error.eq(1)
        return m


def _vc_in_class(vc, lo, hi, vcs):
    """``lo <= vc < hi`` for a VC number below ``vcs``, without comparisons that are constant."""
    terms = []
    if lo > 0:
        terms.append(vc >= lo)
    if hi < vcs:
        terms.append(vc < hi)
    return Cat(*terms).all() if terms else Const(1, 1)
