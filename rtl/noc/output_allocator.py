"""Output allocator: one router output port's link and virtual channels, in one round-robin decision."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .arbiter import RoundRobinArbiter

__all__ = ["OutputAllocator"]


class OutputAllocator(wiring.Component):
    """Combined VC and switch allocation of one output port, for ``inputs`` input ports of ``vcs`` VCs.

    Requester ``r = k * vcs + v`` is VC ``v`` of the ``k``-th input port that can reach this output. VCs
    are *static*: a packet on input VC ``v`` leaves on output VC ``v`` (the sender chose ``v`` from the
    packet's flow, so a flow uses one VC end to end and stays in order). Every input VC has its own read
    port, so the only conflicts are at the outputs, and each output settles them alone: one
    round-robin arbiter over every eligible requester. A requester is eligible when

    * ``body[r]``: it holds output VC ``v`` (its packet's head went through) and ``credit_ok[v]``; or
    * ``head[r]``: a head waits at its front, output VC ``v`` is free, ``credit_ok[v]``, and no other
      head is this VC's *favourite*.

    The grant is at most one requester (the link carries one flit per cycle). A granted head that is
    not also a tail takes output VC ``v`` (``free[v]`` falls at the clock edge); a granted tail frees it
    (``free[v]`` rises), so the next packet's head can be granted in the following cycle, back to back.
    Because only a free VC is granted to a head, and at most one head per cycle, an output VC is never
    held by two packets.

    *Favourites* bound the wait of a head: when heads keep waiting for VC ``v`` without being granted,
    one of them is chosen round robin as the favourite (registered), and until it is granted only it may
    take ``v``. The arbiter's pointer moves past every winner, so a favourite whose VC is free and has a
    credit is granted within ``inputs * vcs`` cycles, and every waiting head becomes the favourite
    after at most ``inputs - 1`` others.

    Parameters
    ----------
    inputs : int
        Input ports that can reach this output.
    vcs : int
        Virtual channels per port.

    Interface attributes
    --------------------
    head, body : In(inputs * vcs)
        Per requester, exclusive: a head at its VC's front routed here / a flit of a packet that
        holds output VC ``v`` here.
    tail : In(inputs * vcs)
        The requester's front flit is a tail (a head with ``tail`` is a single-flit packet).
    credit_ok : In(vcs)
        The downstream buffer of output VC ``u`` can take a flit sent next cycle.
    grant : Out(inputs * vcs)
        One-hot winner, zero when nothing is eligible (combinational).
    free : Out(vcs)
        Output VCs no packet holds (registered).

    Latency
    -------
    Combinational from requests to ``grant``; ``free``, the favourites and the arbiter's pointer
    change at the clock edge.
    """

    def __init__(self, inputs, vcs):
        for name, value in (("inputs", inputs), ("vcs", vcs)):
            if not isinstance(value, int) or value < 1:
                raise parameter_error(self, ValueError, f"{name} must be a positive int, not {value!r}")
        self._inputs, self._vcs = inputs, vcs
        n = inputs * vcs
        super().__init__({
            "head": In(n), "body": In(n), "tail": In(n), "credit_ok": In(vcs),
            "grant": Out(n), "free": Out(vcs),
        })

    @property
    def inputs(self):
        return self._inputs

    @property
    def vcs(self):
        return self._vcs

    def elaborate(self, platform):
        m = Module()
        K, V = self._inputs, self._vcs
        n = K * V

        free = Signal(V, init=(1 << V) - 1)
        m.d.comb += self.free.eq(free)

        eligible = [None] * n
        for v in range(V):
            # Favourite among the heads waiting for output VC v (one per input port).
            waiting = Signal(K, name=f"waiting{v}")
            granted = Signal(K, name=f"granted{v}")
            m.d.comb += [waiting.eq(Cat(*(self.head[k * V + v] for k in range(K)))),
                         granted.eq(Cat(*(self.grant[k * V + v] for k in range(K))))]
            fav_valid = Signal(name=f"fav_valid{v}")
            fav = Signal(K, name=f"fav{v}")
            m.submodules[f"fav_arb{v}"] = fav_arb = RoundRobinArbiter(K)
            m.d.comb += fav_arb.requests.eq(waiting)
            with m.If(fav_valid):
                m.d.sync += fav_valid.eq((fav & waiting & ~granted).any())
            with m.Else():
                m.d.comb += fav_arb.advance.eq(1)
                m.d.sync += [fav.eq(fav_arb.grant), fav_valid.eq((fav_arb.grant & ~granted).any())]

            head_ok = Signal(name=f"head_ok{v}")
            m.d.comb += head_ok.eq(free[v] & self.credit_ok[v])
            for k in range(K):
                r = k * V + v
                eligible[r] = ((self.body[r] & self.credit_ok[v]) |
                               (self.head[r] & head_ok & (~fav_valid | fav[k])))

        m.submodules.arb = arb = RoundRobinArbiter(n)
        # Packets keep the link until their tail (when they have the flits and credits to go on): the
        # downstream VC is held for fewer cycles than with flits of several packets interleaved.
        m.d.comb += [arb.requests.eq(Cat(*eligible)), arb.advance.eq(1), self.grant.eq(arb.grant),
                     arb.keep.eq((self.grant & ~self.tail).any())]

        for v in range(V):
            taken = Cat(*(self.grant[k * V + v] & self.head[k * V + v] & ~self.tail[k * V + v]
                          for k in range(K))).any()
            ended = Cat(*(self.grant[k * V + v] & self.body[k * V + v] & self.tail[k * V + v]
                          for k in range(K))).any()
            with m.If(taken):
                m.d.sync += free[v].eq(0)
            with m.Elif(ended):
                m.d.sync += free[v].eq(1)
        return m
