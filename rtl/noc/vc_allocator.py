"""VC allocator: which output VC a waiting head may take, in order and without starvation."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobinArbiter, lowest_one
from .layouts import PORTS, legal_inputs
from .order_tracker import OrderTracker

__all__ = ["VcAllocator"]


class VcAllocator(wiring.Component):
    """Owns the output VCs of a router: their free flags, order records and waiting-head priority.

    VC allocation is folded into switch allocation: a head flit asks the switch allocator for its
    output port only when this allocator says it is *eligible*, that is when some output VC of its
    message class at that port is

    * free (no packet holds it, or its holder's tail crosses the switch this cycle),
    * able to take a flit next cycle (``credit_ok``), and
    * allowed by the order rule: the head's flow is not recorded in any *other* VC of that output
      (:class:`~rtl.noc.order_tracker.OrderTracker`); with one VC per class the rule holds by
      construction and no tracker is built.

    The head then takes ``pick`` (a free allowed VC, preferring one whose downstream buffer is empty)
    if, and only if, the switch allocator grants it; at most one head wins per output per cycle, so no
    output VC is ever given twice.

    Starvation: when heads keep waiting for the VCs of one (output, class), a *favourite* is chosen
    among them round robin; while it waits, only the favourite may take a VC there. Every waiting head
    becomes the favourite after a bounded number of others, and a favourite is served as soon as a VC
    frees up.

    Interface attributes
    --------------------
    head_req, head_port, head_hash : In
        Per input VC ``j = port * vcs + vc``: a head waits at the front (after this cycle's pop), its
        one-hot output port and its flow signature.
    credit_ok, credit_full : In(ArrayLayout(vcs, PORTS))
        Per output VC: a flit can be sent next cycle / the downstream buffer is empty.
    tail_valid, tail_vc, tail_need : In
        Per output: a tail crosses the switch this cycle on ``tail_vc``; ``tail_need`` credits (after
        this cycle's) must return before it has left the downstream buffer.
    credit_in : In(ArrayLayout(vcs, PORTS))
        Credits returned this cycle per output VC.
    grant : In(PORTS * vcs)
        Heads granted by the switch allocator this cycle (each must have been eligible).
    eligible : Out(PORTS * vcs); pick : Out(ArrayLayout(vc_bits, PORTS * vcs))
        Combinational answer per input VC.
    free : Out(ArrayLayout(vcs, PORTS))
        Registered free flags of the output VCs.
    error : Out(1)
        Sticky: an order record overflowed (impossible with a correct neighbour).
    """

    def __init__(self, params):
        self._params = params
        p = params
        V = p.vcs
        super().__init__({
            "head_req": In(PORTS * V),
            "head_port": In(data.ArrayLayout(PORTS, PORTS * V)),
            "head_hash": In(data.ArrayLayout(p.hash_bits, PORTS * V)),
            "credit_ok": In(data.ArrayLayout(V, PORTS)),
            "credit_full": In(data.ArrayLayout(V, PORTS)),
            "tail_valid": In(PORTS),
            "tail_vc": In(data.ArrayLayout(p.vc_bits, PORTS)),
            "tail_need": In(data.ArrayLayout(range(p.depth + 2), PORTS)),
            "credit_in": In(data.ArrayLayout(V, PORTS)),
            "grant": In(PORTS * V),
            "eligible": Out(PORTS * V),
            "pick": Out(data.ArrayLayout(p.vc_bits, PORTS * V)),
            "free": Out(data.ArrayLayout(V, PORTS)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        V, vpc = p.vcs, p.vcs_per_class
        lvc_bits = max(1, (vpc - 1).bit_length())

        eligible_bits = [0] * (PORTS * V)
        pick_vals = [0] * (PORTS * V)
        errors = []
        for o in range(PORTS):
            free = Signal(V, init=(1 << V) - 1, name=f"free{o}")
            m.d.comb += self.free[o].eq(free)
            tail_onehot = Signal(V, name=f"tail_onehot{o}")
            usable = Signal(V, name=f"usable{o}")
            m.d.comb += [
                tail_onehot.eq(Cat(*(self.tail_valid[o] & (self.tail_vc[o] == u) for u in range(V)))),
                usable.eq((free | tail_onehot) & self.credit_ok[o]),
            ]
            push_onehot = []
            for c in range(p.classes):
                base = c * vpc
                cls = slice(base, base + vpc)
                group = [(i, v) for i in legal_inputs(o) for v in p.vcs_of_class(c)]
                # One VC per class: every flow has one FIFO per hop, so there is no order to keep.
                track = None
                if vpc > 1:
                    track = OrderTracker(vcs=vpc, depth=p.depth, hash_bits=p.hash_bits, queries=len(group))
                    m.submodules[f"track_{o}_{c}"] = track
                    errors.append(track.overflow)

                # Favourite of this (output, class): only it may take a VC while it waits.
                waiting = Signal(len(group), name=f"waiting_{o}_{c}")
                granted = Signal(len(group), name=f"granted_{o}_{c}")
                m.d.comb += [
                    waiting.eq(Cat(*(self.head_req[i * V + v] & self.head_port[i * V + v][o]
                                     for (i, v) in group))),
                    granted.eq(Cat(*(self.grant[i * V + v] & self.head_port[i * V + v][o]
                                     for (i, v) in group))),
                ]
                fav_valid = Signal(name=f"fav_valid_{o}_{c}")
                fav = Signal(len(group), name=f"fav_{o}_{c}")
                m.submodules[f"favarb_{o}_{c}"] = arb = RoundRobinArbiter(len(group))
                m.d.comb += arb.requests.eq(waiting)
                with m.If(fav_valid):
                    m.d.sync += fav_valid.eq((fav & waiting & ~granted).any())
                with m.Else():
                    m.d.comb += arb.advance.eq(1)
                    m.d.sync += [fav.eq(arb.grant), fav_valid.eq((arb.grant & ~granted).any())]

                push_terms, hash_terms, vc_terms = [], [], []
                for q, (i, v) in enumerate(group):
                    j = i * V + v
                    here = self.head_port[j][o]
                    if track is None:
                        conflict = Const(0, vpc)
                    else:
                        m.d.comb += track.query[q].eq(self.head_hash[j])
                        conflict = Cat(*(Cat(*(track.present[q][w] for w in range(vpc) if w != u)).any()
                                         for u in range(vpc)))
                    allowed = Signal(vpc, name=f"allowed_{o}_{i}_{v}")
                    pref = Signal(vpc, name=f"pref_{o}_{i}_{v}")
                    pick = Signal(vpc, name=f"pick_{o}_{i}_{v}")
                    m.d.comb += [allowed.eq(usable[cls] & ~conflict),
                                 pref.eq(allowed & self.credit_full[o][cls])]
                    with m.If(pref.any()):
                        m.d.comb += pick.eq(lowest_one(pref))
                    with m.Else():
                        m.d.comb += pick.eq(lowest_one(allowed))
                    local = Const(0, lvc_bits)
                    for u in range(1, vpc):
                        local = local | Mux(pick[u], u, 0)
                    ok = Signal(name=f"ok_{o}_{i}_{v}")
                    m.d.comb += ok.eq(here & allowed.any() & (~fav_valid | fav[q]))
                    eligible_bits[j] = eligible_bits[j] | ok
                    pick_vals[j] = pick_vals[j] | Mux(here, local + base, 0)
                    g = granted[q]
                    push_terms.append(Mux(g, pick, 0))
                    hash_terms.append(Mux(g, self.head_hash[j], 0))
                    vc_terms.append(Mux(g, local, 0))
                onehot = Signal(vpc, name=f"push_onehot_{o}_{c}")
                m.d.comb += onehot.eq(_or_all(push_terms, vpc))
                push_onehot.append(onehot)
                if track is None:
                    continue
                in_class = self.tail_valid[o] & _in_range(self.tail_vc[o], base, base + vpc, V)
                m.d.comb += [
                    track.push.eq(granted.any()),
                    track.push_vc.eq(_or_all(vc_terms, lvc_bits)),
                    track.push_hash.eq(_or_all(hash_terms, p.hash_bits)),
                    track.push_sent.eq(0), track.push_need.eq(0),
                    track.tail.eq(in_class), track.tail_vc.eq((self.tail_vc[o] - base)[:lvc_bits]),
                    track.tail_need.eq(self.tail_need[o]),
                    track.credit.eq(self.credit_in[o][cls]),
                ]
            m.d.sync += free.eq((free | tail_onehot) & ~Cat(*push_onehot))

        for j in range(PORTS * V):
            m.d.comb += [self.eligible[j].eq(self.head_req[j] & eligible_bits[j]),
                         self.pick[j].eq(pick_vals[j])]
        m.d.comb += self.error.eq(Cat(*errors).any())
        return m


def _in_range(value, lo, hi, limit):
    """``lo <= value < hi`` for a value below ``limit``, without comparisons that are constant."""
    terms = []
    if lo > 0:
        terms.append(value >= lo)
    if hi < limit:
        terms.append(value < hi)
    return Cat(*terms).all() if terms else Const(1, 1)


def _or_all(values, width):
    out = Const(0, width)
    for value in values:
        out = out | value
    return out
