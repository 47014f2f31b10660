"""cocotb testbench of :class:`rtl.tile.weight_port.WeightPort` behind cocotbext-axi's ``AxiRamRead``.

The port's ``m_axi`` (``m_axi__araddr``, ``m_axi__rdata``, ... in the Verilog: bus separator
``__``) reads a random memory image from an :class:`cocotbext.axi.AxiRamRead`, with random pauses
on its AR and R channels (cocotbext-axi pause generators); requests come with random idle cycles
and ``o`` is stalled at random. Every beat is compared bit-exactly, in order, with
:func:`verification.tile.axi4_memory.range_beats` through an in-order scoreboard; an AXI monitor
checks the port's side of the protocol and its promises (AR payload held until ARREADY, constant
ARID/ARSIZE/ARBURST/ARCACHE/ARPROT, no 4 KiB crossing, at most ``max_burst`` beats and
``max_outstanding`` bursts, RREADY high whenever RVALID is).

Seeds: the pause patterns and ranges come from Python's ``random``, which cocotb seeds from
``COCOTB_RANDOM_SEED`` (logged at start-up); each test logs the seed it derives its generators from.
"""

import logging
import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus

from rtl.common.axi import BURST_INCR
from rtl.tile.weight_port import ARCACHE, ARPROT, beat_layout, request_layout
from verification import config
from verification.bench import start_clock_and_reset, wait_until
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamSink
from verification.tile.axi4_memory import range_beats

IMAGE_BYTES = 4 * 4096
BOUNDARY = 4096


class _ErrorRam(AxiRamRead):
    """``AxiRamRead`` whose beats overlapping one of ``error_ranges`` answer SLVERR.

    cocotbext-axi answers SLVERR (with zero data) for a beat whose ``_read`` raises.
    """

    def __init__(self, *args, error_ranges=(), **kwargs):
        self.error_ranges = list(error_ranges)
        super().__init__(*args, **kwargs)

    async def _read(self, address, length):
        if any(start < address + length and address < end for start, end in self.error_ranges):
            raise OSError(f"injected SLVERR at {address:#x}")
        return await super()._read(address, length)


class AxiReadChecker:
    """Watches the AR and R channels of ``m_axi`` and fails on anything the port must not do."""

    def __init__(self, dut, *, data_bytes, max_burst, max_outstanding):
        self.dut = dut
        self.data_bytes = data_bytes
        self.max_burst = max_burst
        self.max_outstanding = max_outstanding
        self.outstanding = 0
        self.peak_outstanding = 0
        self.bursts = 0
        self.beats = 0
        self.cycle = 0
        self.first_ar = None           # cycle of the first AR handshake
        self.memory_latency = None     # cycles from it to the first R beat
        self.first_error_beat = None   # cycle of the first beat answering SLVERR or DECERR
        self.error_rise = None         # first cycle with the port's ``error`` high
        self._task = cocotb.start_soon(self._run())

    def _ar(self):
        d = self.dut
        return tuple(int(s.value) for s in (d.m_axi__arid, d.m_axi__araddr, d.m_axi__arlen, d.m_axi__arsize,
                                            d.m_axi__arburst, d.m_axi__arcache, d.m_axi__arprot))

    async def _run(self):
        d = self.dut
        size = self.data_bytes.bit_length() - 1
        held = None
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            if d.rst.value == 1:
                continue
            self.cycle += 1
            if self.error_rise is None and d.error.value == 1:
                self.error_rise = self.cycle
            arvalid = d.m_axi__arvalid.value == 1
            if held is not None:
                assert arvalid and self._ar() == held, \
                    f"ARVALID fell or the AR payload changed before ARREADY (held {held})"
                held = None
            if arvalid:
                arid, araddr, arlen, arsize, arburst, arcache, arprot = ar = self._ar()
                assert (arid, arsize, arburst, arcache, arprot) == (0, size, BURST_INCR, ARCACHE, ARPROT), \
                    f"AR attributes (arid, arsize, arburst, arcache, arprot) = {ar[:1] + ar[3:]}"
                assert arlen + 1 <= self.max_burst, f"burst of {arlen + 1} beats at {araddr:#x}"
                assert araddr % self.data_bytes == 0, f"burst address {araddr:#x} not beat-aligned"
                assert araddr % BOUNDARY + (arlen + 1) * self.data_bytes <= BOUNDARY, \
                    f"burst {araddr:#x}+{arlen + 1} beats crosses 4 KiB"
                if d.m_axi__arready.value == 1:
                    if self.first_ar is None:
                        self.first_ar = self.cycle
                    self.bursts += 1
                    self.outstanding += 1
                    self.peak_outstanding = max(self.peak_outstanding, self.outstanding)
                    assert self.outstanding <= self.max_outstanding, \
                        f"{self.outstanding} bursts outstanding, limit {self.max_outstanding}"
                else:
                    held = ar
            if d.m_axi__rvalid.value == 1:
                assert d.m_axi__rready.value == 1, "RREADY low while RVALID is high"
                if self.memory_latency is None:
                    self.memory_latency = self.cycle - self.first_ar
                if self.first_error_beat is None and int(d.m_axi__rresp.value) & 0b10:
                    self.first_error_beat = self.cycle
                self.beats += 1
                if d.m_axi__rlast.value == 1:
                    self.outstanding -= 1


def random_ranges(rng, count, data_bytes):
    """Random alignment and lengths: shorter than a beat, medium, long; a third across 4 KiB."""
    ranges = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.35:
            length = 4 * rng.randint(1, data_bytes // 4 + 1)
        elif kind < 0.85:
            length = 4 * rng.randint(1, 48)
        else:
            length = 4 * rng.randint(48, 200)
        if rng.random() < 0.33:
            page = rng.randint(1, IMAGE_BYTES // BOUNDARY - 1) * BOUNDARY
            addr = page - 4 * rng.randint(1, min(length // 4, 48))
        else:
            addr = 4 * rng.randint(0, (IMAGE_BYTES - length) // 4)
        ranges.append((addr, length))
    return ranges


def _pauses(rng, probability):
    """An endless pause pattern for a cocotbext-axi channel: paused with ``probability``."""
    while True:
        yield rng.random() < probability


class _Bench:
    """The port's surroundings, all driving their inputs before reset is released (on Icarus an
    undriven input seen in the first cycle after reset would leave X in the port's counters)."""

    def __init__(self, dut, *, r_pause=0.0, ar_pause=0.0, idle_prob=0.0, stall_prob=0.0, error_ranges=(),
                 callback=None):
        cfg = config()
        self.data_bytes = data_bytes = cfg.get("data_bytes", 8)
        seed = random.getrandbits(32)
        dut._log.info("generators seeded with %d (derived from this test's COCOTB_RANDOM_SEED)", seed)
        self.rng = rng = random.Random(seed)
        self.image = rng.randbytes(IMAGE_BYTES)
        bus = AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__")
        self.ram = _ErrorRam(bus, dut.clk, dut.rst, size=IMAGE_BYTES, error_ranges=error_ranges)
        self.ram.write(0, self.image)
        self.ram.log.setLevel(logging.WARNING)      # not a line per burst
        if r_pause:
            self.ram.r_channel.set_pause_generator(_pauses(random.Random(rng.getrandbits(32)), r_pause))
        if ar_pause:
            self.ram.ar_channel.set_pause_generator(_pauses(random.Random(rng.getrandbits(32)), ar_pause))
        self.checker = AxiReadChecker(dut, data_bytes=data_bytes, max_burst=cfg.get("max_burst", 16),
                                      max_outstanding=cfg.get("max_outstanding", 4))
        req_layout = request_layout(addr_bits=cfg.get("addr_bits", 40),
                                    length_bits=cfg.get("length_bits", 32))
        self.driver = StreamDriver(dut, "req", dut.clk, layout=req_layout, idle_prob=idle_prob,
                                   rng=random.Random(rng.getrandbits(32)))
        self.sink = StreamSink(dut, "o", dut.clk, layout=beat_layout(data_bytes=data_bytes),
                               stall_prob=stall_prob, rng=random.Random(rng.getrandbits(32)),
                               callback=callback)


def _fmt(beat):
    return f"(data={beat['data']:#x}, last={beat['last']})"


async def _run_ranges(dut, ranges, *, idle_prob, stall_prob, r_pause, ar_pause):
    scoreboard = InOrderScoreboard("weight_port.o", formatter=_fmt)
    bench = _Bench(dut, r_pause=r_pause, ar_pause=ar_pause, idle_prob=idle_prob, stall_prob=stall_prob,
                   callback=scoreboard.got)
    await start_clock_and_reset(dut)
    ranges = ranges(bench.rng, bench.data_bytes) if callable(ranges) else ranges
    for addr, length in ranges:
        for data, last in range_beats(bench.image, addr, length, bench.data_bytes):
            scoreboard.expect({"data": data, "last": int(last)})
        bench.driver.append({"addr": addr, "length": length})
    beats = scoreboard.pending
    budget = int(beats / (1 - stall_prob) / (1 - r_pause) * 3 + 40 * len(ranges)) + 500
    cycles = await wait_until(dut.clk, lambda: scoreboard.pending == 0, max_cycles=budget,
                              what="every beat delivered")
    assert scoreboard.finish() == beats
    await wait_until(dut.clk, lambda: dut.busy.value == 0, max_cycles=10, what="busy low after the last beat")
    checker = bench.checker
    assert dut.error.value == 0, "error raised without an error response"
    assert checker.outstanding == 0
    dut._log.info("%d ranges, %d beats in %d cycles (%d AXI bursts, %d AXI beats, peak %d outstanding)",
                  len(ranges), beats, cycles, checker.bursts, checker.beats, checker.peak_outstanding)
    return beats, cycles, checker


@cocotb.test()
async def random_ranges_with_backpressure(dut):
    """Random ranges (any alignment, shorter than a beat, across 4 KiB) under random pauses everywhere."""
    await _run_ranges(dut, lambda rng, db: random_ranges(rng, 100, db), idle_prob=0.3, stall_prob=0.3,
                      r_pause=0.3, ar_pause=0.3)


@cocotb.test()
async def random_ranges_full_speed(dut):
    """The same kind of ranges with no pause anywhere: checks the pipelined, back-to-back paths."""
    await _run_ranges(dut, lambda rng, db: random_ranges(rng, 100, db), idle_prob=0.0, stall_prob=0.0,
                      r_pause=0.0, ar_pause=0.0)


@cocotb.test()
async def long_ranges_rate(dut):
    """Aligned 1 KiB ranges back to back with cocotbext-axi's RAM.

    One beat per cycle with no gap (only the first beat's latency on top) where the port's window
    covers the RAM's latency, ``latency <= (max_outstanding - 1) * max_burst - 3``; otherwise at
    least the documented ``max_outstanding * max_burst / (latency + max_burst + 3)`` beats per cycle.
    """
    cfg = config()
    window, burst = cfg.get("max_outstanding", 4), cfg.get("max_burst", 16)
    ranges = [(1024 * k, 1024) for k in range(6)]
    beats, cycles, checker = await _run_ranges(dut, ranges, idle_prob=0.0, stall_prob=0.0, r_pause=0.0,
                                               ar_pause=0.0)
    latency = checker.memory_latency
    dut._log.info("RAM latency %d cycles; rate %.3f beats per cycle, the first beat's latency included",
                  latency, beats / cycles)
    if latency <= (window - 1) * burst - 3:
        assert cycles <= beats + latency + 8, f"{beats} beats took {cycles} cycles: gaps on o"
    else:
        bound = window * burst / (latency + burst + 3)
        assert beats / cycles >= 0.95 * bound, f"rate {beats / cycles:.3f}, documented {bound:.3f}"


@cocotb.test()
async def error_response(dut):
    """SLVERR on one beat of the second range: every beat still arrives, ``error`` rises and stays.

    The errored range's data is not compared (SLVERR data is undefined); its beat count and ``last``
    are, and so is every beat of the ranges around it.
    """
    data_bytes = config().get("data_bytes", 8)
    bad = (1024 + 8 * data_bytes, 1024 + 8 * data_bytes + 4)
    bench = _Bench(dut, r_pause=0.2, idle_prob=0.2, stall_prob=0.2, error_ranges=[bad])
    await start_clock_and_reset(dut)
    driver, sink, image, checker = bench.driver, bench.sink, bench.image, bench.checker
    ranges = [(0, 256), (1024, 256), (2048, 256)]
    per_range = 256 // data_bytes
    scoreboard = InOrderScoreboard("weight_port.o", formatter=_fmt)
    for addr, length in ranges:
        driver.append({"addr": addr, "length": length})
    await wait_until(dut.clk, lambda: sink.transfers == 3 * per_range, max_cycles=60 * per_range + 500,
                     what="every beat delivered, the errored range's included")
    beats = list(sink.items)
    for index in (0, 2):
        for data, last in range_beats(image, *ranges[index], data_bytes):
            scoreboard.expect({"data": data, "last": int(last)})
    for beat in beats[:per_range] + beats[2 * per_range:]:
        scoreboard.got(beat)
    assert scoreboard.finish() == 2 * per_range
    assert [b["last"] for b in beats[per_range:2 * per_range]] == [0] * (per_range - 1) + [1]
    assert checker.error_rise == checker.first_error_beat + 1, \
        f"error rose in cycle {checker.error_rise}, the SLVERR beat came in {checker.first_error_beat}"
    for _ in range(5):
        await RisingEdge(dut.clk)
    assert dut.error.value == 1 and dut.busy.value == 0 and checker.outstanding == 0
