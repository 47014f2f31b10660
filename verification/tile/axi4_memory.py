"""An AXI4 read subordinate for the Amaranth simulator: a memory with a latency and a bandwidth.

:class:`Axi4ReadMemory` answers the AR and R channels of an :class:`rtl.common.axi.Axi4ReadSignature`
manager port (``dut.m_axi``) from a byte image, and checks the manager's side of the protocol as it
goes. It is the stand-in for HBM or a DDR controller in the tile's tests: ``latency`` and
``beats_per_cycle`` are the two figures that matter for a streaming reader, and they are
independent (the memory is pipelined: bursts accepted back to back are answered back to back)::

    mem = Axi4ReadMemory(dut.m_axi, image, latency=20, beats_per_cycle=Fraction(1, 2),
                         gap_prob=0.1, rng=random.Random(seed))
    sim.add_testbench(mem.process, background=True)

Timing
------
A cycle is the interval between two rising edges. A burst whose AR handshake happens in cycle ``c``
presents its first beat on R in cycle ``c + latency`` at the earliest; its other beats follow, and so
do the beats of the bursts accepted after it, in order, at most ``beats_per_cycle`` beats per cycle
on average (a token bucket: one beat is due every ``1 / beats_per_cycle`` cycles, and an idle
memory does not bank more than one beat). Bandwidth in bytes per cycle is ``beats_per_cycle *
data_bytes``. ``gap_prob`` adds random cycles without ``RVALID`` on top (a refresh, a bank
conflict); ``ar_stall_prob`` random cycles without ``ARREADY``. ``ARREADY`` is also low while
``queue_depth`` accepted bursts wait for their data. A beat presented stays presented, unchanged,
until ``RREADY``.

Responses
---------
Beats read the image at ``address - base``; a beat that reaches outside the image answers DECERR,
a beat that overlaps one of ``error_ranges`` (``(start, end)`` byte ranges, end exclusive) answers
SLVERR; both with zero data. ``RID`` echoes ``ARID``; ``RLAST`` marks the last beat of each burst.

Checks of the manager (:class:`AxiProtocolError`, an :class:`AssertionError`)
-----------------------------------------------------------------------------
* ``ARVALID``, once high, stays high with a stable AR payload until ``ARREADY``;
* ``ARBURST`` is INCR and ``ARSIZE`` the full data width (the only bursts this model serves);
* ``ARLEN + 1`` is at most ``max_burst``;
* no burst crosses a 4 KiB boundary;
* with ``expect_rready``, ``RREADY`` is high whenever ``RVALID`` is (for a manager that promises
  never to stall the R channel; AXI itself lets a manager hold ``RREADY`` low).

Statistics for the tests: :attr:`bursts` (every accepted ``(cycle, araddr, arlen)``),
:attr:`beats` (R transfers), :attr:`peak_outstanding` (most bursts accepted and not yet completed
at once), :attr:`cycle` (cycles seen).
"""

import random
from collections import deque
from fractions import Fraction

from rtl.common.axi import BURST_INCR, RESP_DECERR, RESP_OKAY, RESP_SLVERR

__all__ = ["Axi4ReadMemory", "AxiProtocolError", "range_beats"]

_BOUNDARY = 4096


class AxiProtocolError(AssertionError):
    """The manager broke an AXI rule (or a rule of the model, such as the burst length limit)."""


class _Burst:
    __slots__ = ("arid", "addr", "beats", "sent", "due")

    def __init__(self, arid, addr, beats, due):
        self.arid, self.addr, self.beats, self.sent, self.due = arid, addr, beats, 0, due


class Axi4ReadMemory:
    """A pipelined read-only memory behind an AXI4 read port, with protocol checks.

    Parameters
    ----------
    bus : interface of :class:`rtl.common.axi.Axi4ReadSignature`
        The manager's port (``dut.m_axi``); the model drives ``arready`` and the R channel.
    image : bytes-like
        Memory contents, from address ``base``.
    latency : int
        Cycles from the AR handshake to the burst's first R beat (at least 1).
    beats_per_cycle : int, float or :class:`fractions.Fraction`
        Average R beats per cycle, in (0, 1] (1: one beat every cycle; ``Fraction(1, 4)``: one every
        four cycles).
    queue_depth : int
        Accepted bursts the memory holds (``ARREADY`` is low while that many wait for their data).
    gap_prob, ar_stall_prob : float
        Probability of an extra cycle without ``RVALID`` / without ``ARREADY``.
    rng : :class:`random.Random`, optional
        Needed when either probability is non-zero (seed it, and log the seed).
    error_ranges : sequence of (start, end)
        Byte ranges that answer SLVERR.
    base : int
        Address of ``image[0]``.
    max_burst : int
        Longest burst accepted (beats), 1 to 256.
    expect_rready : bool
        Fail when ``RVALID`` meets a low ``RREADY``.
    """

    def __init__(self, bus, image, *, latency=1, beats_per_cycle=1, queue_depth=16, gap_prob=0.0,
                 ar_stall_prob=0.0, rng=None, error_ranges=(), base=0, max_burst=256, expect_rready=False):
        if not isinstance(latency, int) or latency < 1:
            raise ValueError(f"latency must be an integer of at least 1 cycle, got {latency!r}")
        rate = Fraction(beats_per_cycle)
        if not 0 < rate <= 1:
            raise ValueError(f"beats_per_cycle must be in (0, 1], got {beats_per_cycle!r}")
        if not isinstance(queue_depth, int) or queue_depth < 1:
            raise ValueError(f"queue_depth must be a positive integer, got {queue_depth!r}")
        for name, p in (("gap_prob", gap_prob), ("ar_stall_prob", ar_stall_prob)):
            if not 0 <= p < 1:
                raise ValueError(f"{name} must be in [0, 1), got {p!r}")
        if (gap_prob or ar_stall_prob) and rng is None:
            raise ValueError("random gaps need a seeded rng (random.Random(seed))")
        if not 1 <= max_burst <= 256:
            raise ValueError(f"max_burst must be from 1 to 256, got {max_burst!r}")
        self.bus = bus
        self.image = bytes(image)
        self.data_bytes = len(bus.rdata) // 8
        self.size = self.data_bytes.bit_length() - 1
        self.latency = latency
        self.beats_per_cycle = rate
        self.queue_depth = queue_depth
        self.gap_prob = gap_prob
        self.ar_stall_prob = ar_stall_prob
        self.rng = rng or random.Random(0)
        self.error_ranges = [tuple(r) for r in error_ranges]
        self.base = base
        self.max_burst = max_burst
        self.expect_rready = expect_rready
        self.bursts = []
        self.beats = 0
        self.peak_outstanding = 0
        self.cycle = 0

    @property
    def bandwidth(self):
        """Average bytes per cycle the memory can deliver (``beats_per_cycle * data_bytes``)."""
        return self.beats_per_cycle * self.data_bytes

    def _beat(self, address):
        """``(data, resp)`` of the beat at ``address`` (a multiple of ``data_bytes``)."""
        end = address + self.data_bytes
        offset = address - self.base
        if offset < 0 or offset + self.data_bytes > len(self.image):
            return 0, RESP_DECERR
        if any(start < end and address < stop for start, stop in self.error_ranges):
            return 0, RESP_SLVERR
        return int.from_bytes(self.image[offset:offset + self.data_bytes], "little"), RESP_OKAY

    def _check_ar(self, arid, araddr, arlen, arsize, arburst):
        where = f"AR burst araddr={araddr:#x} arlen={arlen} (cycle {self.cycle})"
        if arburst != BURST_INCR:
            raise AxiProtocolError(f"{where}: ARBURST {arburst:#04b}, the model serves INCR (0b01) only")
        if arsize != self.size:
            raise AxiProtocolError(f"{where}: ARSIZE {arsize}, expected {self.size} "
                                   f"({self.data_bytes}-byte beats)")
        if arlen + 1 > self.max_burst:
            raise AxiProtocolError(f"{where}: {arlen + 1} beats, more than the limit of {self.max_burst}")
        start = araddr & ~(self.data_bytes - 1)
        if (start % _BOUNDARY) + (arlen + 1) * self.data_bytes > _BOUNDARY:
            raise AxiProtocolError(f"{where}: crosses the 4 KiB boundary at "
                                   f"{(start // _BOUNDARY + 1) * _BOUNDARY:#x}")

    async def process(self, ctx):
        """The model itself: add it with ``sim.add_testbench(mem.process, background=True)``."""
        bus = self.bus
        queue = deque()
        presented = None                          # the burst whose beat is on R
        held_ar = None                            # AR payload seen with ARVALID and not ARREADY
        tokens = Fraction(1)
        ctx.set(bus.rvalid, 0)
        ctx.set(bus.arready, 1)
        sampled = (bus.arvalid, bus.arready, bus.arid, bus.araddr, bus.arlen, bus.arsize, bus.arburst,
                   bus.rvalid, bus.rready, bus.rlast)
        async for _, _, arvalid, arready, arid, araddr, arlen, arsize, arburst, rvalid, rready, rlast \
                in ctx.tick().sample(*sampled):
            # Values of cycle `self.cycle`, sampled at the edge that ends it.
            ar = (arid, araddr, arlen, arsize, arburst)
            if held_ar is not None and (not arvalid or ar != held_ar):
                raise AxiProtocolError(
                    f"cycle {self.cycle}: ARVALID fell or the AR payload changed before ARREADY "
                    f"(held (arid, araddr, arlen, arsize, arburst) = {held_ar}, now "
                    f"{ar if arvalid else 'ARVALID low'})")
            held_ar = None
            if arvalid and arready:
                self._check_ar(*ar)
                self.bursts.append((self.cycle, araddr, arlen))
                start = araddr & ~(self.data_bytes - 1)
                queue.append(_Burst(arid, start, arlen + 1, self.cycle + self.latency))
            elif arvalid:
                held_ar = ar
            self.peak_outstanding = max(self.peak_outstanding, len(queue))

            if rvalid:
                if self.expect_rready and not rready:
                    raise AxiProtocolError(f"cycle {self.cycle}: RREADY low while RVALID is high")
                if rready:
                    self.beats += 1
                    presented.sent += 1
                    if rlast:
                        queue.popleft()
                    presented = None

            self.cycle += 1
            # Outputs of the new cycle `self.cycle`.
            tokens = min(Fraction(1), tokens + self.beats_per_cycle)
            if presented is None:
                head = queue[0] if queue else None
                gap = self.gap_prob and self.rng.random() < self.gap_prob
                if head is not None and head.due <= self.cycle and tokens >= 1 and not gap:
                    tokens -= 1
                    presented = head
                    value, resp = self._beat(head.addr + head.sent * self.data_bytes)
                    ctx.set(bus.rdata, value)
                    ctx.set(bus.rresp, resp)
                    ctx.set(bus.rid, head.arid)
                    ctx.set(bus.rlast, head.sent + 1 == head.beats)
                    ctx.set(bus.rvalid, 1)
                else:
                    ctx.set(bus.rvalid, 0)
            stall = self.ar_stall_prob and self.rng.random() < self.ar_stall_prob
            ctx.set(bus.arready, int(len(queue) < self.queue_depth and not stall))


def range_beats(image, addr, length, data_bytes, *, base=0):
    """Reference of a streaming reader: the ``(data, last)`` beats of bytes ``[addr, addr + length)``.

    Bytes are packed little-endian from bit 0 of the first beat, whatever the alignment of ``addr``;
    the last beat has ``last`` set and zeros beyond the range. This is what
    :class:`rtl.tile.weight_port.WeightPort` delivers on ``o`` for one request.
    """
    chunk = bytes(image[addr - base:addr - base + length])
    if len(chunk) != length:
        raise ValueError(f"range {addr:#x}+{length} lies outside the image")
    return [(int.from_bytes(chunk[k:k + data_bytes], "little"), k + data_bytes >= length)
            for k in range(0, length, data_bytes)]
