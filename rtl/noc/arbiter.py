"""Round-robin arbiter: the fairness primitive of every allocator of the fabric."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

__all__ = ["RoundRobinArbiter", "lowest_one"]


def lowest_one(value):
    """The lowest set bit of ``value`` as a one-hot value of the same width (zero stays zero)."""
    width = len(value)
    return (value & (~value + 1))[:width]


class RoundRobinArbiter(wiring.Component):
    """Grants one of ``n`` requesters, rotating priority past each winner.

    The grant is a combinational function of ``requests`` and a registered priority mask: the lowest
    requesting index at or above the priority pointer wins, wrapping around to index 0. When ``advance``
    is high at a clock edge and some request was granted, the pointer moves to just past the winner, so
    that winner has the lowest priority next. A request held high, with ``advance`` asserted whenever
    anything is granted, is therefore granted within ``n`` grants.

    Parameters
    ----------
    n : int
        Number of requesters (1 or more).

    Interface attributes
    --------------------
    requests : In(n)
        Request bits.
    grant : Out(n)
        One-hot grant, zero when nothing is requested. Never grants a bit that is not requested.
    valid : Out(1)
        Some request is granted (``requests != 0``).
    advance : In(1)
        Commit the current grant: rotate priority past it at the next clock edge.
    hold : In(n)
        Per requester, with ``advance``: if it wins, rotate priority *to* it instead, so it wins again
        next cycle if it still asks (a packet keeping its output until its tail). A winner held for at
        most ``k`` grants in a row makes the bound ``n * k`` grants.

    Latency and throughput
    ----------------------
    Zero cycles (combinational) from ``requests`` to ``grant``; one decision per cycle. The priority
    mask is a register, loaded from the carries of the pick itself: the request-to-grant path is one
    carry chain, and the mask update is two LUTs behind it with no reduction over the winner.
    """

    def __init__(self, n):
        if not isinstance(n, int) or n < 1:
            raise parameter_error(self, ValueError, f"an arbiter needs at least one requester, not {n!r}")
        self._n = n
        super().__init__({"requests": In(n), "grant": Out(n), "valid": Out(1), "advance": In(1),
                          "hold": In(n)})

    @property
    def n(self):
        return self._n

    def elaborate(self, platform):
        m = Module()
        n = self._n
        m.d.comb += self.valid.eq(self.requests.any())
        if n == 1:
            m.d.comb += self.grant.eq(self.requests)
            return m
        # One priority pick over [requests at or above the pointer, all requests]: the first half wins
        # if it has a request, else the pick wraps around to the lowest request. The pick is
        # ``x & (~x + 1)``; the carries of ``~x + 1`` say, per position, that no request lies below it.
        mask = Signal(n)        # requesters at or above the pointer; none after reset (lowest first)
        x = Signal(2 * n)
        up = Signal(2 * n)      # ~x + 1
        pick = Signal(2 * n)    # x & up: the lowest request of x, one-hot
        clear_below = Signal(2 * n)     # carry into each position: no request below it
        m.d.comb += [
            x.eq(Cat(self.requests & mask, self.requests)),
            up.eq(~x + 1),
            pick.eq(x & up),
            clear_below.eq(up ^ ~x),
            self.grant.eq(pick[:n] | pick[n:]),
        ]
        # Next mask: the requesters strictly above the winner, which are exactly the positions with a
        # request somewhere below them (``clear_below`` low), plus the winner itself when it holds. The
        # winner is in the first half unless that half has no request (the carry into the second half).
        wrapped = clear_below[n]
        above = Signal(n)
        m.d.comb += above.eq(Mux(wrapped, ~clear_below[n:2 * n], ~clear_below[:n]))
        with m.If(self.advance & self.valid):
            m.d.sync += mask.eq(above | (self.grant & self.hold))
        return m
