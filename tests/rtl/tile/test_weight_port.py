"""WeightPort: Amaranth-simulator unit tests behind the AXI4 memory model.

Cycle numbering: every testbench samples at each rising edge, so sample ``k`` shows cycle ``k`` (the
memory model counts the same way). A request accepted in cycle ``t`` whose first beat leaves in
cycle ``t + d`` has latency ``d``.

Measured figures (default configuration, 8-byte beats, memory answering one beat per cycle, ``o``
always ready), each asserted below:

* latency from request to first ``o`` beat: memory latency + 5 cycles (+ 1 when ``addr`` is not a
  multiple of ``data_bytes``);
* long ranges on ``data_bytes`` boundaries: 1.00 beat per cycle, no gap between ranges, for a
  memory latency up to ``(max_outstanding - 1) * max_burst - 3`` = 45 cycles (the buffer entries
  of a burst are reserved ``latency + max_burst + 3`` cycles); at latency 60, 0.82 beat per cycle;
* one-beat ranges back to back: one per cycle (no gap) at memory latency 1; in general
  ``max_outstanding`` ranges per ``latency + 2`` cycles (latency 5: 64 ranges in 109 cycles);
* a range starting off a ``data_bytes`` boundary: one cycle more, unless the range before it also
  started off a boundary and ended with a beat of its last AXI beat alone.
"""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from rtl.common.axi import BURST_INCR, RESP_DECERR, Axi4ReadSignature
from rtl.tile.weight_port import ARCACHE, ARPROT, WeightPort
from verification.tile.axi4_memory import Axi4ReadMemory, AxiProtocolError, range_beats

IMAGE_BYTES = 3 * 4096 + 512


def make_image(seed=1, size=IMAGE_BYTES):
    return random.Random(seed).randbytes(size)


class Run:
    """One simulation: ``requests`` (``(addr, length)``) through a WeightPort behind an Axi4ReadMemory.

    Records the cycle of every request accepted (:attr:`accepted`), every ``o`` beat as ``(cycle,
    data, last)`` (:attr:`beats`), ``busy`` and ``error`` in every cycle, and keeps the memory model
    (:attr:`mem`) for its statistics. Fails when a stalled ``o`` changes, or when the beats do not
    all arrive within ``max_cycles``. ``tail`` cycles are simulated after the last beat.
    """

    def __init__(self, requests, image=None, *, port=None, latency=1, beats_per_cycle=1, queue_depth=16,
                 gap_prob=0.0, ar_stall_prob=0.0, idle_prob=0.0, stall_prob=0.0, seed=0, error_ranges=(),
                 max_cycles=None, o_ready=None, tail=0, clear_at=None):
        self.dut = dut = WeightPort(**(port or {}))
        self.image = make_image() if image is None else image
        self.requests = list(requests)
        rng = random.Random(seed)
        self.mem = Axi4ReadMemory(dut.m_axi, self.image, latency=latency, beats_per_cycle=beats_per_cycle,
                                  queue_depth=queue_depth, gap_prob=gap_prob, ar_stall_prob=ar_stall_prob,
                                  rng=random.Random(rng.getrandbits(32)), error_ranges=error_ranges,
                                  max_burst=dut.max_burst, expect_rready=True)
        self.expected = sum(-(-length // dut.data_bytes) for _, length in self.requests)
        self.accepted = []
        self.beats = []
        self.busy = []
        self.error = []
        limit = max_cycles or 200 + 20 * (self.expected + len(self.requests)) * (latency + 1)
        drive_rng = random.Random(rng.getrandbits(32))
        sink_rng = random.Random(rng.getrandbits(32))

        async def driver(ctx):
            cycle = 0
            for addr, length in self.requests:
                while idle_prob and drive_rng.random() < idle_prob:
                    ctx.set(dut.req.valid, 0)
                    await ctx.tick()
                    cycle += 1
                ctx.set(dut.req.payload, {"addr": addr, "length": length})
                ctx.set(dut.req.valid, 1)
                while True:
                    _, _, ready = await ctx.tick().sample(dut.req.ready)
                    cycle += 1
                    if ready:
                        break
                self.accepted.append(cycle - 1)
            ctx.set(dut.req.valid, 0)

        async def sink(ctx):
            held = None
            remaining_tail = tail
            for cycle in range(limit):
                ready = o_ready(cycle) if o_ready is not None else \
                    not (stall_prob and sink_rng.random() < stall_prob)
                ctx.set(dut.o.ready, int(ready))
                ctx.set(dut.clear_error, int(cycle == clear_at))
                _, _, valid, data, last, busy, error = await ctx.tick().sample(
                    dut.o.valid, dut.o.payload.data, dut.o.payload.last, dut.busy, dut.error)
                self.busy.append(busy)
                self.error.append(error)
                if held is not None:
                    assert valid and (data, last) == held, f"o changed while stalled in cycle {cycle}"
                held = None
                if valid and ready:
                    self.beats.append((cycle, data, bool(last)))
                elif valid:
                    held = (data, last)
                if len(self.beats) == self.expected:
                    if remaining_tail == 0:
                        return
                    remaining_tail -= 1
            raise AssertionError(f"only {len(self.beats)} of {self.expected} beats in {limit} cycles")

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(self.mem.process, background=True)
        sim.add_testbench(driver, background=True)
        sim.add_testbench(sink)
        sim.run()

    def check_data(self):
        """Every beat equals the reference, in request order, ``last`` where a range ends."""
        want = [b for addr, length in self.requests
                for b in range_beats(self.image, addr, length, self.dut.data_bytes)]
        got = [(data, last) for _, data, last in self.beats]
        assert len(got) == len(want)
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g == w, f"beat {index}: got ({g[0]:#x}, last={g[1]}), want ({w[0]:#x}, last={w[1]})"
        return self

    def first_beats(self):
        """Cycle of the first ``o`` beat of each range."""
        firsts, start = [], True
        for cycle, _, last in self.beats:
            if start:
                firsts.append(cycle)
            start = last
        return firsts

    @property
    def span(self):
        """Cycles from the first ``o`` beat to the last, both included."""
        return self.beats[-1][0] - self.beats[0][0] + 1


# --- Contract of the data -------------------------------------------------------------------------

@pytest.mark.parametrize("data_bytes", [4, 8, 16])
def test_every_alignment_and_length(data_bytes):
    """Every word offset within a beat and every length up to three beats, back to back."""
    requests = [(4096 - 2 * data_bytes + offset, length)
                for offset in range(0, data_bytes, 4)
                for length in range(4, 3 * data_bytes + 8, 4)]
    requests = [(addr + 64 * index, length) for index, (addr, length) in enumerate(requests)]
    random.Random(data_bytes).shuffle(requests)
    Run(requests, port={"data_bytes": data_bytes}, latency=2).check_data()


@pytest.mark.parametrize("data_bytes", [4, 8, 16])
def test_every_alignment_under_stalls(data_bytes):
    """The same ranges with idle requests, R gaps, slow AR and a stalling ``o``."""
    requests = [(1000 + 16 * index + offset, length)
                for index, (offset, length) in enumerate(
                    (o, n) for o in range(0, data_bytes, 4) for n in range(4, 2 * data_bytes + 8, 4))]
    Run(requests, port={"data_bytes": data_bytes}, latency=3, gap_prob=0.3, ar_stall_prob=0.3,
        idle_prob=0.3, stall_prob=0.4, seed=data_bytes).check_data()


def test_short_range_is_zero_padded_and_last():
    """Four bytes from the middle of a beat: one beat, ``last``, zeros above the range."""
    image = bytes(range(256)) * 4
    run = Run([(4, 4), (8, 12), (0, 4)], image, latency=2).check_data()
    assert [(d, last) for _, d, last in run.beats] == [
        (0x07060504, True), (0x0F0E0D0C0B0A0908, False), (0x13121110, True), (0x03020100, True)]


def test_last_marks_every_range_end():
    requests = [(0, 64), (4, 60), (12, 4), (16, 8), (4092, 16)]
    run = Run(requests, latency=2).check_data()
    lasts = [index for index, (_, _, last) in enumerate(run.beats) if last]
    ends = []
    total = 0
    for _, length in requests:
        total += -(-length // 8)
        ends.append(total - 1)
    assert lasts == ends


# --- AXI side -------------------------------------------------------------------------------------

def test_ar_constants():
    dut = WeightPort(data_bytes=16)

    async def tb(ctx):
        assert ctx.get(dut.m_axi.arsize) == 4
        assert ctx.get(dut.m_axi.arburst) == BURST_INCR
        assert ctx.get(dut.m_axi.arcache) == ARCACHE == 0b0011
        assert ctx.get(dut.m_axi.arprot) == ARPROT == 0b000
        assert ctx.get(dut.m_axi.arid) == 0
        assert ctx.get(dut.m_axi.rready) == 1
        assert not ctx.get(dut.busy) and not ctx.get(dut.error) and not ctx.get(dut.m_axi.arvalid)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_4k_boundary_splits_bursts():
    """Bursts stop at max_burst beats and at every 4 KiB boundary, and start beat-aligned."""
    run = Run([(4096 - 20, 48), (2 * 4096 - 132, 300)], latency=2).check_data()
    assert [(addr, arlen + 1) for _, addr, arlen in run.mem.bursts] == [
        (4096 - 24, 3), (4096, 4),                                  # 4072..4095 | 4096..4127
        (2 * 4096 - 136, 16), (2 * 4096 - 8, 1), (2 * 4096, 16), (2 * 4096 + 128, 5)]


def test_long_range_uses_full_bursts():
    run = Run([(0, 4096)], latency=2).check_data()
    assert [(addr, arlen) for _, addr, arlen in run.mem.bursts] == [(128 * k, 15) for k in range(32)]


@pytest.mark.parametrize("max_outstanding", [1, 2, 4])
def test_max_outstanding_respected(max_outstanding):
    """A slow memory with room for 16 bursts sees exactly ``max_outstanding`` at most."""
    requests = [(64 * k, 64) for k in range(24)]
    run = Run(requests, port={"max_outstanding": max_outstanding, "max_burst": 4}, latency=30,
              queue_depth=16).check_data()
    assert run.mem.peak_outstanding == max_outstanding


def test_stalled_output_never_stalls_the_r_channel():
    """With ``o`` stalled, the port requests no more beats than its buffer holds; RREADY stays high.

    The memory model fails on RREADY low (``expect_rready``). Beats requested while ``o`` is stalled
    for 300 cycles: ``buffer_depth`` (the beat that went on to the ``o`` register freed one entry,
    not a burst's worth).
    """
    port = {"max_outstanding": 2, "max_burst": 4}
    run = Run([(0, 1024), (4, 1024)], port=port, latency=3, o_ready=lambda cycle: cycle >= 300).check_data()
    requested = sum(arlen + 1 for cycle, _, arlen in run.mem.bursts if cycle < 300)
    assert requested == run.dut.buffer_depth == 8
    assert run.beats[0][0] == 300


# --- Errors, busy ---------------------------------------------------------------------------------

def test_error_is_sticky_and_the_range_completes():
    """SLVERR on one beat of the second range: every beat still arrives, ``error`` rises and stays."""
    requests = [(0, 256), (1000, 128), (2048, 256)]
    run = Run(requests, latency=4, error_ranges=[(1040, 1044)], tail=10)
    assert len(run.beats) == 32 + 16 + 32
    rise = run.error.index(1)
    assert all(run.error[rise:])
    # The errored beat enters the port after the first range has started leaving on o.
    assert run.first_beats()[1] - 8 < rise < run.first_beats()[2]
    # Beats of the other ranges are intact.
    got = run.beats[:32] + run.beats[48:]
    want = range_beats(run.image, 0, 256, 8) + range_beats(run.image, 2048, 256, 8)
    assert [(d, last) for _, d, last in got] == want


def test_clear_error():
    """``clear_error`` drops a sticky error, which stays low without another error beat."""
    requests = [(1000, 128), (2048, 256)]
    run = Run(requests, latency=4, error_ranges=[(1040, 1044)], tail=10, clear_at=60)
    first = run.error.index(1)
    assert first < 60 and all(run.error[first:61]) and not any(run.error[61:])


def test_decode_error_outside_memory():
    image = make_image(size=4096)
    run = Run([(4096 - 16, 64), (0, 16)], image, latency=2, tail=2)
    assert len(run.beats) == 8 + 2
    assert run.error[-1] == 1
    assert [(d, last) for _, d, last in run.beats[8:]] == range_beats(image, 0, 16, 8)
    assert RESP_DECERR == 0b11


def test_busy_from_accept_to_last_beat():
    run = Run([(0, 64), (128, 64)], latency=6, tail=5)
    accepted = run.accepted[0]
    last_beat = run.beats[-1][0]
    assert not any(run.busy[:accepted + 1])
    assert all(run.busy[accepted + 1:last_beat + 1])
    assert not any(run.busy[last_beat + 1:])


# --- Latency and throughput (the documented figures) ----------------------------------------------

@pytest.mark.parametrize("latency", [1, 7, 20])
def test_latency(latency):
    aligned = Run([(256, 64)], latency=latency).check_data()
    assert aligned.first_beats()[0] - aligned.accepted[0] == latency + 5
    unaligned = Run([(260, 64)], latency=latency).check_data()
    assert unaligned.first_beats()[0] - unaligned.accepted[0] == latency + 6


@pytest.mark.parametrize("latency", [1, 20, 45])
def test_long_ranges_one_beat_per_cycle(latency):
    """Aligned 1 KiB ranges back to back: one beat per cycle, no gap, up to latency 45."""
    run = Run([(1024 * k, 1024) for k in range(6)], latency=latency).check_data()
    assert run.span == len(run.beats) == 768


def test_long_ranges_beyond_the_outstanding_window():
    """Latency 46 and 60: four bursts of 16 beats no longer cover a round trip."""
    assert Run([(1024 * k, 1024) for k in range(6)], latency=46).span > 768
    run = Run([(1024 * k, 1024) for k in range(8)], latency=60)
    assert 0.81 < len(run.beats) / run.span < 0.83


@pytest.mark.parametrize("data_bytes", [4, 8])
def test_short_ranges_back_to_back(data_bytes):
    """One-beat ranges: accepted and delivered one per cycle at latency 1; four per ``latency + 2``
    cycles at latency 5."""
    requests = [(64 * k, data_bytes) for k in range(64)]
    fast = Run(requests, port={"data_bytes": data_bytes}, latency=1).check_data()
    assert fast.span == 64
    assert fast.accepted == list(range(64))              # a request accepted every cycle
    slow = Run(requests, port={"data_bytes": data_bytes}, latency=5).check_data()
    assert slow.span == (64 // 4 - 1) * (5 + 2) + 4
    assert slow.mem.peak_outstanding == 4


def test_unaligned_ranges_cost_one_cycle_unless_merged():
    """Off-boundary ranges whose last o beat needs the next AXI beat: one bubble each; ranges whose
    last beat comes from one AXI beat hand their final cycle to the next range's first AXI beat."""
    spill = Run([(4 + 1024 * k, 1024) for k in range(8)], latency=2).check_data()
    assert spill.span == 1024 + 7
    flush = Run([(4 + 1024 * k, 1020) for k in range(8)], latency=2).check_data()
    assert flush.span == 1024
    mixed = Run([(0, 64), (4, 60), (64, 64)], latency=2).check_data()
    assert mixed.span == 24 + 1


def test_bandwidth_limits_the_rate():
    """A memory of half a beat per cycle gives half a beat per cycle."""
    run = Run([(0, 2048)], latency=4, beats_per_cycle=0.5).check_data()
    assert run.span == 2 * 256 - 1


# --- Random ranges --------------------------------------------------------------------------------

def random_requests(rng, count, data_bytes, image_bytes=IMAGE_BYTES):
    """Random alignment and lengths: many shorter than a beat, some long, some across 4 KiB."""
    requests = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.4:
            length = 4 * rng.randint(1, data_bytes // 4 + 1)
        elif kind < 0.8:
            length = 4 * rng.randint(1, 64)
        else:
            length = 4 * rng.randint(64, 400)
        if rng.random() < 0.3:
            page = rng.randint(1, image_bytes // 4096 - 1) * 4096
            addr = page - 4 * rng.randint(1, min(length // 4, 64))
        else:
            addr = 4 * rng.randint(0, (image_bytes - length) // 4)
        requests.append((addr, length))
    return requests


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
@pytest.mark.parametrize("data_bytes", [4, 8, 16])
def test_random_ranges(seed, data_bytes):
    rng = random.Random(seed * 100 + data_bytes)
    print(f"seed {seed}, data_bytes {data_bytes}")
    port = {"data_bytes": data_bytes, "max_burst": rng.choice([1, 4, 16]),
            "max_outstanding": rng.choice([1, 2, 4])}
    Run(random_requests(rng, 40, data_bytes), port=port, latency=rng.randint(1, 12),
        beats_per_cycle=rng.choice([1, 0.5, 0.75]), gap_prob=0.2, ar_stall_prob=0.2, idle_prob=0.3,
        stall_prob=0.3, seed=seed).check_data()


# --- Parameters -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"data_bytes": 2}, "data_bytes must be an integer of at least 4"),
    ({"data_bytes": 12}, "data_bytes must be a power of two from 4 to 128"),
    ({"data_bytes": 256}, "data_bytes must be a power of two from 4 to 128"),
    ({"addr_bits": 11}, "addr_bits must be an integer of at least 12"),
    ({"addr_bits": 65}, "addr_bits must be from 12 to 64"),
    ({"max_burst": 0}, "max_burst must be an integer of at least 1"),
    ({"max_burst": 257, "data_bytes": 4}, "max_burst must be at most 256"),
    ({"max_burst": 64, "data_bytes": 128}, "max_burst must be at most 32"),
    ({"max_outstanding": 0}, "max_outstanding must be an integer of at least 1"),
    ({"max_outstanding": True}, "max_outstanding must be an integer of at least 1"),
    ({"length_bits": 2}, "length_bits must be an integer of at least 3"),
    ({"length_bits": 65}, "length_bits must be from 3 to 64"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WeightPort(**kwargs)


def test_properties():
    dut = WeightPort(data_bytes=16, addr_bits=34, max_burst=8, max_outstanding=3, length_bits=20)
    assert (dut.data_bytes, dut.addr_bits, dut.max_burst, dut.max_outstanding, dut.length_bits) == \
        (16, 34, 8, 3, 20)
    assert dut.buffer_depth == 24 and dut.descriptor_depth == 5
    assert dut.m_axi.signature == Axi4ReadSignature(addr_bits=34, data_bits=128, id_bits=1)
    assert len(dut.req.payload.addr) == 34 and len(dut.req.payload.length) == 20
    assert len(dut.o.payload.data) == 128
    Simulator(dut)                                   # elaborated: no unused-component warning


# --- The memory model's own checks ----------------------------------------------------------------

def _drive_model(script, **kwargs):
    """Drive a bare AXI4 read port cycle by cycle from ``script`` (a list of dicts of manager outputs)
    against the model; returns the model."""
    bus = Axi4ReadSignature(addr_bits=16, data_bits=64).create()
    m = Module()
    tick = Signal()
    m.d.sync += tick.eq(~tick)
    mem = Axi4ReadMemory(bus, bytes(8192), **kwargs)

    async def tb(ctx):
        ctx.set(bus.arsize, 3)
        ctx.set(bus.arburst, BURST_INCR)
        ctx.set(bus.rready, 1)
        for values in script:
            for name, value in values.items():
                ctx.set(getattr(bus, name), value)
            await ctx.tick()
        for _ in range(40):
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(mem.process, background=True)
    sim.add_testbench(tb)
    sim.run()
    return mem


@pytest.mark.parametrize("script, kwargs, message", [
    ([{"arvalid": 1, "araddr": 4096 - 16, "arlen": 2}], {}, "crosses the 4 KiB boundary"),
    ([{"arvalid": 1, "arlen": 16}], {"max_burst": 16}, "17 beats, more than the limit of 16"),
    ([{"arvalid": 1, "arsize": 2}], {}, "ARSIZE 2, expected 3"),
    ([{"arvalid": 1, "arburst": 0}], {}, "ARBURST"),
    ([{"arvalid": 1, "araddr": 8}, {"arvalid": 0}], {"queue_depth": 1, "latency": 50}, "ARVALID fell"),
    ([{"arvalid": 1, "araddr": 8}, {"araddr": 16}], {"queue_depth": 1, "latency": 50}, "payload changed"),
    ([{"arvalid": 1}, {"arvalid": 0, "rready": 0}], {"expect_rready": True}, "RREADY low"),
])
def test_memory_model_catches_protocol_errors(script, kwargs, message):
    """Each rule of the model fires (queue_depth 1 with a slow memory keeps ARREADY low for the
    second burst of the ARVALID cases)."""
    if "ARVALID" in message or "payload" in message:
        script = [{"arvalid": 1, "araddr": 0}] + script
    with pytest.raises(AxiProtocolError, match=message):
        _drive_model(script, **kwargs)


def test_memory_model_latency_and_bandwidth():
    """First beat ``latency`` cycles after the AR handshake; one beat per 1/beats_per_cycle cycles."""
    bus = Axi4ReadSignature(addr_bits=16, data_bits=32).create()
    m = Module()
    tick = Signal()
    m.d.sync += tick.eq(~tick)
    image = bytes(range(256))
    mem = Axi4ReadMemory(bus, image, latency=9, beats_per_cycle=0.25)
    seen = []

    async def tb(ctx):
        ctx.set(bus.rready, 1)
        ctx.set(bus.arsize, 2)
        ctx.set(bus.arburst, BURST_INCR)
        ctx.set(bus.araddr, 16)
        ctx.set(bus.arlen, 3)
        ctx.set(bus.arvalid, 1)
        for cycle in range(40):
            _, _, arready, rvalid, rdata, rlast, rresp = await ctx.tick().sample(
                bus.arready, bus.rvalid, bus.rdata, bus.rlast, bus.rresp)
            if arready:
                ctx.set(bus.arvalid, 0)
            if rvalid:
                seen.append((cycle, rdata, rlast, rresp))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(mem.process, background=True)
    sim.add_testbench(tb)
    sim.run()
    assert [c for c, *_ in seen] == [9, 13, 17, 21]
    assert [d for _, d, _, _ in seen] == [int.from_bytes(image[a:a + 4], "little") for a in (16, 20, 24, 28)]
    assert [last for _, _, last, _ in seen] == [0, 0, 0, 1]
    assert mem.bandwidth == 1
    assert mem.bursts == [(0, 16, 3)]


@pytest.mark.parametrize("kwargs", [{"latency": 0}, {"beats_per_cycle": 0}, {"beats_per_cycle": 1.5},
                                    {"gap_prob": 0.5}, {"queue_depth": 0}, {"max_burst": 300}])
def test_memory_model_rejects_bad_parameters(kwargs):
    bus = Axi4ReadSignature(addr_bits=16, data_bits=64).create()
    with pytest.raises(ValueError):
        Axi4ReadMemory(bus, b"", **kwargs)
