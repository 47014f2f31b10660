"""Formal properties of :class:`rtl.tile.axil_registers.AxilRegisters` (a small map of every kind).

The manager (every AXI input) and the core (the ``ro`` and ``w1c`` ports, the region's ``req.ready``
and ``resp``) are free, constrained only by their protocol: a VALID, once high, stays high with a
stable payload until READY; the core answers only a request it has accepted, once.

The block's promises:

* R and B: once ``RVALID`` (``BVALID``) is high it stays high, with stable ``RDATA``/``RRESP``
  (``BRESP``), until ``RREADY`` (``BREADY``).
* One response per request, never early: reads accepted minus reads answered is 0 or 1 and equals
  ``~ARREADY`` (the next AR waits for the answer); the same for AW and W against B; ``RVALID`` and
  ``BVALID`` only while a request of their kind is outstanding.
* The region's ``req`` obeys the stream rules, carries at most one request at a time, and only
  while an AXI request is outstanding; ``resp.ready`` is high exactly while an answer is owed.

``prove`` (k-induction) needs a bound on how long the environment may stall (``STALL`` cycles on
every READY and on the core's answer) so that an unreachable state shows itself within the
induction depth; the ``bmc`` task checks the same properties with an environment that may stall
forever, and the ``cover`` task shows that reads and writes of registers and of the region, an
error response and the interrupt are reachable (the proofs are not vacuous).
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Signal

from rtl.common.axi import RESP_OKAY, RESP_SLVERR
from rtl.tile.axil_registers import AxilRegisters
from rtl.tile.register_map import CONST, RO, RW, STROBE, W1C, Field, Region, Register, RegisterMap

from .proof import Proof, free, reset_at_start

MAP = RegisterMap("formal", (
    Register("CTRL", 0x00, STROBE, "strobe", fields=(Field("go", 0, doc="go"),)),
    Register("VAL", 0x04, RW, "rw", width=4, init=5),
    Register("SENSE", 0x08, RO, "ro", width=4),
    Register("FLAGS", 0x0C, W1C, "w1c", width=2, irq_enable="MASK"),
    Register("MASK", 0x10, RW, "irq enable", width=2),
    Register("MAGIC", 0x14, CONST, "const", init=0xA),
), (Region("MEM", 0x20, 3, "three words"),))

STALL = 2
"""In the ``prove`` task: most cycles the environment keeps the block waiting at any handshake."""


def _held(m, started, valid, ready, payload, *, assume):
    """VALID, once high, stays high with a stable payload until READY (assumed or asserted)."""
    stalled = Signal()
    previous = Signal(len(payload))
    m.d.sync += [stalled.eq(valid & ~ready), previous.eq(payload)]
    rule = valid & (payload == previous)
    with m.If(started & stalled):
        m.d.comb += Assume(rule) if assume else Assert(rule)


def _bounded(m, started, waiting):
    """Assume ``waiting`` is never high for more than ``STALL`` consecutive cycles."""
    count = Signal(range(STALL + 2))
    m.d.sync += count.eq(0)
    with m.If(waiting):
        m.d.sync += count.eq(count + 1)
    with m.If(started):
        m.d.comb += Assume(count <= STALL)


def _harness(bounded):
    m = Module()
    m.submodules.dut = dut = AxilRegisters(MAP)
    started = reset_at_start(m)
    bus, mem = dut.s_axil, dut.mem
    free(m, bus.awaddr, bus.awprot, bus.awvalid, bus.wdata, bus.wstrb, bus.wvalid, bus.bready,
         bus.araddr, bus.arprot, bus.arvalid, bus.rready, dut.sense, dut.flags,
         mem.req.ready, mem.resp.valid, mem.resp.payload.as_value())

    # -- the manager: AXI4-Lite VALID rules ------------------------------------------------------
    _held(m, started, bus.awvalid, bus.awready, bus.awaddr, assume=True)
    _held(m, started, bus.wvalid, bus.wready, bus.wdata, assume=True)
    _held(m, started, bus.wvalid, bus.wready, bus.wstrb, assume=True)
    _held(m, started, bus.arvalid, bus.arready, bus.araddr, assume=True)
    with m.If(~started):
        m.d.comb += Assume(~bus.awvalid & ~bus.wvalid & ~bus.arvalid)

    # -- the core: answers each accepted request once, holding the answer until taken -----------
    pending = Signal()                 # a region request accepted and not yet answered
    req_hs = mem.req.valid & mem.req.ready
    resp_hs = mem.resp.valid & mem.resp.ready
    with m.If(req_hs):
        m.d.sync += pending.eq(1)
    with m.Elif(resp_hs):
        m.d.sync += pending.eq(0)
    m.d.comb += Assume(~mem.resp.valid | pending)
    _held(m, started, mem.resp.valid, mem.resp.ready, mem.resp.payload.as_value(), assume=True)

    if bounded:
        _bounded(m, started, mem.req.valid & ~mem.req.ready)
        _bounded(m, started, pending & ~mem.resp.valid)
        _bounded(m, started, bus.rvalid & ~bus.rready)
        _bounded(m, started, bus.bvalid & ~bus.bready)

    # -- the block's promises ----------------------------------------------------------------------
    r_word = Signal(34)
    m.d.comb += r_word.eq(bus.rdata | (bus.rresp << 32))
    _held(m, started, bus.rvalid, bus.rready, r_word, assume=False)
    _held(m, started, bus.bvalid, bus.bready, bus.bresp, assume=False)
    _held(m, started, mem.req.valid, mem.req.ready, mem.req.payload.as_value(), assume=False)

    reads, writes_aw, writes_w = Signal(2), Signal(2), Signal(2)   # outstanding requests
    ar_hs, r_hs = bus.arvalid & bus.arready, bus.rvalid & bus.rready
    aw_hs, w_hs, b_hs = bus.awvalid & bus.awready, bus.wvalid & bus.wready, bus.bvalid & bus.bready
    m.d.sync += [reads.eq(reads + ar_hs - r_hs), writes_aw.eq(writes_aw + aw_hs - b_hs),
                 writes_w.eq(writes_w + w_hs - b_hs)]
    with m.If(started):
        m.d.comb += [
            Assert(reads == ~bus.arready),
            Assert(writes_aw == ~bus.awready),
            Assert(writes_w == ~bus.wready),
            Assert(~bus.rvalid | (reads == 1)),
            Assert(~bus.bvalid | ((writes_aw == 1) & (writes_w == 1))),
            Assert(~(bus.rvalid & bus.bvalid)),
            Assert(~mem.req.valid | ~pending),
            Assert(pending == mem.resp.ready),              # waits for exactly the answer it is owed
            Assert(~pending | (reads == 1) | ((writes_aw == 1) & (writes_w == 1))),
            Assert(~mem.req.valid | (reads == 1) | ((writes_aw == 1) & (writes_w == 1))),
        ]

    # -- reachability ------------------------------------------------------------------------------
    from_region = Signal()
    with m.If(resp_hs):
        m.d.sync += from_region.eq(1)
    with m.Elif(r_hs | b_hs):
        m.d.sync += from_region.eq(0)
    m.d.comb += [
        Cover(started & r_hs & from_region & (bus.rdata == 0x1234_5678)),
        Cover(started & b_hs & from_region & (bus.bresp == RESP_OKAY)),
        Cover(started & r_hs & (bus.rdata == 0xA) & (bus.rresp == RESP_OKAY)),
        Cover(started & b_hs & (bus.bresp == RESP_SLVERR)),
        Cover(started & r_hs & (bus.rresp == RESP_SLVERR)),
        Cover(started & dut.ctrl.stb & dut.ctrl.data.go),
        Cover(started & dut.irq),
        Cover(started & (dut.val == 3)),
    ]
    return m


PROOFS = [
    Proof("tile_axil_registers_protocol", lambda: _harness(True), mode="prove", depth=24,
          description="AXI4-Lite VALID/payload rules on R and B, one response per request, region "
                      "stream rules, at most one region request (environment stalls <= 2 cycles)"),
    Proof("tile_axil_registers_unbounded", lambda: _harness(False), mode="bmc", depth=20,
          description="the same properties with an environment that may stall forever (bounded)"),
    Proof("tile_axil_registers_cover", lambda: _harness(False), mode="cover", depth=20,
          description="reachability: register and region reads and writes, SLVERR, strobe, irq"),
]
