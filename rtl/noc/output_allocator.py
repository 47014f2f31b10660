"""Output allocator: one router output port's link and virtual channels, in one round-robin decision."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from rtl.common.parameters import parameter_error

from .arbiter import RoundRobinArbiter, lowest_one

__all__ = ["OutputAllocator"]


class OutputAllocator(wiring.Component):
    """Combined VC and switch allocation of one output port, for ``inputs`` input ports of ``vcs`` VCs.

    Requester ``r = k * vcs + v`` is VC ``v`` of the ``k``-th input port that can reach this output; it
    belongs to the message class of ``v``. Every input VC has its own read port, so the only conflicts
    are at the outputs, and each output settles them alone: one round-robin arbiter over every eligible
    requester, at most one grant per cycle.

    The output VCs a head may take depend on ``buckets``:

    * ``buckets == 0``, *static VCs* (the default): a packet on input VC ``v`` leaves on output VC
      ``v``. The sender chose ``v`` from the packet's flow, so a flow uses one FIFO end to end and
      stays in order.
    * ``buckets > 0``, *dynamic VCs*: a head takes any free output VC of its class that has a credit,
      with one exception that keeps the packets of a flow in order. Each head carries an *order
      bucket*, a hash of its flow ``(source, destination)`` (:func:`~rtl.noc.layouts.order_bucket`). An
      output VC remembers the buckets of the packets it carried until the downstream buffer of that VC
      is empty again (``drained``); a head whose bucket an output VC still remembers is *pinned* to
      that VC and waits for it. So two packets of a flow are never in the downstream buffer in
      different VCs, and as every output keeps this rule, a later packet can never overtake an earlier
      one anywhere (the earlier one either shares its FIFO or has left the next router). Flows that
      share a bucket only wait for each other more often than needed.

    A requester is eligible when

    * ``body[r]``: it holds an output VC (its packet's head went through: VC ``v``, or ``ovc[r]``
      with dynamic VCs) and that VC has a credit; or
    * ``head[r]``: a head waits at its front and some output VC ``u`` it may take is free, has a
      credit, is not excluded by the order rule, and has no *favourite* other than ``r``.

    A granted head takes the lowest such VC (``grant_vc``); a granted head that is not also a tail holds
    it (``free[u]`` falls at the clock edge), and a granted tail frees it, so the next packet's head can
    be granted in the following cycle, back to back. Only free VCs go to heads, at most one head per
    cycle, so an output VC is never held by two packets.

    *Favourites* bound the wait of a head: when heads keep waiting for VC ``u`` without being granted,
    one of them is chosen round robin as its favourite (registered), and until it is granted only it may
    take ``u``. The arbiter's pointer moves past every winner, so a favourite whose VC is free and has a
    credit is granted within ``inputs * vcs`` cycles, and every head waiting for ``u`` becomes its
    favourite after at most ``inputs - 1`` others (static VCs) or ``inputs * vcs_per_class - 1``
    others (dynamic VCs).

    Cost: dynamic VCs keep ``buckets`` bits per output VC and look a head's bucket up in every one of
    its class's VCs; on the ECP5 the 4-VC router with 32 buckets has about twice the LUTs of the
    static one and about 0.56 times its Fmax (``benchmarks/results/noc.md``).

    Parameters
    ----------
    inputs : int
        Input ports that can reach this output.
    vcs : int
        Virtual channels per port.
    classes : int
        Message classes; class ``c`` owns VCs ``c * vcs // classes`` onwards.
    buckets : int
        0 for static VCs (default), else the number of order buckets of dynamic VCs (a power of 2,
        at least 2).

    Interface attributes
    --------------------
    head, body : In(inputs * vcs)
        Per requester, exclusive: a head at its VC's front routed here / a flit of a packet that
        holds an output VC here.
    tail : In(inputs * vcs)
        The requester's front flit is a tail (a head with ``tail`` is a single-flit packet).
    bucket : In(ArrayLayout(bucket_bits, inputs * vcs))
        Dynamic VCs only: the order bucket of each requester's head.
    ovc : In(ArrayLayout(vc_bits, inputs * vcs))
        Dynamic VCs only: the output VC each body requester's packet holds.
    credit_ok : In(vcs)
        The downstream buffer of output VC ``u`` can take a flit sent next cycle.
    drained : In(vcs)
        Dynamic VCs only: the downstream buffer of output VC ``u`` is empty and no flit is on its
        way to it.
    grant : Out(inputs * vcs)
        One-hot winner, zero when nothing is eligible (combinational).
    grant_vc : Out(vc_bits)
        The output VC the granted flit takes (combinational).
    free : Out(vcs)
        Output VCs no packet holds (registered).
    seen : Out(ArrayLayout(buckets, vcs))
        Dynamic VCs only: per output VC, one bit per order bucket it still remembers (registered; for
        checkers).

    Latency
    -------
    Combinational from requests to ``grant``; ``free``, the buckets, the favourites and the arbiter's
    pointer change at the clock edge.
    """

    def __init__(self, inputs, vcs, classes=1, buckets=0):
        for name, value in (("inputs", inputs), ("vcs", vcs), ("classes", classes)):
            if not isinstance(value, int) or value < 1:
                raise parameter_error(self, ValueError, f"{name} must be a positive int, not {value!r}")
        if vcs % classes:
            raise parameter_error(self, ValueError, f"vcs ({vcs}) must be a multiple of classes ({classes})")
        if not isinstance(buckets, int) or buckets < 0 or buckets == 1 or buckets & (buckets - 1):
            raise parameter_error(self, ValueError,
                                  f"buckets must be 0 or a power of 2 of at least 2, not {buckets!r}")
        self._inputs, self._vcs, self._classes, self._buckets = inputs, vcs, classes, buckets
        n = inputs * vcs
        self._vc_bits = max(1, ceil_log2(vcs))
        members = {
            "head": In(n), "body": In(n), "tail": In(n), "credit_ok": In(vcs),
            "grant": Out(n), "grant_vc": Out(self._vc_bits), "free": Out(vcs),
        }
        if buckets:
            members.update({
                "bucket": In(data.ArrayLayout(unsigned(ceil_log2(buckets)), n)),
                "ovc": In(data.ArrayLayout(unsigned(self._vc_bits), n)),
                "drained": In(vcs),
                "seen": Out(data.ArrayLayout(buckets, vcs)),
            })
        super().__init__(members)

    @property
    def inputs(self):
        return self._inputs

    @property
    def vcs(self):
        return self._vcs

    @property
    def dynamic(self):
        """Whether heads choose their output VC (``buckets > 0``)."""
        return self._buckets > 0

    def elaborate(self, platform):
        m = Module()
        K, V, B = self._inputs, self._vcs, self._buckets
        vpc = V // self._classes
        n = K * V

        def may_take(v):
            """The output VCs a head on input VC ``v`` may take: its class's, or ``v`` alone."""
            if not self.dynamic:
                return range(v, v + 1)
            c = v // vpc
            return range(c * vpc, (c + 1) * vpc)

        free = Signal(V, init=(1 << V) - 1)
        m.d.comb += self.free.eq(free)

        # Which output VCs each head may wait for (under the order rule, with dynamic VCs).
        wants = [[None] * V for _ in range(n)]
        if self.dynamic:
            # Per output VC: the order buckets of the packets it carried since its buffer was last empty.
            seen = [Signal(B, name=f"seen{u}") for u in range(V)]
            m.d.comb += [self.seen[u].eq(seen[u]) for u in range(V)]
            for r in range(n):
                own = may_take(r % V)
                pinned_to = {u: seen[u].bit_select(self.bucket[r], 1) for u in own}
                pinned = Cat(*pinned_to.values()).any()
                for u in own:
                    wants[r][u] = self.head[r] & (~pinned | pinned_to[u])
        else:
            for r in range(n):
                wants[r][r % V] = self.head[r]

        # Favourite among the heads waiting for each output VC.
        fav_valid = [Signal(name=f"fav_valid{u}") for u in range(V)]
        fav = [Signal(n, name=f"fav{u}") for u in range(V)]
        for u in range(V):
            members = [r for r in range(n) if u in may_take(r % V)]
            waiting = Signal(len(members), name=f"waiting{u}")
            granted = Signal(len(members), name=f"granted{u}")
            m.d.comb += [waiting.eq(Cat(*(wants[r][u] for r in members))),
                         granted.eq(Cat(*(self.grant[r] for r in members)))]
            fav_u = Signal(len(members), name=f"fav_sel{u}")
            m.d.comb += fav[u].eq(sum(fav_u[j] << r for j, r in enumerate(members)))
            m.submodules[f"fav_arb{u}"] = fav_arb = RoundRobinArbiter(len(members))
            m.d.comb += fav_arb.requests.eq(waiting)
            with m.If(fav_valid[u]):
                m.d.sync += fav_valid[u].eq((fav_u & waiting & ~granted).any())
            with m.Else():
                m.d.comb += fav_arb.advance.eq(1)
                m.d.sync += [fav_u.eq(fav_arb.grant), fav_valid[u].eq((fav_arb.grant & ~granted).any())]

        head_ok = Signal(V)
        m.d.comb += head_ok.eq(free & self.credit_ok)
        eligible = []
        take = []           # per requester: the output VCs its head may take now, one-hot lowest
        for r in range(n):
            may = Cat(*((wants[r][u] & head_ok[u] & (~fav_valid[u] | fav[u][r])) if u in may_take(r % V)
                        else Const(0, 1) for u in range(V)))
            may_s = Signal(V, name=f"may{r}")
            m.d.comb += may_s.eq(may)
            take.append(lowest_one(may_s) if self.dynamic else may_s)
            # (a body flit goes on the VC its packet holds)
            held_ok = self.credit_ok.bit_select(self.ovc[r], 1) if self.dynamic else self.credit_ok[r % V]
            eligible.append((self.body[r] & held_ok) | may_s.any())

        m.submodules.arb = arb = RoundRobinArbiter(n)
        # Packets keep the link until their tail (when they have the flits and credits to go on): the
        # downstream VC is held for fewer cycles than with flits of several packets interleaved.
        m.d.comb += [arb.requests.eq(Cat(*eligible)), arb.advance.eq(1), self.grant.eq(arb.grant),
                     arb.hold.eq(~self.tail)]

        # The granted flit's output VC: the one its packet holds, or the one its head takes.
        head_vc = Signal(V)       # one-hot, zero unless a head is granted
        taken = Const(0, V)
        for r in range(n):
            taken = taken | Mux(self.grant[r] & self.head[r], take[r], 0)
        m.d.comb += head_vc.eq(taken)
        gvc = Const(0, self._vc_bits)
        if self.dynamic:
            for r in range(n):
                gvc = gvc | Mux(self.grant[r] & self.body[r], self.ovc[r], 0)
            for u in range(1, V):
                gvc = gvc | Mux(head_vc[u], u, 0)
        else:
            for r in range(n):
                if r % V:
                    gvc = gvc | Mux(self.grant[r], r % V, 0)
        m.d.comb += self.grant_vc.eq(gvc)

        # A granted head that is not a tail holds its VC; a granted tail of a body flit frees it.
        granted_tail = (self.grant & self.tail).any()
        for u in range(V):
            taken = head_vc[u] & ~granted_tail
            if self.dynamic:
                ends = [self.grant[r] & self.body[r] & self.tail[r] & (self.ovc[r] == u) for r in range(n)]
            else:
                ends = [self.grant[r] & self.body[r] & self.tail[r] for r in range(u, n, V)]
            ended = Cat(*ends).any()
            with m.If(taken):
                m.d.sync += free[u].eq(0)
            with m.Elif(ended):
                m.d.sync += free[u].eq(1)
        if self.dynamic:
            bucket = Const(0, len(self.bucket[0]))
            for r in range(n):
                bucket = bucket | Mux(self.grant[r], self.bucket[r], 0)
            for u in range(V):
                cleared = Mux(self.drained[u] & free[u], 0, seen[u])
                m.d.sync += seen[u].eq(cleared | Mux(head_vc[u], (Const(1, B) << bucket)[:B], 0))
        return m
