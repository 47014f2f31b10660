"""The tile's performance counters: each counter against a Python model cycle by cycle under random
events, runs and clears; the cycle counters add up to the busy cycles; saturation; the register map
exposes exactly these counters."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.tile.perf_counters import (
    ACTIVITY_OF,
    COUNTERS,
    CYCLE_COUNTER_OF,
    CYCLE_COUNTERS,
    Activity,
    PerfCounters,
)
from rtl.tile.register_map import PERF_COUNTERS, RO, TILE_REGISTERS
from sim_models.tile_isa import INSTRUCTIONS


def _model_step(counts, inputs, top):
    """The counters after one cycle with ``inputs`` (the component's contract, in Python)."""
    if inputs["clear"]:
        return dict.fromkeys(COUNTERS, 0)
    if not inputs["busy"]:
        return counts
    add = dict.fromkeys(COUNTERS, 0)
    add[CYCLE_COUNTER_OF[inputs["activity"]]] = 1
    add["weight_stall_cycles"] = int(inputs["weight_pending"] and inputs["weight_wanted"]
                                     and not inputs["weight_valid"])
    add["weight_bytes"] = inputs["weight_length"] if inputs["weight_request"] else 0
    add["weight_beats"] = inputs["weight_beat"]
    add["kv_reads"] = inputs["kv_read"]
    add["kv_appends"] = inputs["kv_append"]
    return {name: min(top, counts[name] + add[name]) for name in COUNTERS}


def _random_inputs(rng, max_length, clears):
    return {
        "clear": int(rng.random() < clears), "busy": int(rng.random() < 0.85),
        "activity": rng.choice(list(Activity)),
        "weight_request": rng.getrandbits(1), "weight_length": rng.randrange(max_length + 1),
        "weight_beat": rng.getrandbits(1), "weight_pending": rng.getrandbits(1),
        "weight_valid": rng.getrandbits(1), "weight_wanted": rng.getrandbits(1),
        "kv_read": rng.getrandbits(1), "kv_append": rng.getrandbits(1),
    }


@pytest.mark.parametrize("width, max_length, clears, seed",
                         [(32, 4096, 0.02, 1), (6, 40, 0.001, 2), (32, (1 << 32) - 1, 0.02, 3)],
                         ids=["32-bit", "saturating", "huge-lengths"])
def test_counters_follow_the_model(width, max_length, clears, seed):
    rng = random.Random(seed)
    print(f"seed {seed}")
    dut = PerfCounters(width=width)
    top = (1 << width) - 1
    saturated = set()

    async def tb(ctx):
        counts = dict.fromkeys(COUNTERS, 0)
        busy_cycles = 0
        for cycle in range(3000):
            inputs = _random_inputs(rng, max_length, clears)
            for name, value in inputs.items():
                ctx.set(getattr(dut, name), value)
            await ctx.tick()
            counts = _model_step(counts, inputs, top)
            busy_cycles = 0 if inputs["clear"] else busy_cycles + inputs["busy"]
            got = {name: ctx.get(getattr(dut, name)) for name in COUNTERS}
            assert got == counts, (cycle, inputs)
            saturated.update(name for name, value in got.items() if value == top)
            if busy_cycles < top:
                assert sum(got[name] for name in CYCLE_COUNTERS) == busy_cycles, cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    if width == 6:
        assert saturated == set(COUNTERS), "every counter reached its top and stayed there"
    elif max_length == (1 << 32) - 1:
        assert "weight_bytes" in saturated


def test_a_clear_wins_over_an_event_and_idle_cycles_count_nothing():
    dut = PerfCounters()

    async def tb(ctx):
        ctx.set(dut.busy, 1)
        ctx.set(dut.activity, Activity.GEMM)
        ctx.set(dut.kv_read, 1)
        await ctx.tick().repeat(3)
        assert (ctx.get(dut.gemm_cycles), ctx.get(dut.kv_reads)) == (3, 3)
        ctx.set(dut.busy, 0)                   # events outside a run are not counted
        await ctx.tick().repeat(2)
        assert (ctx.get(dut.gemm_cycles), ctx.get(dut.kv_reads)) == (3, 3)
        ctx.set(dut.busy, 1)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        assert all(ctx.get(getattr(dut, name)) == 0 for name in COUNTERS)
        ctx.set(dut.clear, 0)
        await ctx.tick()
        assert (ctx.get(dut.gemm_cycles), ctx.get(dut.kv_reads)) == (1, 1)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_the_register_map_holds_every_counter():
    perf = [reg for reg in TILE_REGISTERS.registers if reg.name.startswith("PERF_")]
    assert [reg.name for reg in perf] == [f"PERF_{name.upper()}" for name in COUNTERS]
    assert PERF_COUNTERS == COUNTERS
    assert all(reg.access == RO and reg.width == 32 for reg in perf)
    assert [reg.offset for reg in perf] == list(range(0x060, 0x060 + 4 * len(COUNTERS), 4))
    assert TILE_REGISTERS["VERSION"].unpack(TILE_REGISTERS["VERSION"].init) == {"major": 1, "minor": 1}


def test_every_instruction_has_one_activity():
    assert set(ACTIVITY_OF) < set(INSTRUCTIONS) and Activity.OTHER not in ACTIVITY_OF.values()
    assert set(ACTIVITY_OF.values()) | {Activity.OTHER} == set(Activity) == set(CYCLE_COUNTER_OF)


def test_bad_parameters():
    with pytest.raises(ValueError, match="width must be an integer of at least 1"):
        PerfCounters(width=0)
