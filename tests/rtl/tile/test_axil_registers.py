"""AxilRegisters in the Amaranth simulator: every access kind, SLVERR cases, WSTRB, AW/W ordering,
region wait states, interleaved reads and writes, the interrupt line, and the documented latency."""

import random

import pytest
from amaranth.hdl import Fragment, Value
from amaranth.sim import Simulator

from rtl.common.axi import RESP_OKAY, RESP_SLVERR
from rtl.tile.axil_registers import AxilRegisters
from rtl.tile.register_map import (
    RO,
    RW,
    STROBE,
    TILE_ID,
    W1C,
    Field,
    Region,
    Register,
    RegisterMap,
    tile_register_map,
)

TILE = tile_register_map(spad_words=1000, prog_words=16)
REGS = {r.name: r for r in TILE.registers}


def _raw(port):
    return Value.cast(port)


def _run(dut, *testbenches, background=()):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for tb in testbenches:
        sim.add_testbench(tb)
    for tb in background:
        sim.add_testbench(tb, background=True)
    sim.run()


class Host:
    """An AXI4-Lite manager for async testbenches: one access at a time, timing recorded."""

    def __init__(self, dut, rng=None, ready_prob=1.0):
        self.bus = dut.s_axil
        self.rng = rng or random.Random(0)
        self.ready_prob = ready_prob
        self.latency = None            # cycles from the (last) address/data handshake to VALID

    def _ready(self):
        return self.ready_prob >= 1 or self.rng.random() < self.ready_prob

    async def write(self, ctx, addr, data, strb=0b1111, aw_delay=0, w_delay=0, max_cycles=200):
        bus = self.bus
        aw_done = w_done = False
        last = None
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        for t in range(max_cycles):
            ctx.set(bus.awvalid, not aw_done and t >= aw_delay)
            ctx.set(bus.wvalid, not w_done and t >= w_delay)
            bready = self._ready()
            ctx.set(bus.bready, bready)
            aw_hs = ctx.get(bus.awvalid) and ctx.get(bus.awready)
            w_hs = ctx.get(bus.wvalid) and ctx.get(bus.wready)
            if ctx.get(bus.bvalid):
                assert aw_done and w_done, "BVALID before both AW and W were accepted"
                if self.latency is None:
                    self.latency = t - last
                if bready:
                    resp = ctx.get(bus.bresp)
                    await ctx.tick()
                    ctx.set(bus.bready, 0)
                    return resp
            await ctx.tick()
            if aw_hs:
                aw_done, last = True, t
            if w_hs:
                w_done, last = True, t
        raise AssertionError(f"write at {addr:#x}: no response within {max_cycles} cycles")

    async def read(self, ctx, addr, max_cycles=200):
        bus = self.bus
        ar_done, last = False, None
        ctx.set(bus.araddr, addr)
        for t in range(max_cycles):
            ctx.set(bus.arvalid, not ar_done)
            rready = self._ready()
            ctx.set(bus.rready, rready)
            ar_hs = ctx.get(bus.arvalid) and ctx.get(bus.arready)
            if ctx.get(bus.rvalid):
                assert ar_done, "RVALID before AR was accepted"
                if self.latency is None:
                    self.latency = t - last
                if rready:
                    data, resp = ctx.get(bus.rdata), ctx.get(bus.rresp)
                    await ctx.tick()
                    ctx.set(bus.rready, 0)
                    return data, resp
            await ctx.tick()
            if ar_hs:
                ar_done, last = True, t
        raise AssertionError(f"read at {addr:#x}: no response within {max_cycles} cycles")

    async def read_ok(self, ctx, addr):
        data, resp = await self.read(ctx, addr)
        assert resp == RESP_OKAY, f"read at {addr:#x}: resp {resp}"
        return data


class Responder:
    """The core side of regions: memories, random (or fixed) wait states, a log of requests."""

    def __init__(self, dut, regions, rng, accept_wait=(0, 0), answer_wait=(0, 0)):
        self.dut = dut
        self.regions = regions
        self.rng = rng
        self.accept_wait = accept_wait
        self.answer_wait = answer_wait
        self.mem = {r.name: {} for r in regions}
        self.log = []

    def process(self, region):
        port = getattr(self.dut, region.port_name)

        async def serve(ctx):
            while True:
                for _ in range(self.rng.randint(*self.accept_wait)):
                    await ctx.tick()
                ctx.set(port.req.ready, 1)
                while True:
                    valid = ctx.get(port.req.valid)
                    if valid:
                        addr = ctx.get(port.req.payload.addr)
                        write = ctx.get(port.req.payload.write)
                        data = ctx.get(port.req.payload.data)
                    await ctx.tick()
                    if valid:
                        break
                ctx.set(port.req.ready, 0)
                self.log.append((region.name, addr, write, data))
                memory = self.mem[region.name]
                if write:
                    memory[addr] = data
                for _ in range(self.rng.randint(*self.answer_wait)):
                    await ctx.tick()
                ctx.set(port.resp.valid, 1)
                ctx.set(port.resp.payload.data, 0xDEAD_BEEF if write else memory.get(addr, 0))
                while True:
                    ready = ctx.get(port.resp.ready)
                    await ctx.tick()
                    if ready:
                        break
                ctx.set(port.resp.valid, 0)
        return serve

    def processes(self):
        return [self.process(r) for r in self.regions]


def test_rejects_a_table_that_is_not_a_register_map():
    with pytest.raises(TypeError, match="RegisterMap"):
        AxilRegisters({"ID": 0})


def test_ports_follow_the_table():
    dut = AxilRegisters(TILE)
    assert dut.s_axil.awaddr.shape().width == TILE.addr_bits == 23
    assert not hasattr(dut, "id") and not hasattr(dut, "config")          # const: no port
    assert dut.signature.members["status"].flow.name == "In"
    assert dut.signature.members["step_limit"].flow.name == "Out"
    assert len(dut.status.code) == 4
    assert len(_raw(dut.ctrl.data)) == 2 and len(dut.ctrl.stb) == 1
    assert len(dut.spad.req.payload.addr) == 10 and len(dut.gpr.req.payload.addr) == 4
    Fragment.get(dut, None)       # elaborated too (an unused component warns when collected)


def test_const_rw_and_reset_values():
    dut = AxilRegisters(TILE)
    host = Host(dut)

    async def tb(ctx):
        assert ctx.get(dut.step_limit) == 0xFFFF_FFFF and ctx.get(_raw(dut.irq_enable)) == 0
        assert await host.read_ok(ctx, 0x000) == TILE_ID
        assert await host.read_ok(ctx, REGS["CONFIG"].offset) == REGS["CONFIG"].init
        assert await host.read_ok(ctx, REGS["SPAD_WORDS"].offset) == 1000
        assert await host.read_ok(ctx, REGS["PROG_WORDS"].offset) == 16
        assert await host.read_ok(ctx, REGS["STEP_LIMIT"].offset) == 0xFFFF_FFFF
        # rw: the port changes one cycle after the write is decoded; bits outside it are dropped
        for name, value, kept in (("STEP_LIMIT", 1234, 1234), ("WEIGHT_BASE_HI", 0x1FF, 0xFF),
                                  ("IRQ_ENABLE", 0xFFFF_FFFF, 0b11), ("PROG_LEN", 0xFFFF_FFFF, 0x1FFFF)):
            assert await host.write(ctx, REGS[name].offset, value) == RESP_OKAY
            assert ctx.get(_raw(getattr(dut, name.lower()))) == kept
            assert await host.read_ok(ctx, REGS[name].offset) == kept
        # a write to a const register is accepted and ignored (it is mapped); its value stays
        assert await host.write(ctx, 0x000, 0) == RESP_OKAY
        assert await host.read_ok(ctx, 0x000) == TILE_ID

    _run(dut, tb)


def test_ro_reads_the_core_port_and_ignores_writes():
    dut = AxilRegisters(TILE)
    host = Host(dut)

    async def tb(ctx):
        ctx.set(dut.status, {"busy": 1, "done": 0, "code": 9})
        ctx.set(dut.pc, 0x1234_5678)
        assert await host.read_ok(ctx, REGS["STATUS"].offset) == 1 | 9 << 8
        assert await host.read_ok(ctx, REGS["PC"].offset) == 0x1234_5678
        assert await host.write(ctx, REGS["PC"].offset, 7) == RESP_OKAY
        assert await host.read_ok(ctx, REGS["PC"].offset) == 0x1234_5678

    _run(dut, tb)


def test_strobe_is_one_cycle_with_the_written_value_and_reads_zero():
    dut = AxilRegisters(TILE)
    host = Host(dut)
    pulses = []

    async def watch(ctx):
        cycle = 0
        while True:
            if ctx.get(dut.ctrl.stb) or ctx.get(_raw(dut.ctrl.data)):
                pulses.append((cycle, ctx.get(dut.ctrl.stb), ctx.get(_raw(dut.ctrl.data))))
            await ctx.tick()
            cycle += 1

    async def tb(ctx):
        assert await host.write(ctx, REGS["CTRL"].offset, 0b01) == RESP_OKAY
        assert await host.write(ctx, REGS["CTRL"].offset, 0b10) == RESP_OKAY
        assert await host.write(ctx, REGS["CTRL"].offset, 0) == RESP_OKAY     # a pulse with data 0
        assert await host.read(ctx, REGS["CTRL"].offset) == (0, RESP_OKAY)
        for _ in range(3):
            await ctx.tick()

    _run(dut, tb, background=[watch])
    assert [(stb, data) for _, stb, data in pulses] == [(1, 1), (1, 2), (1, 0)]
    assert len({cycle for cycle, _, _ in pulses}) == 3


def test_w1c_set_clear_and_irq():
    dut = AxilRegisters(TILE)
    host = Host(dut)
    offset = REGS["IRQ_STATUS"].offset

    async def tb(ctx):
        ctx.set(dut.irq_status, {"done": 1, "error": 0})        # a one-cycle set pulse
        await ctx.tick()
        ctx.set(dut.irq_status, {"done": 0, "error": 0})
        assert ctx.get(dut.irq) == 0                             # not enabled
        assert await host.read_ok(ctx, offset) == 0b01
        assert await host.write(ctx, REGS["IRQ_ENABLE"].offset, 0b10) == RESP_OKAY
        assert ctx.get(dut.irq) == 0                             # done is not enabled
        assert await host.write(ctx, REGS["IRQ_ENABLE"].offset, 0b11) == RESP_OKAY
        assert ctx.get(dut.irq) == 1
        assert await host.write(ctx, offset, 0b10) == RESP_OKAY  # clearing error leaves done
        assert await host.read_ok(ctx, offset) == 0b01 and ctx.get(dut.irq) == 1
        assert await host.write(ctx, offset, 0b01) == RESP_OKAY
        assert await host.read_ok(ctx, offset) == 0 and ctx.get(dut.irq) == 0
        # a set in the very cycle the clear takes effect wins: the bit stays set
        ctx.set(dut.irq_status, {"done": 1, "error": 1})
        await ctx.tick()
        ctx.set(dut.irq_status, {"done": 0, "error": 0})
        bus = dut.s_axil
        ctx.set(bus.awaddr, offset)
        ctx.set(bus.wdata, 0b11)
        ctx.set(bus.wstrb, 0b1111)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        await ctx.tick()                                         # AW, W accepted
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        ctx.set(dut.irq_status, {"done": 0, "error": 1})         # the clear is decoded now
        await ctx.tick()
        ctx.set(dut.irq_status, {"done": 0, "error": 0})
        assert ctx.get(bus.bvalid)
        ctx.set(bus.bready, 1)
        await ctx.tick()
        ctx.set(bus.bready, 0)
        assert await host.read_ok(ctx, offset) == 0b10

    _run(dut, tb)


def test_unmapped_addresses_and_partial_strobes_are_slverr_and_change_nothing():
    dut = AxilRegisters(TILE)
    host = Host(dut)
    responder = Responder(dut, TILE.regions, random.Random(1))
    program = TILE["PROGRAM"]
    spad = TILE["SPAD"]
    holes = [0x014, 0x054, 0x0FC, 0x0FFC, 0x1040, program.offset + program.size,
             program.offset + program.window - 4, spad.offset + spad.size, (1 << 23) - 4]

    async def tb(ctx):
        for addr in holes:
            assert await host.read(ctx, addr) == (0, RESP_SLVERR), hex(addr)
            assert await host.write(ctx, addr, 0x5555_5555) == RESP_SLVERR, hex(addr)
        for strb in (0b0000, 0b0001, 0b0111, 0b1110):
            assert await host.write(ctx, REGS["STEP_LIMIT"].offset, 5, strb=strb) == RESP_SLVERR
            assert await host.write(ctx, spad.offset, 5, strb=strb) == RESP_SLVERR
            assert await host.write(ctx, REGS["CTRL"].offset, 1, strb=strb) == RESP_SLVERR
        assert ctx.get(dut.step_limit) == 0xFFFF_FFFF
        assert await host.read_ok(ctx, REGS["STEP_LIMIT"].offset) == 0xFFFF_FFFF
        assert responder.log == []                               # no region saw a request
        # the last word of each region is mapped; the low two address bits are ignored on reads
        assert await host.write(ctx, program.offset + program.size - 4, 77) == RESP_OKAY
        assert await host.read_ok(ctx, program.offset + program.size - 1) == 77
        assert await host.read_ok(ctx, 0x002) == TILE_ID

    _run(dut, tb, background=responder.processes())


@pytest.mark.parametrize("aw_delay,w_delay", [(0, 0), (0, 5), (5, 0), (3, 3)])
def test_aw_and_w_in_either_order(aw_delay, w_delay):
    dut = AxilRegisters(TILE)
    host = Host(dut)

    async def tb(ctx):
        value = 0x1000 + 17 * aw_delay + w_delay
        assert await host.write(ctx, REGS["WEIGHT_SIZE_LO"].offset, value, aw_delay=aw_delay,
                                w_delay=w_delay) == RESP_OKAY
        assert host.latency == 2                                  # BVALID 2 cycles after the later one
        assert ctx.get(dut.weight_size_lo) == value

    _run(dut, tb)


def test_register_latency_is_as_documented():
    dut = AxilRegisters(TILE)
    host = Host(dut)

    async def tb(ctx):
        await host.read_ok(ctx, 0)
        assert host.latency == 2
        host.latency = None
        await host.write(ctx, REGS["STEP_LIMIT"].offset, 3)
        assert host.latency == 2
        # back-to-back reads with RREADY always high: one every 3 cycles
        bus = dut.s_axil
        ctx.set(bus.rready, 1)
        ctx.set(bus.arvalid, 1)
        ctx.set(bus.araddr, REGS["STEP_LIMIT"].offset)
        handshakes = []
        for t in range(30):
            if ctx.get(bus.arready):
                handshakes.append(t)
            await ctx.tick()
        gaps = [b - a for a, b in zip(handshakes, handshakes[1:], strict=False)]
        assert len(gaps) >= 8 and set(gaps) == {3}

    _run(dut, tb)


def test_a_write_reaches_the_core_with_bvalid():
    dut = AxilRegisters(TILE)
    bus = dut.s_axil

    async def tb(ctx):
        for offset, value in ((REGS["STEP_LIMIT"].offset, 42), (REGS["CTRL"].offset, 0b10)):
            ctx.set(bus.awaddr, offset)
            ctx.set(bus.wdata, value)
            ctx.set(bus.wstrb, 0b1111)
            ctx.set(bus.awvalid, 1)
            ctx.set(bus.wvalid, 1)
            ctx.set(bus.bready, 1)
            seen = []
            for _ in range(4):                  # cycle 0: AW and W handshakes
                seen.append((ctx.get(bus.bvalid), ctx.get(dut.step_limit), ctx.get(dut.ctrl.stb),
                             ctx.get(dut.ctrl.data.abort)))
                await ctx.tick()
                ctx.set(bus.awvalid, 0)
                ctx.set(bus.wvalid, 0)
            if value == 42:
                assert [(b, v == 42) for b, v, _, _ in seen] == [(0, 0), (0, 0), (1, 1), (0, 1)]
            else:
                assert [(b, s, a) for b, _, s, a in seen] == [(0, 0, 0), (0, 0, 0), (1, 1, 1), (0, 0, 0)]

    _run(dut, tb)


@pytest.mark.parametrize("accept_wait,answer_wait", [((0, 0), (0, 0)), ((3, 3), (0, 0)),
                                                      ((0, 0), (7, 7)), ((0, 4), (0, 9))])
def test_regions_wait_for_the_core(accept_wait, answer_wait):
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = AxilRegisters(TILE)
    host = Host(dut, rng=random.Random(seed + 1), ready_prob=0.6)
    responder = Responder(dut, TILE.regions, rng, accept_wait, answer_wait)
    expected = {}
    accesses = []

    async def tb(ctx):
        for _ in range(40):
            region = rng.choice(TILE.regions)
            word = rng.randrange(region.words)
            addr = region.offset + 4 * word
            if rng.random() < 0.5 or (region.name, word) not in expected:
                value = rng.getrandbits(32)
                assert await host.write(ctx, addr, value) == RESP_OKAY
                expected[region.name, word] = value
                accesses.append((region.name, word, 1, value))
            else:
                assert await host.read_ok(ctx, addr) == expected[region.name, word]
                accesses.append((region.name, word, 0))

    _run(dut, tb, background=responder.processes())
    # exactly one request per AXI access, with the word index, the direction and the data
    assert [entry if entry[2] else entry[:3] for entry in responder.log] == accesses


def test_region_latency_is_as_documented():
    dut = AxilRegisters(TILE)
    host = Host(dut)
    responder = Responder(dut, TILE.regions, random.Random(0))

    async def tb(ctx):
        await host.write(ctx, TILE["GPR"].offset + 4 * 3, 99)
        assert host.latency == 4
        host.latency = None
        assert await host.read_ok(ctx, TILE["GPR"].offset + 4 * 3) == 99
        assert host.latency == 4

    _run(dut, tb, background=responder.processes())
    assert responder.log == [("GPR", 3, 1, 99), ("GPR", 3, 0, 0)]


def test_a_read_and_a_write_at_once_both_complete_one_after_the_other():
    dut = AxilRegisters(TILE)
    rng = random.Random(5)
    responder = Responder(dut, TILE.regions, rng, (0, 3), (0, 5))
    bus = dut.s_axil
    spad = TILE["SPAD"]
    done = {}

    async def tb(ctx):
        # preload a word, then present a read of it and a write of another word together, twice:
        # the one of the two not served last goes first
        assert await Host(dut).write(ctx, spad.offset, 111) == RESP_OKAY
        for round_ in range(2):
            if round_ == 1:
                assert await Host(dut).read_ok(ctx, spad.offset) == 111
            ctx.set(bus.araddr, spad.offset)
            ctx.set(bus.awaddr, spad.offset + 4 * (round_ + 1))
            ctx.set(bus.wdata, 200 + round_)
            ctx.set(bus.wstrb, 0b1111)
            ctx.set(bus.arvalid, 1)
            ctx.set(bus.awvalid, 1)
            ctx.set(bus.wvalid, 1)
            ctx.set(bus.rready, 1)
            ctx.set(bus.bready, 1)
            got = {}
            for t in range(100):
                ar, aw, w = (ctx.get(bus.arvalid) and ctx.get(bus.arready),
                             ctx.get(bus.awvalid) and ctx.get(bus.awready),
                             ctx.get(bus.wvalid) and ctx.get(bus.wready))
                if ctx.get(bus.rvalid):
                    got["r"] = (t, ctx.get(bus.rdata), ctx.get(bus.rresp))
                if ctx.get(bus.bvalid):
                    got["b"] = (t, ctx.get(bus.bresp))
                await ctx.tick()
                if ar:
                    ctx.set(bus.arvalid, 0)
                if aw:
                    ctx.set(bus.awvalid, 0)
                if w:
                    ctx.set(bus.wvalid, 0)
                if len(got) == 2:
                    break
            assert got["r"][1:] == (111, RESP_OKAY) and got["b"][1] == RESP_OKAY
            done[round_] = "read first" if got["r"][0] < got["b"][0] else "write first"
            ctx.set(bus.rready, 0)
            ctx.set(bus.bready, 0)
            await ctx.tick()

    _run(dut, tb, background=responder.processes())
    assert done == {0: "read first", 1: "write first"}
    assert responder.mem["SPAD"] == {0: 111, 1: 200, 2: 201}


def test_generic_map_without_irq_enable_and_a_small_region():
    regmap = RegisterMap("small", (
        Register("FLAGS", 0x0, W1C, "flags", fields=(Field("a", 0), Field("b", 3))),
        Register("GO", 0x4, STROBE, "go", width=8),
        Register("KNOB", 0x8, RW, "knob", fields=(Field("lo", 0, 4), Field("hi", 8, 4)),
                 init={"lo": 5, "hi": 10}),
        Register("SENSE", 0xC, RO, "sense", width=3),
    ), (Region("BUF", 0x20, 3, "three words"),))
    dut = AxilRegisters(regmap)
    host = Host(dut)
    responder = Responder(dut, regmap.regions, random.Random(2))

    async def tb(ctx):
        assert regmap.addr_bits == 6
        assert ctx.get(_raw(dut.knob)) == 5 | 10 << 8
        assert await host.read_ok(ctx, 0x8) == 0xA05
        ctx.set(dut.flags, {"a": 0, "b": 1})
        await ctx.tick()
        ctx.set(dut.flags, {"a": 0, "b": 0})
        assert ctx.get(dut.irq) == 1                             # no enable register: always enabled
        assert await host.read_ok(ctx, 0x0) == 0b1000
        assert await host.write(ctx, 0x0, 0xFFFF_FFFF) == RESP_OKAY
        assert ctx.get(dut.irq) == 0
        ctx.set(dut.sense, 0b101)
        assert await host.read_ok(ctx, 0xC) == 0b101
        assert await host.write(ctx, 0x28, 9) == RESP_OKAY         # word 2 of 3
        assert await host.read(ctx, 0x2C) == (0, RESP_SLVERR)       # word 3: in the window, unmapped
        assert await host.read_ok(ctx, 0x28) == 9

    _run(dut, tb, background=responder.processes())
    assert responder.log == [("BUF", 2, 1, 9), ("BUF", 2, 0, 0)]


def test_register_map_kinds_are_all_exercised():
    """The tile's map uses every access kind this file tests."""
    assert {r.access for r in TILE.registers} == {"const", RO, RW, W1C, STROBE}
