"""Formal properties of :class:`rtl.common.credited_buffer.CreditedBuffer` behind a credit-keeping writer.

The writer is free (any ``w_en``, any data) except for the buffer's contract: it starts with
``depth`` credits, spends one per write and regains one per transfer on ``o``. Under that contract:

* ``o`` obeys the stream rules: once valid, it stays valid with a stable payload until accepted;
* nothing is lost, duplicated or invented: written minus delivered always equals the entries held,
  never more than ``depth``, and ``overflow`` never rises;
* order and content: the N-th entry out is the N-th entry written, for a solver-chosen N.

All bounded (BMC from reset, long enough to wrap the pointers), for a power-of-two depth and an odd
one (the pointers wrap differently).
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cover, Module, Signal

from rtl.common.credited_buffer import CreditedBuffer

from .proof import Proof, free, reset_at_start

WIDTH = 4


def _harness(depth, check_data):
    m = Module()
    m.submodules.dut = dut = CreditedBuffer(WIDTH, depth, ram_style="distributed")
    started = reset_at_start(m)
    free(m, dut.w_en, dut.w_data, dut.o.ready)

    written = Signal(8)
    delivered = Signal(8)
    credits = Signal(range(depth + 1), init=depth)
    give = dut.o.valid & dut.o.ready
    with m.If(dut.w_en):
        m.d.sync += written.eq(written + 1)
    with m.If(give):
        m.d.sync += delivered.eq(delivered + 1)
    m.d.sync += credits.eq(credits - dut.w_en + give)
    m.d.comb += Assume(~dut.w_en | (credits != 0))              # the writer keeps its count

    stalled = Signal()
    stalled_payload = Signal(WIDTH)
    m.d.sync += [stalled.eq(dut.o.valid & ~dut.o.ready), stalled_payload.eq(dut.o.payload)]
    with m.If(started):
        with m.If(stalled):
            m.d.comb += Assert(dut.o.valid & (dut.o.payload == stalled_payload))
        m.d.comb += Assert((written - delivered)[:8] == depth - credits)
        m.d.comb += Assert(~dut.overflow)

    if check_data:
        index = AnyConst(8)
        word = Signal(WIDTH)
        with m.If(dut.w_en & (written == index)):
            m.d.sync += word.eq(dut.w_data)
        with m.If(started & give & (delivered == index)):
            m.d.comb += Assert(dut.o.payload == word)
        m.d.comb += Cover(started & give & (delivered == depth + 1) & (credits == 1))
    return m


PROOFS = [
    Proof("credited_buffer_protocol_d4", lambda: _harness(4, False), mode="bmc", depth=12,
          description="depth 4: stream rules on o; written - delivered == depth - credits; no overflow"),
    Proof("credited_buffer_order_d3", lambda: _harness(3, True), mode="bmc", depth=11,
          description="depth 3: the same, and the N-th entry out is the N-th entry written"),
    Proof("credited_buffer_cover", lambda: _harness(3, True), mode="cover", depth=11,
          description="reachability: a full buffer refilled behind a stall delivers its fifth entry"),
]
