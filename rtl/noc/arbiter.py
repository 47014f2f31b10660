"""Round-robin arbiter: the fairness primitive of every allocator of the fabric."""

from amaranth.hdl import Cat, Module, Signal
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
    keep : In(1)
        With ``advance``: rotate priority *to* the winner instead, so it wins again next cycle if it
        still asks (a packet keeping its output until its tail). A winner kept for at most ``k`` grants
        in a row makes the bound ``n * k`` grants.

    Latency and throughput
    ----------------------
    Zero cycles (combinational) from ``requests`` to ``grant``; one decision per cycle.
    """

    def __init__(self, n):
        if not isinstance(n, int) or n < 1:
            raise parameter_error(self, ValueError, f"an arbiter needs at least one requester, not {n!r}")
        self._n = n
        super().__init__({"requests": In(n), "grant": Out(n), "valid": Out(1), "advance": In(1),
                          "keep": In(1)})

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
        # The last winner is registered and the priority mask (ones strictly above it) derived from it
        # combinationally: the mask is ready early in the cycle, so the request-to-grant path is only
        # the masked priority pick.
        last = Signal(n)
        keep_last = Signal()
        mask = Signal(n)
        with m.If(keep_last):
            m.d.comb += mask.eq(~(last - 1)[:n])                # the last winner first, then above it
        with m.Else():
            m.d.comb += mask.eq(~(last | (last - 1))[:n])       # strictly above the last winner
        # One priority pick over [requests above the last winner, all requests]: the first half wins if
        # it has a request, else the pick wraps around to the lowest request.
        both = Signal(2 * n)
        m.d.comb += [both.eq(lowest_one(Cat(self.requests & mask, self.requests))),
                     self.grant.eq(both[:n] | both[n:])]
        with m.If(self.advance & self.valid):
            m.d.sync += [last.eq(self.grant), keep_last.eq(self.keep)]
        return m
