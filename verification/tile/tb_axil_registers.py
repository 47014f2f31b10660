"""cocotb testbench of :class:`rtl.tile.axil_registers.AxilRegisters` built from the tile's map.

The host side is cocotbext-axi's ``AxiLiteMaster`` with random pauses on all five channels (so AW
and W arrive in every order, and R and B see backpressure), reached through the project's own host
driver (:class:`poblano.host.tile_registers.AsyncRegisters` over ``AxiLiteTransport``): the driver
is tested here too. The reference is :class:`poblano.host.tile_registers.RegisterBlockModel`; the
core side is played by the testbench: random values on the ``ro`` ports, set pulses on
``IRQ_STATUS``, a monitor of the ``CTRL`` strobe, and one responder per region that answers each
request after a random number of cycles, with random ``ready`` stalls. A checker enforces the
AXI4-Lite rules on the block's outputs (a response holds, unchanged, until accepted; one response
per request, never before the request).

Configuration (``verification.config()``): the build parameters of
:func:`rtl.tile.register_map.tile_register_map` (``spad_words``, ``prog_words``).
"""

import logging
import random

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from poblano.host.tile_registers import (
    AsyncRegisters,
    AxiLiteTransport,
    BusError,
    RegisterBlockModel,
    program_words,
)
from rtl.tile.layouts import host_region_signature
from rtl.tile.register_map import CONST, RO, RW, STROBE, W1C, tile_register_map
from sim_models.tile_isa import Instruction
from verification import config
from verification.bench import start_clock_and_reset
from verification.stream import StreamDriver, StreamSink

# The watchdog of every test: a block that stops answering fails the test instead of hanging it (the
# longest test runs about 40 us of simulated time).
WATCHDOG_US = 400


def _pauses(rng, prob):
    while True:
        yield rng.random() < prob


class AxiLiteChecker:
    """Checks the subordinate's side of AXI4-Lite on ``<prefix>__*`` every cycle."""

    def __init__(self, dut, prefix="s_axil"):
        self.s = {name: getattr(dut, f"{prefix}__{name}") for name in (
            "awvalid", "awready", "wvalid", "wready", "bvalid", "bready", "bresp",
            "arvalid", "arready", "rvalid", "rready", "rdata", "rresp")}
        self.clk = dut.clk
        self.counts = dict.fromkeys(("aw", "w", "b", "ar", "r"), 0)
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        s = self.s
        held_r = held_b = None
        while True:
            await RisingEdge(self.clk)
            await ReadOnly()
            v = {name: int(sig.value) for name, sig in s.items()}
            if held_r is not None:
                assert v["rvalid"] and (v["rdata"], v["rresp"]) == held_r, "R changed while stalled"
            if held_b is not None:
                assert v["bvalid"] and v["bresp"] == held_b, "B changed while stalled"
            held_r = (v["rdata"], v["rresp"]) if v["rvalid"] and not v["rready"] else None
            held_b = v["bresp"] if v["bvalid"] and not v["bready"] else None
            c = self.counts
            # a response never comes before its request has been accepted (in an earlier cycle)
            if v["rvalid"]:
                assert c["r"] < c["ar"], "RVALID without an outstanding read"
            if v["bvalid"]:
                assert c["b"] < min(c["aw"], c["w"]), "BVALID without an outstanding write"
            for channel, valid, ready in (("aw", "awvalid", "awready"), ("w", "wvalid", "wready"),
                                          ("ar", "arvalid", "arready"), ("r", "rvalid", "rready"),
                                          ("b", "bvalid", "bready")):
                if v[valid] and v[ready]:
                    c[channel] += 1
            assert c["ar"] - c["r"] <= 1 and min(c["aw"], c["w"]) - c["b"] <= 1


class RegionResponder:
    """The core side of one region: a memory answering each request after 0..``max_latency`` cycles."""

    def __init__(self, dut, region, rng, *, max_latency, stall_prob, idle_prob):
        sig = host_region_signature(region.words)
        self.region = region
        self.rng = rng
        self.max_latency = max_latency
        self.clk = dut.clk
        self.memory = {}
        self.requests = 0
        self.sink = StreamSink(dut, f"{region.port_name}__req", dut.clk, stall_prob=stall_prob,
                               layout=sig.members["req"].signature.members["payload"].shape,
                               rng=random.Random(rng.getrandbits(32)))
        self.driver = StreamDriver(dut, f"{region.port_name}__resp", dut.clk, idle_prob=idle_prob,
                                   layout=sig.members["resp"].signature.members["payload"].shape,
                                   rng=random.Random(rng.getrandbits(32)))
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            req = await self.sink.receive()
            self.requests += 1
            assert req["addr"] < self.region.words, f"{self.region.name}: request beyond the region"
            if req["write"]:
                self.memory[req["addr"]] = req["data"]
            else:
                assert req["data"] == 0
            latency = self.rng.randint(0, self.max_latency)
            if latency:
                await ClockCycles(self.clk, latency)
            data = 0 if req["write"] else self.memory.get(req["addr"], 0)
            await self.driver.send({"data": data})


class Bench:
    def __init__(self, dut, *, pause_prob=0.3, max_latency=6):
        self.dut = dut
        self.rng = random.Random(random.getrandbits(32))
        self.map = tile_register_map(**config())
        self.model = RegisterBlockModel(self.map)
        bus = AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__")
        self.master = AxiLiteMaster(bus, dut.clk, dut.rst)
        self.master.write_if.log.setLevel(logging.WARNING)     # no line per transaction
        self.master.read_if.log.setLevel(logging.WARNING)
        for channel in (self.master.write_if.aw_channel, self.master.write_if.w_channel,
                        self.master.write_if.b_channel, self.master.read_if.ar_channel,
                        self.master.read_if.r_channel):
            channel.set_pause_generator(_pauses(random.Random(self.rng.getrandbits(32)), pause_prob))
        self.regs = AsyncRegisters(AxiLiteTransport(self.master), self.map)
        self.checker = AxiLiteChecker(dut)
        self.responders = {r.name: RegionResponder(dut, r, random.Random(self.rng.getrandbits(32)),
                                                    max_latency=max_latency, stall_prob=0.3,
                                                    idle_prob=0.2)
                           for r in self.map.regions}
        self.strobes = []
        self._strobe_task = cocotb.start_soon(self._watch_strobes())
        for reg in self.map.registers:
            if reg.access in (RO, W1C):
                getattr(dut, reg.port_name).value = 0

    async def start(self):
        await start_clock_and_reset(self.dut)

    async def _watch_strobes(self):
        ports = [(r.name, getattr(self.dut, f"{r.port_name}__stb"), getattr(self.dut, f"{r.port_name}__data"))
                 for r in self.map.registers if r.access == STROBE]
        while True:
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            for name, stb, data in ports:
                if int(stb.value):
                    self.strobes.append((name, int(data.value)))
                else:
                    assert int(data.value) == 0, f"{name}: data outside the strobe cycle"

    async def set_ro(self, reg, value):
        await RisingEdge(self.dut.clk)
        getattr(self.dut, reg.port_name).value = value & reg.mask
        self.model.inputs[reg.name] = value & reg.mask

    async def pulse(self, reg, bits):
        port = getattr(self.dut, reg.port_name)
        await RisingEdge(self.dut.clk)
        port.value = bits & reg.mask
        await RisingEdge(self.dut.clk)
        port.value = 0
        self.model.pulse(reg.name, bits)
        await RisingEdge(self.dut.clk)                     # the state register has taken the bits

    async def check_readable(self):
        for reg in self.map.registers:
            if reg.readable:
                got = await self.regs[reg.name].read()
                want = self.model.read32(reg.offset)
                assert got == want, f"{reg.name}: read {got:#x}, model {want:#x}"
        assert int(self.dut.irq.value) == self.model.irq


@cocotb.test(timeout_time=WATCHDOG_US, timeout_unit="us")
async def reset_values_and_constants(dut):
    """After reset every register reads as the table says; ID, VERSION and CONFIG as built."""
    bench = Bench(dut)
    await bench.start()
    regs = bench.regs
    assert await regs.id.read() == 0x4E4C4250
    assert await regs.version.major.read() == 1
    cfg = config()
    assert await regs.spad_words.read() == cfg["spad_words"]
    assert await regs.prog_words.read() == cfg["prog_words"]
    await bench.check_readable()


@cocotb.test(timeout_time=WATCHDOG_US, timeout_unit="us")
async def random_register_traffic(dut):
    """Random accesses of every kind, through the driver, checked against the model."""
    bench = Bench(dut)
    await bench.start()
    rng, regs, model = bench.rng, bench.regs, bench.model
    registers = bench.map.registers
    irq_high = 0
    for _ in range(400):
        reg = rng.choice(registers)
        action = rng.random()
        if reg.access == RO and action < 0.5:
            await bench.set_ro(reg, rng.getrandbits(32))
        elif reg.access == W1C and action < 0.4:
            await bench.pulse(reg, rng.getrandbits(reg.width))
        elif reg.access in (CONST, RO) and action < 0.6:
            value = rng.getrandbits(32)
            await regs.write32(reg.offset, value)                 # accepted and ignored
            model.write32(reg.offset, value)
        elif reg.writable and action < 0.7:
            value = rng.getrandbits(32) & reg.mask
            if reg.access == W1C:
                value &= rng.getrandbits(reg.width)
            await regs[reg.name].write(value)
            model.write32(reg.offset, value)
        elif reg.access == RW and reg.fields and action < 0.8:
            f = rng.choice(reg.fields)
            value = rng.getrandbits(f.width)
            await regs[reg.name].field(f.name).write(value)        # read-modify-write
            old = model.read32(reg.offset)
            model.write32(reg.offset, (old & ~f.mask) | value << f.lsb)
        elif reg.readable:
            got = await regs[reg.name].read()
            assert got == model.read32(reg.offset), f"{reg.name}: {got:#x}"
        assert int(dut.irq.value) == model.irq, "irq differs from the model"
        irq_high += model.irq
    await bench.check_readable()
    await ClockCycles(dut.clk, 2)
    assert bench.strobes == model.strobes
    assert model.strobes and irq_high, "the strobe or the interrupt was never exercised"


@cocotb.test(timeout_time=WATCHDOG_US, timeout_unit="us")
async def regions_with_random_latency(dut):
    """Bulk writes and reads of every region; a writer and a reader run at the same time."""
    bench = Bench(dut)
    await bench.start()
    rng, regs = bench.rng, bench.regs
    images = {}
    for region in bench.map.regions:
        count = min(region.words, 24)
        offset = rng.randrange(region.words - count + 1)
        words = [rng.getrandbits(32) for _ in range(count)]
        await regs.write_words(region.name, offset, words)
        images[region.name] = (offset, words)
    # a reader of each region and a writer to the scratchpad's last words, concurrently
    spad = bench.map["SPAD"]
    tail = [rng.getrandbits(32) for _ in range(16)]
    writer = cocotb.start_soon(regs.write_words("spad", spad.words - 16, tail))
    for name, (offset, words) in images.items():
        assert await regs.read_words(name, offset, len(words)) == words, name
    await writer
    assert await regs.read_words("spad", spad.words - 16, 16) == tail
    # a real program, as the host loads one
    program = [Instruction("LI", {"rd": 1, "imm": 0x1234_5678}), Instruction("HALT")]
    await regs.write_words("program", 0, program_words(program))
    assert await regs.read_words("program", 0, 16) == program_words(program)
    expected_requests = sum(len(w) for _, w in images.values()) * 2 + 16 * 2 + 32
    assert sum(r.requests for r in bench.responders.values()) == expected_requests


@cocotb.test(timeout_time=WATCHDOG_US, timeout_unit="us")
async def errors_change_nothing(dut):
    """Unmapped addresses and partial strobes get SLVERR and change nothing."""
    bench = Bench(dut)
    await bench.start()
    regs, master = bench.regs, bench.master
    program, spad = bench.map["PROGRAM"], bench.map["SPAD"]
    await regs.step_limit.write(99)
    for address in (0x014, 0x0FC, 0x1040, program.offset + program.size, spad.offset + spad.size,
                    (1 << bench.map.addr_bits) - 4):
        for action in (regs.read32(address), regs.write32(address, 0xFFFF_FFFF)):
            try:
                await action
            except BusError as exc:
                assert exc.resp == 2
            else:
                raise AssertionError(f"{address:#x}: no error response")
    before = sum(r.requests for r in bench.responders.values())
    for address in (0x03C, 0x020, spad.offset):
        result = await master.write(address, b"\x01\x02")                      # WSTRB 0b0011
        assert int(result.resp) == 2
        result = await master.write(address + 1, b"\x01\x02\x03\x04")          # two partial beats
        assert int(result.resp) == 2
    assert sum(r.requests for r in bench.responders.values()) == before       # no region request
    assert await regs.step_limit.read() == 99
    assert bench.strobes == []
