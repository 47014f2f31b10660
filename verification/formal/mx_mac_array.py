"""Stream-protocol properties of :class:`rtl.mx.mac_array.MacArray` (1 x 1, two slots, small buffer).

The environment drives every input stream freely but legally (once valid, valid and payload hold
until the transfer; the solver chooses command lengths of 1..3 blocks and whether C is supplied).
The operand payloads are held at zero: the properties are about flow control, and the arithmetic is
checked by simulation against the golden model and by the accumulate-adder proof.
The array must then:

* keep ``o`` legal: once valid, ``o.valid`` and ``o.payload`` hold until the transfer;
* take operands consistently: an A beat only with the last B beat of a block, a C beat only with a
  first-block B beat of a tile that has C, never an operand with no tile in progress;
* neither lose nor duplicate results: every tile yields exactly ``interleave`` result beats, in
  order, with ``last`` on the final one (the count of result beats delivered never exceeds the
  beats owed by the tiles issued, and ``last`` falls exactly on every ``interleave``-th beat).

Bounded (BMC): the tile pipeline is deeper than an induction step could see through. A cover task
shows a complete tile delivered after the output stalled, so the checks are not vacuous.
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Signal

from rtl.mx.mac_array import MacArray

from .proof import Proof, free, reset_at_start

SLOTS = 2


def _stable(m, started, stream, name):
    """Signals ``held`` (valid and not ready last cycle) and the payload then."""
    held = Signal(name=f"{name}_held")
    last = Signal.like(stream.payload, name=f"{name}_last")
    m.d.sync += [held.eq(stream.valid & ~stream.ready), last.eq(stream.payload)]
    return started & held, last


def _harness(cover):
    m = Module()
    m.submodules.dut = dut = MacArray(1, 1, interleave=SLOTS, result_depth=2)
    started = reset_at_start(m)
    streams = {"cmd": dut.cmd, "a": dut.a, "b": dut.b, "c": dut.c}
    for stream in streams.values():
        free(m, stream.valid)
    # The A, B and C payloads stay zero (undriven inputs are constant), which folds the arithmetic
    # away: these properties are about flow control. The `last` flags of the results still depend
    # on the control path, so the stability check below is not trivial.
    free(m, dut.cmd.payload.as_value(), dut.o.ready)

    # Environment: legal producers, short tiles.
    for name, stream in streams.items():
        held, last = _stable(m, started, stream, name)
        with m.If(held):
            m.d.comb += Assume(stream.valid & (stream.payload.as_value() == last.as_value()))
    m.d.comb += Assume((dut.cmd.payload.blocks >= 1) & (dut.cmd.payload.blocks <= 3))

    # The design's promise on o.
    held, last = _stable(m, started, dut.o, "o")
    with m.If(held):
        m.d.comb += Assert(dut.o.valid & (dut.o.payload.as_value() == last.as_value()))

    # Operand consistency, from the stream transfers alone.
    fire = {name: s.valid & s.ready for name, s in streams.items()}
    o_fire = dut.o.valid & dut.o.ready
    active = Signal()            # a tile in progress (per the commands and B beats seen)
    blocks = Signal(2)
    has_c = Signal()
    block = Signal(2)
    slot = Signal(range(SLOTS))
    tile_end = fire["b"] & (block + 1 >= blocks) & (slot == SLOTS - 1)
    with m.If(fire["b"]):
        m.d.sync += slot.eq(slot + 1)
        with m.If(slot == SLOTS - 1):
            m.d.sync += [slot.eq(0), block.eq(block + 1)]
    with m.If(fire["cmd"]):
        m.d.sync += [active.eq(1), blocks.eq(dut.cmd.payload.blocks), has_c.eq(dut.cmd.payload.has_c),
                     block.eq(0), slot.eq(0)]
    with m.Elif(tile_end):
        m.d.sync += active.eq(0)
    with m.If(started):
        m.d.comb += [
            Assert(~fire["b"] | active),
            Assert(fire["a"] == (fire["b"] & (slot == SLOTS - 1))),
            Assert(fire["c"] == (fire["b"] & (block == 0) & has_c)),
            Assert(~fire["cmd"] | ~active | tile_end),
        ]

    # No loss, no duplication: result beats owed vs delivered, and `last` placement.
    owed = Signal(6)             # result beats of the tiles whose last block has been issued
    delivered = Signal(6)
    m.d.sync += owed.eq(owed + (fire["b"] & (block + 1 >= blocks)))
    with m.If(o_fire):
        m.d.sync += delivered.eq(delivered + 1)
    with m.If(started):
        m.d.comb += Assert(delivered <= owed)
        with m.If(o_fire):
            m.d.comb += Assert(dut.o.payload.last == (delivered[0] == SLOTS - 1))

    if cover:
        stalled = Signal()
        with m.If(started & dut.o.valid & ~dut.o.ready):
            m.d.sync += stalled.eq(1)
        m.d.comb += Cover(started & stalled & o_fire & dut.o.payload.last & (delivered == 3))
    return m


PROOFS = [
    Proof("mx_mac_array_protocol", lambda: _harness(False), mode="bmc", depth=24,
          description="o stable while stalled; operand consistency; no lost or duplicated results"),
    Proof("mx_mac_array_cover", lambda: _harness(True), mode="cover", depth=36,
          description="reachability: a second tile's last result delivered after an output stall"),
]
