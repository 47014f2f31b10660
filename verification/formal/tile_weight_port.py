"""Formal properties of the AXI side of :class:`rtl.tile.weight_port.WeightPort`.

**Burst generator** (:class:`rtl.tile.weight_port.BurstIssuer`), proven by k-induction (every
reachable state). Its environment is free except for AXI and the port around it: runs of at least
one beat; ``ARREADY`` any time; ``RLAST`` beats (``burst_done``) only for accepted, uncompleted
bursts; ``credit`` only for a buffer entry reserved by an issued burst. Under that:

* ``ARVALID``, once high, stays high with a stable address and length until ``ARREADY``;
* every burst is at most ``max_burst`` beats and stays within its 4 KiB page;
* at most ``max_outstanding`` bursts are accepted and not yet completed;
* the beats reserved by issued bursts never exceed the read-data buffer (so ``RREADY`` can stay
  high), i.e. the credits never go below zero;
* and, to make the induction close, the generator's counters equal the harness's: bursts in flight
  = accepted and not done + the one on AR; credits = buffer depth - beats reserved.

**Whole port**, bounded from reset: the requester keeps valid and payload while stalled and names
ranges of multiples of 4 bytes; the subordinate answers accepted bursts in order with ``RLAST`` on
each last beat (a harness FIFO holds the lengths), any ``RRESP``, read data held at zero (the data
path is checked bit-exactly in simulation). Then ``o`` obeys the stream rules, ``RREADY`` is high,
AR bursts are INCR, 4-byte, beat-aligned, within a page, and the outstanding bursts and beats stay
within ``max_outstanding`` and the buffer.

Configuration: 4-byte beats, bursts of at most 4 beats (8 for the generator alone), 2 (3)
outstanding, 13-bit addresses so that a 4 KiB boundary lies inside the space.
"""

from amaranth.hdl import Array, Assert, Assume, Cover, Module, Mux, ResetSignal, Signal

from rtl.common.axi import BURST_INCR
from rtl.tile.weight_port import BurstIssuer, WeightPort

from .proof import Proof, free, reset_at_start

DATA_BYTES = 4
ADDR_BITS = 13


def _issuer_harness():
    max_burst, max_outstanding, depth, max_beats = 8, 3, 12, 40
    m = Module()
    m.submodules.dut = dut = BurstIssuer(data_bytes=DATA_BYTES, addr_bits=ADDR_BITS, max_beats=max_beats,
                                         max_burst=max_burst, max_outstanding=max_outstanding, credits=depth)
    started = reset_at_start(m)
    free(m, dut.run.valid, dut.run.payload.as_value(), dut.arready, dut.burst_done, dut.credit)
    m.d.comb += Assume(dut.run.payload.beats != 0)

    ar_fire = dut.arvalid & dut.arready
    ar_held = Signal()                                   # AR stalled in the cycle before
    ar_addr = Signal.like(dut.araddr)
    ar_len = Signal.like(dut.arlen)
    m.d.sync += [ar_held.eq(dut.arvalid & ~dut.arready), ar_addr.eq(dut.araddr), ar_len.eq(dut.arlen)]

    # A burst's beats are reserved in the cycle it issues; it shows on AR from the next cycle, when
    # ``new_burst`` marks it (ARVALID without a stall before: not the burst of the cycle before).
    outstanding = Signal(range(max_outstanding + 2))     # accepted, RLAST beat not yet seen
    reserved = Signal(range(depth + max_burst + 1))      # beats of earlier bursts, credit not back
    new_burst = Signal()
    reserved_now = Signal(len(reserved) + 1)           # wide enough never to wrap
    m.d.comb += [
        new_burst.eq(dut.arvalid & ~ar_held),
        reserved_now.eq(reserved + Mux(new_burst, dut.arlen + 1, 0)),
        Assume(~dut.burst_done | (outstanding != 0)),
        Assume(~dut.credit | (reserved != 0)),
    ]
    m.d.sync += [
        outstanding.eq(outstanding + ar_fire - dut.burst_done),
        reserved.eq(reserved_now - dut.credit),
    ]

    # Checked in every cycle after the reset cycle (from the reset state on), so that the induction
    # assumes them in every step before the one it checks.
    with m.If(~ResetSignal()):
        with m.If(ar_held):
            m.d.comb += Assert(dut.arvalid & (dut.araddr == ar_addr) & (dut.arlen == ar_len))
        with m.If(dut.arvalid):
            m.d.comb += [
                Assert(dut.araddr[:2] == 0),
                Assert(dut.arlen < max_burst),
                Assert(dut.araddr[:12] + (dut.arlen + 1) * DATA_BYTES <= 4096),
            ]
        m.d.comb += [
            Assert(outstanding <= max_outstanding),
            Assert(reserved_now <= depth),
            # Induction strengthening: the generator's own counters.
            Assert(dut.in_flight == outstanding + dut.arvalid),
            Assert(dut.credits_left == depth - reserved_now),
            Assert(dut.busy == (dut.left != 0)),
        ]
    m.d.comb += Cover(started & ar_fire & (dut.araddr == 4096) & (outstanding == max_outstanding - 1)
                      & (dut.arlen == max_burst - 1))
    return m


def _port_harness():
    max_burst, max_outstanding = 4, 2
    m = Module()
    m.submodules.dut = dut = WeightPort(data_bytes=DATA_BYTES, addr_bits=ADDR_BITS, max_burst=max_burst,
                                        max_outstanding=max_outstanding, length_bits=6)
    started = reset_at_start(m)
    axi = dut.m_axi
    free(m, dut.req.valid, dut.req.payload.as_value(), dut.o.ready, axi.arready, axi.rvalid, axi.rresp,
         axi.rlast, axi.rid)
    m.d.comb += axi.rdata.eq(0)

    # The requester's side of the contract.
    req = dut.req
    held = Signal()
    held_payload = Signal.like(req.payload.as_value())
    m.d.sync += [held.eq(req.valid & ~req.ready), held_payload.eq(req.payload.as_value())]
    with m.If(started & held):
        m.d.comb += Assume(req.valid & (req.payload.as_value() == held_payload))
    m.d.comb += Assume(req.payload.addr[:2] == 0)
    m.d.comb += Assume((req.payload.length[:2] == 0) & (req.payload.length != 0))

    # The subordinate: R beats of accepted bursts, in order, RLAST on each burst's last beat.
    slots = max_outstanding + 1                  # room to see one burst too many
    lengths = Array(Signal(9, name=f"len{i}") for i in range(slots))
    w_ptr = Signal(range(slots))
    r_ptr = Signal(range(slots))
    outstanding = Signal(range(slots + 1))
    beats_due = Signal(8)
    beat = Signal(9)
    ar_fire = axi.arvalid & axi.arready
    r_fire = axi.rvalid & axi.rready
    m.d.comb += Assume(~axi.rvalid | (outstanding != 0))
    with m.If(axi.rvalid):
        m.d.comb += Assume(axi.rlast == (beat + 1 == lengths[r_ptr]))
    m.d.comb += Assume(~ar_fire | (outstanding != slots))
    with m.If(ar_fire):
        m.d.sync += [lengths[w_ptr].eq(axi.arlen + 1), w_ptr.eq(_wrap(w_ptr, slots))]
    with m.If(r_fire):
        m.d.sync += beat.eq(beat + 1)
        with m.If(axi.rlast):
            m.d.sync += [beat.eq(0), r_ptr.eq(_wrap(r_ptr, slots))]
    m.d.sync += [
        outstanding.eq(outstanding + ar_fire - (r_fire & axi.rlast)),
        beats_due.eq(beats_due + Mux(ar_fire, axi.arlen + 1, 0) - r_fire),
    ]

    # The port's promises.
    ar_held = Signal()
    ar_addr = Signal.like(axi.araddr)
    ar_len = Signal.like(axi.arlen)
    m.d.sync += [ar_held.eq(axi.arvalid & ~axi.arready), ar_addr.eq(axi.araddr), ar_len.eq(axi.arlen)]
    o_held = Signal()
    o_payload = Signal.like(dut.o.payload.as_value())
    m.d.sync += [o_held.eq(dut.o.valid & ~dut.o.ready), o_payload.eq(dut.o.payload.as_value())]
    with m.If(started):
        with m.If(ar_held):
            m.d.comb += Assert(axi.arvalid & (axi.araddr == ar_addr) & (axi.arlen == ar_len))
        with m.If(axi.arvalid):
            m.d.comb += [
                Assert(axi.arburst == BURST_INCR),
                Assert(axi.arsize == 2),
                Assert(axi.araddr[:2] == 0),
                Assert(axi.arlen < max_burst),
                Assert(axi.araddr[:12] + (axi.arlen + 1) * DATA_BYTES <= 4096),
            ]
        m.d.comb += [
            Assert(outstanding <= max_outstanding),
            Assert(beats_due <= dut.buffer_depth),
            Assert(axi.rready),
        ]
        with m.If(o_held):
            m.d.comb += Assert(dut.o.valid & (dut.o.payload.as_value() == o_payload))

    delivered_last = Signal()
    with m.If(dut.o.valid & dut.o.ready & dut.o.payload.last):
        m.d.sync += delivered_last.eq(1)
    m.d.comb += Cover(started & delivered_last & ar_fire & (outstanding == max_outstanding - 1))
    return m


def _wrap(value, modulus):
    """``(value + 1) % modulus`` for a ``Signal(range(modulus))``."""
    return Mux(value == modulus - 1, 0, value + 1)


PROOFS = [
    Proof("weight_port_bursts", _issuer_harness, mode="prove", depth=4,
          description="burst generator, all reachable states: AR held until ARREADY, no 4 KiB crossing, "
                      "<= max_burst beats, <= max_outstanding bursts, reserved beats <= buffer depth"),
    Proof("weight_port_bursts_cover", _issuer_harness, mode="cover", depth=12,
          description="reachability: a full burst starting a 4 KiB page accepted behind two others"),
    Proof("weight_port_axi", _port_harness, mode="bmc", depth=10,
          description="whole port, 10 cycles from reset: o stream rules, RREADY high, AR rules, "
                      "outstanding bursts and beats within the limits"),
    Proof("weight_port_cover", _port_harness, mode="cover", depth=10,
          description="reachability: a range's last beat delivered, then a burst accepted behind another"),
]
