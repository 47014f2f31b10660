"""CreditedBuffer: order, no loss or duplication, stable payload under stalls, full rate, overflow."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.common import credited_buffer as credited_buffer_module
from rtl.common.credited_buffer import CreditedBuffer
from rtl.common.unchecked_read import unchecked_read_port


def _run(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("depth", [1, 2, 3, 8])
@pytest.mark.parametrize("write_prob,ready_prob", [(1.0, 1.0), (0.7, 0.3), (0.3, 0.9), (1.0, 0.1)])
def test_credited_writer_gets_every_entry_in_order(depth, write_prob, ready_prob):
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = CreditedBuffer(16, depth)
    count = 300
    got, cycles = [], []

    async def testbench(ctx):
        credits, sent, held = depth, 0, None
        for cycle in range(count * 40):
            write = sent < count and credits > 0 and rng.random() < write_prob
            ready = rng.random() < ready_prob
            ctx.set(dut.w_en, write)
            ctx.set(dut.w_data, sent * 7 % 65536)
            ctx.set(dut.o.ready, ready)
            valid, payload = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            if held is not None:
                assert valid and payload == held, f"cycle {cycle}: payload changed while stalled"
            held = payload if valid and not ready else None
            if valid and ready:
                got.append(payload)
                credits += 1
            if write:
                credits -= 1
                sent += 1
            await ctx.tick()
            if len(got) == count:
                cycles.append(cycle + 1)
                break
        assert not ctx.get(dut.overflow)

    _run(dut, testbench)
    assert got == [i * 7 % 65536 for i in range(count)], f"seed {seed}"
    if write_prob == ready_prob == 1.0 and depth >= 3:   # the credit loop is 3 cycles
        assert cycles[0] == count + 2, f"full rate: {count} entries took {cycles[0]} cycles"


def test_writing_a_full_buffer_raises_overflow_and_keeps_it():
    dut = CreditedBuffer(8, 2)

    async def testbench(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.w_en, 1)
        for _ in range(2):                      # two entries: the buffer is full, within contract
            await ctx.tick()
        assert not ctx.get(dut.overflow)
        await ctx.tick()                        # a third write without a credit
        ctx.set(dut.w_en, 0)
        await ctx.tick()
        assert ctx.get(dut.overflow)
        ctx.set(dut.o.ready, 1)
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(dut.overflow), "overflow must stay high"

    _run(dut, testbench)


@pytest.mark.parametrize("kwargs,message", [({"depth": 0}, "depth"), ({"depth": 4, "ram_style": "ultra"},
                                                                      "ram_style")])
def test_bad_parameters_are_named(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        CreditedBuffer(8, **kwargs)


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_the_read_port_never_reads_the_entry_being_written(depth):
    """The storage is read through an unchecked port (``rtl/common/unchecked_read.py``): reading the
    address being written in the same cycle gives undefined data in block RAM, but the old data in
    the simulators, so only a direct check sees it. The buffer promises it never happens while the
    writer keeps its credits (``stored`` does not count the entry being written); random traffic
    at full and at stalled rates, the collision checked every cycle, and every entry in order.
    (Pointers that wrap to 1 instead of 0 reuse an address one entry early: with two entries the
    read of one meets the write of the next.)"""
    seed = 20 + depth
    print(f"seed {seed}")
    rng = random.Random(seed)
    ports = []

    def watched(m, memory, *, name):
        port = unchecked_read_port(m, memory, name=name)
        ports.append((memory, port))
        return port

    dut = CreditedBuffer(8, depth)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(credited_buffer_module, "unchecked_read_port", watched)
        sim = Simulator(dut)
    [(memory, read)] = ports
    [write] = memory.write_ports
    collision = read.en & write.en & (read.addr == write.addr)
    count = 400
    got = []

    async def testbench(ctx):
        credits, sent = depth, 0
        for cycle in range(count * 20):
            phase = (cycle // 50) % 3                   # full rate, a slow reader, a slow writer
            write_now = sent < count and credits > 0 and rng.random() < (1.0, 1.0, 0.4)[phase]
            ready = rng.random() < (1.0, 0.3, 1.0)[phase]
            ctx.set(dut.w_en, write_now)
            ctx.set(dut.w_data, sent % 256)
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload, collided = await ctx.tick().sample(dut.o.valid, dut.o.payload, collision)
            assert not collided, f"seed {seed}: cycle {cycle}: the read port read the entry being written"
            if valid and ready:
                got.append(payload)
                credits += 1
            if write_now:
                credits -= 1
                sent += 1
            if len(got) == count:
                break
        assert not ctx.get(dut.overflow)

    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert got == [i % 256 for i in range(count)], f"seed {seed}"
