"""GridSum (softmax's exact denominator) in the Amaranth simulator: random and extreme terms, masked
lanes, rows of one beat to 2048 beats back to back, against the exact integer sum normalized as
sim_models.vpu.softmax normalizes it, and the documented latency."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.vpu.grid_sum import GridSum
from rtl.vpu.lane import GRID_BITS


def normalized(total):
    """``softmax``'s ``(s_sig, s_exp)`` of an exact grid sum, then normalized to 34 bits (``_norm``)."""
    drop = max(total.bit_length() - 34, 0)
    sig, exp = total >> drop, drop - 60
    shift = 34 - sig.bit_length()
    return sig << shift, exp - shift


def run(rows, lanes):
    """rows: lists of beats, each beat (mask, terms). Returns (sig, exp, cycles after the last beat)."""
    dut = GridSum(lanes)
    got = []

    async def tb(ctx):
        for beats in rows:
            for b, (mask, terms) in enumerate(beats):
                ctx.set(dut.valid, 1)
                ctx.set(dut.first, b == 0)
                ctx.set(dut.last, b == len(beats) - 1)
                ctx.set(dut.mask, mask)
                ctx.set(dut.terms, terms)
                await ctx.tick()
            ctx.set(dut.valid, 0)
            cycles = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
                assert cycles <= 3 * lanes + 4, "no done"
            got.append((ctx.get(dut.sig), ctx.get(dut.exp), cycles))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return dut, got


@pytest.mark.parametrize("lanes", [4, 2, 1])
def test_exact_sum(lanes):
    seed = 31 + lanes
    print(f"seed {seed}")
    rng = random.Random(seed)
    top = 1 << 60
    rows = []
    for r in range(24):
        count = rng.choice([1, 2, 5, rng.randrange(1, 40)]) if r else 8192 // lanes
        beats = []
        for b in range(count):
            mask = (1 << lanes) - 1 if b < count - 1 else rng.randrange(1, 1 << lanes)
            high = rng.choice([top, top + 1, 1 << 20])  # the largest term (exp(0)), any, small ones
            terms = [top if high == top else rng.randrange(0, high) for _ in range(lanes)]
            terms[0] = max(terms[0], 1)
            # masked lanes carry junk the unit must ignore
            terms = [t if (mask >> j) & 1 else rng.randrange(0, 1 << GRID_BITS) for j, t in enumerate(terms)]
            beats.append((mask, terms))
        rows.append(beats)
    dut, got = run(rows, lanes)
    for beats, (sig, exp, cycles) in zip(rows, got, strict=True):
        total = sum(t for mask, terms in beats for j, t in enumerate(terms) if (mask >> j) & 1)
        assert (sig, exp) == normalized(total), f"seed {seed}: sum {total}: got ({sig:#x}, {exp})"
        assert cycles == dut.latency, f"seed {seed}: {cycles} cycles, latency {dut.latency}"
