"""Formal properties of :class:`rtl.common.stream_register.StreamRegister`.

* ``o`` obeys the stream rules: once valid, it stays valid with a stable payload until accepted.
* Nothing is lost or duplicated: words accepted minus words delivered always equals the number held
  (``o.valid`` plus the skid word, visible as ``~i.ready``), so occupancy never exceeds two.
* Order and content (bounded): the N-th word out equals the N-th word in, for a solver-chosen N.
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cover, Module, Signal

from rtl.common.stream_register import StreamRegister

from .proof import Proof, free, reset_at_start

WIDTH = 4


def _harness(check_data):
    m = Module()
    m.submodules.dut = dut = StreamRegister(WIDTH)
    started = reset_at_start(m)
    free(m, dut.i.valid, dut.i.payload, dut.o.ready)

    # Environment: the producer keeps valid and payload stable while stalled.
    held_valid = Signal()
    held_payload = Signal(WIDTH)
    m.d.sync += [held_valid.eq(dut.i.valid & ~dut.i.ready), held_payload.eq(dut.i.payload)]
    with m.If(started & held_valid):
        m.d.comb += Assume(dut.i.valid & (dut.i.payload == held_payload))

    # The design's promise on o.
    stalled = Signal()
    stalled_payload = Signal(WIDTH)
    m.d.sync += [stalled.eq(dut.o.valid & ~dut.o.ready), stalled_payload.eq(dut.o.payload)]
    with m.If(started & stalled):
        m.d.comb += Assert(dut.o.valid & (dut.o.payload == stalled_payload))

    accepted = Signal(8)
    delivered = Signal(8)
    with m.If(dut.i.valid & dut.i.ready):
        m.d.sync += accepted.eq(accepted + 1)
    with m.If(dut.o.valid & dut.o.ready):
        m.d.sync += delivered.eq(delivered + 1)
    held = Signal(2)
    m.d.comb += held.eq(dut.o.valid + ~dut.i.ready)
    with m.If(started):
        m.d.comb += Assert((accepted - delivered)[:8] == held)
        m.d.comb += Assert(~(~dut.i.ready & ~dut.o.valid))   # the skid word always has a slot ahead

    if check_data:
        index = AnyConst(8)
        word = Signal(WIDTH)
        with m.If(dut.i.valid & dut.i.ready & (accepted == index)):
            m.d.sync += word.eq(dut.i.payload)
        with m.If(started & dut.o.valid & dut.o.ready & (delivered == index)):
            m.d.comb += Assert(dut.o.payload == word)
        m.d.comb += Cover(started & dut.o.valid & dut.o.ready & (delivered == 3) & ~dut.i.ready)
    return m


PROOFS = [
    Proof("stream_register_protocol", lambda: _harness(False), mode="prove", depth=8,
          description="stream rules on o; accepted - delivered == words held"),
    Proof("stream_register_order", lambda: _harness(True), mode="bmc", depth=16,
          description="the N-th word out is the N-th word in"),
    Proof("stream_register_cover", lambda: _harness(True), mode="cover", depth=16,
          description="reachability: a full skid buffer delivers its fourth word (not vacuous)"),
]
