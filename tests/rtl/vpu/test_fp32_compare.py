"""Fp32MinMax against sim_models.vpu._max_bits / _min_bits, in the Amaranth simulator.

Every pair of special values (signed zeros, infinities, NaNs with payloads, extreme subnormals and
normals) for both operations, equal magnitudes of opposite signs, neighbours one ulp apart across
zero, seeded random vectors, several pipeline depths, random ``en`` with junk on the inputs, and
``clamp`` as two units in a row against ``min(max(x, lo), hi)``.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from rtl.vpu.fp32_compare import Fp32MinMax
from sim_models import vpu
from verification.pipeline import run_pipeline

SPECIALS = [0x0000_0000, 0x7F80_0000, 0x7FC0_0000, 0x7F80_0001, 0x7FBF_FFFF, 0x7FFF_FFFF, 0x7FC0_1234,
            0x0000_0001, 0x0000_0002, 0x007F_FFFF, 0x0080_0000, 0x0080_0001, 0x7F7F_FFFF, 0x7F7F_FFFE,
            0x3F80_0000, 0x3F80_0001, 0x3F7F_FFFF]
SPECIALS += [x | 0x8000_0000 for x in SPECIALS]


def expected(vectors):
    a = np.array([v[0] for v in vectors], dtype=np.int64)
    b = np.array([v[1] for v in vectors], dtype=np.int64)
    op = np.array([v[2] for v in vectors], dtype=np.int64)
    return [int(x) for x in np.where(op == 1, vpu._min_bits(a, b), vpu._max_bits(a, b))]


def stream(dut, names, vectors, enable=None, junk=None):
    """Present ``vectors`` (tuples for the ports ``names``) one per enabled cycle; return the results.

    With ``enable(cycle)`` low the inputs carry ``junk()`` instead, which the pipeline must ignore.
    """
    got = run_pipeline(dut, [dict(zip(names, v, strict=True)) for v in vectors], ["result"],
                       enable_pattern=enable,
                       junk=(lambda: dict(zip(names, junk(), strict=True))) if junk else None)
    return [g["result"] for g in got]


def check(vectors, stages=Fp32MinMax.DEFAULT_STAGES, **kwargs):
    dut = Fp32MinMax(stages)
    assert dut.latency == stages
    got = stream(dut, ("a", "b", "op"), vectors, **kwargs)
    want = expected(vectors)
    bad = [(v, g, w) for v, g, w in zip(vectors, got, want, strict=True) if g != w]
    assert not bad, f"Fp32MinMax({stages}): {len(bad)} mismatches\n" + "\n".join(
        f"{'min' if op else 'max'}({a:#010x}, {b:#010x}): got {g:#010x}, expected {w:#010x}"
        for (a, b, op), g, w in bad[:10])


# ------------------------------------------------------------------------------------------------

def test_special_values():
    """Every pair of signed zeros, infinities, NaNs (with payloads) and extreme finite values."""
    check([(a, b, op) for a in SPECIALS for b in SPECIALS for op in (0, 1)])


def test_near_values_and_random():
    """Equal magnitudes of opposite sign, neighbours one ulp apart (across zero too), random pairs."""
    seed = 1
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(600):
        a = rng.choice([rng.getrandbits(32), rng.getrandbits(24), rng.choice(SPECIALS)])
        b = rng.choice([a ^ 0x8000_0000, a + 1, a - 1, a ^ 1, rng.getrandbits(32), a]) & 0xFFFF_FFFF
        vectors.append((a, b, rng.getrandbits(1)))
    for a, b in ((0x0000_0001, 0x8000_0001), (0x8000_0000, 0x0000_0000), (0x0000_0000, 0x8000_0000)):
        vectors += [(a, b, 0), (a, b, 1)]
    check(vectors)


@pytest.mark.parametrize("stages", [2, 3])
def test_pipeline_depths(stages):
    """Any number of registers computes the same function, with latency ``stages``."""
    seed = 10 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = [(rng.choice([rng.getrandbits(32), rng.choice(SPECIALS)]), rng.getrandbits(32),
                rng.getrandbits(1)) for _ in range(300)]
    check(vectors, stages=stages)


@pytest.mark.parametrize("stages", [1, 2])
def test_clock_enable_holds_pipeline(stages):
    """With ``en`` low on random cycles (and junk on the inputs) the pipeline holds its contents."""
    seed = 20 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = [(rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(1)) for _ in range(400)]
    pattern = random.Random(seed + 1)
    junk = random.Random(seed + 2)
    check(vectors, stages=stages, enable=lambda cycle: int(pattern.random() < 0.6),
          junk=lambda: (junk.getrandbits(32), junk.getrandbits(32), junk.getrandbits(1)))


def stream_clamp(vectors):
    """``(x, lo, hi)`` one per cycle through a max unit feeding a min unit; the results in order.

    ``hi`` reaches the second unit when its ``max(x, lo)`` does, one unit latency later.
    """
    m = Module()
    m.submodules.lower = lower = Fp32MinMax()
    m.submodules.upper = upper = Fp32MinMax()
    m.d.comb += [lower.op.eq(0), upper.op.eq(1), upper.a.eq(lower.result)]
    first, latency = lower.latency, lower.latency + upper.latency
    results = []

    async def tb(ctx):
        for cycle in range(len(vectors) + latency - 1):
            if cycle < len(vectors):
                ctx.set(lower.a, vectors[cycle][0])
                ctx.set(lower.b, vectors[cycle][1])
            if 0 <= cycle - first < len(vectors):
                ctx.set(upper.b, vectors[cycle - first][2])
            await ctx.tick()
            if cycle + 1 >= latency:
                results.append(ctx.get(upper.result))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def test_clamp_is_two_units_in_a_row():
    """``min(max(x, lo), hi)`` from a max unit feeding a min unit equals the model's clamp."""
    seed = 30
    rng = random.Random(seed)
    print(f"seed {seed}")
    bounds = [(0xBF80_0000, 0x3F80_0000), (0x8000_0000, 0x0000_0000), (0x0000_0000, 0x7F80_0000),
              (0xFF80_0000, 0x8000_0001), (0x4000_0000, 0x4000_0000), (0x0000_0001, 0x0080_0000)]
    vectors = [(x, lo, hi) for lo, hi in bounds for x in SPECIALS + [rng.getrandbits(32) for _ in range(40)]]
    got = stream_clamp(vectors)
    for (x, lo, hi), g in zip(vectors, got, strict=True):
        want = int(vpu._min_bits(vpu._max_bits(np.int64(x), np.int64(lo)), np.int64(hi)))
        assert g == want, f"clamp({x:#010x}, {lo:#010x}, {hi:#010x}): got {g:#010x}, expected {want:#010x}"


@pytest.mark.parametrize("stages", [0, -1, 1.5, False])
def test_bad_parameters(stages):
    with pytest.raises(ValueError):
        Fp32MinMax(stages)
