"""Fp32Mul against sim_models.vpu._mul_bits, in the Amaranth simulator, for both multipliers.

Special values (signed zeros, infinities, NaNs with payloads, extreme subnormals and normals) in
every pair, products across the subnormal/normal boundary and underflow to zero, overflow, subnormal
factors with many leading zeros, exact rounding ties and their neighbours, carries into the next
binade, and seeded random vectors; the ``"dsp"`` and ``"lut"`` significand products must both match.
Vectors stream one per cycle; one test per multiplier toggles ``en`` randomly with junk on the inputs.
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.vpu.fp32_mul import MULTIPLIERS, Fp32Mul
from sim_models import vpu

SPECIALS = [0x0000_0000, 0x7F80_0000, 0x7FC0_0000, 0x7F80_0001, 0x7FBF_FFFF, 0x7FC0_1234,
            0x0000_0001, 0x0000_0003, 0x007F_FFFF, 0x0040_0000, 0x0080_0000, 0x0080_0001, 0x00FF_FFFF,
            0x7F7F_FFFF, 0x7F00_0000, 0x3F80_0000, 0x3FFF_FFFF, 0x3F00_0000, 0x5F80_0000, 0x1F80_0000]
SPECIALS += [x | 0x8000_0000 for x in SPECIALS]


def expected(vectors):
    a = np.array([v[0] for v in vectors], dtype=np.int64)
    b = np.array([v[1] for v in vectors], dtype=np.int64)
    return [int(x) for x in vpu._mul_bits(a, b)]


def stream(dut, vectors, enable=None, junk=None):
    """Present ``(a, b)`` one per enabled cycle; return the results in order.

    With ``enable(cycle)`` low the inputs carry ``junk()`` instead, which the pipeline must ignore.
    """
    latency = dut.latency
    results = []

    async def tb(ctx):
        issued, cycle, ages = 0, 0, []
        while len(results) < len(vectors):
            en = 1 if enable is None else enable(cycle)
            values = vectors[issued] if en and issued < len(vectors) else (junk() if junk else None)
            if values is not None:
                ctx.set(dut.a, values[0])
                ctx.set(dut.b, values[1])
            ctx.set(dut.en, en)
            await ctx.tick()
            cycle += 1
            if en:
                ages = [age + 1 for age in ages]
                if issued < len(vectors):
                    ages.append(1)
                    issued += 1
                if ages and ages[0] == latency:
                    ages.pop(0)
                    results.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def check(vectors, multiplier, stages=None, **kwargs):
    dut = Fp32Mul(stages, multiplier=multiplier)
    assert dut.latency == (stages or Fp32Mul.DEFAULT_STAGES[multiplier])
    got = stream(dut, vectors, **kwargs)
    want = expected(vectors)
    bad = [(v, g, w) for v, g, w in zip(vectors, got, want, strict=True) if g != w]
    assert not bad, f"Fp32Mul({dut.latency}, {multiplier!r}): {len(bad)} mismatches\n" + "\n".join(
        f"{a:#010x} * {b:#010x}: got {g:#010x}, expected {w:#010x}" for (a, b), g, w in bad[:10])


def bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def random_sig(rng, trailing=0):
    """A 24-bit significand with its top bit set and exactly ``trailing`` zeros at the bottom."""
    return (rng.getrandbits(23 - trailing) << trailing | 1 << 23 | 1 << trailing) & 0xFF_FFFF


# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_special_values(multiplier):
    """Every pair of signed zeros, infinities, NaNs (with payloads) and extreme finite values."""
    check([(a, b) for a in SPECIALS for b in SPECIALS], multiplier)


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_underflow_and_overflow(multiplier):
    """Products whose biased exponent is -30..3 (subnormal, rounding to zero) and 250..258."""
    seed = 1
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for target in list(range(-30, 4)) + list(range(250, 259)):
        for _ in range(8):
            a_be = rng.randint(max(1, target + 127 - 254), min(254, target + 127 - 1))
            b_be = target + 127 - a_be                    # be_a + be_b - 127 = target (before carry)
            fa = rng.choice([0, 0x7FFFFF, rng.getrandbits(23), random_sig(rng, rng.randrange(20)) & 0x7FFFFF])
            fb = rng.choice([0, 0x7FFFFF, rng.getrandbits(23)])
            pair = (bits(rng.getrandbits(1), a_be, fa), bits(rng.getrandbits(1), b_be, fb))
            vectors.append(pair if rng.getrandbits(1) else pair[::-1])
    # Subnormal factors (leading zeros in the product) against the whole normal range.
    for _ in range(250):
        sub = rng.getrandbits(rng.randint(1, 23)) | rng.getrandbits(1) << 31
        other = bits(rng.getrandbits(1), rng.choice([1, 100, 127, 150, 200, 254, rng.randrange(1, 255)]),
                     rng.getrandbits(23))
        vectors.append((sub, other) if rng.getrandbits(1) else (other, sub))
    check(vectors, multiplier)


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_ties_and_carries(multiplier):
    """Products exactly halfway between two floats (ties to even), neighbours, all-ones significands."""
    seed = 2
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for low in range(19, 26):                     # lowest set product bit 19..25: the guard is bit 22/23
        for _ in range(16):
            ta = rng.randint(max(0, low - 23), min(23, low))
            sa, sb = random_sig(rng, ta), random_sig(rng, low - ta)
            a_be = rng.randint(60, 190)
            b_be = rng.choice([rng.randint(60, 190), 127 - a_be + rng.randint(-5, 3) + 127])
            if 1 <= b_be <= 254:
                vectors.append((bits(rng.getrandbits(1), a_be, sa & 0x7FFFFF),
                                bits(rng.getrandbits(1), b_be, sb & 0x7FFFFF)))
    for fa in (0x7FFFFF, 0x7FFFFE, 0x7FFFFD, 0x000001, 0x400001):          # carries into 2**24
        for fb in (0x7FFFFF, 0x000001, 0x000002, 0x7FFFFE, rng.getrandbits(23)):
            for be in (1, 2, 127, 253):
                vectors.append((bits(0, be, fa), bits(1, 127 + rng.randint(-2, 1), fb)))
    assert len(vectors) > 150
    check(vectors, multiplier)


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_random_vectors(multiplier):
    seed = 3
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(800):
        a = rng.getrandbits(32)
        if rng.random() < 0.5:                   # keep the product in or near the finite range
            b = bits(rng.getrandbits(1), min(max(254 - ((a >> 23) & 0xFF) + rng.randint(-60, 60), 0), 255),
                     rng.getrandbits(23))
        else:
            b = rng.getrandbits(32)
        vectors.append((a, b))
    check(vectors, multiplier)


@pytest.mark.parametrize(("multiplier", "stages"), [("dsp", 1), ("dsp", 4), ("dsp", 12), ("lut", 2),
                                                    ("lut", 7), ("lut", 11)])
def test_pipeline_depths(multiplier, stages):
    """Any number of registers computes the same function, with latency ``stages``."""
    seed = 100 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")

    def operand():
        return rng.choice(SPECIALS) if rng.random() < 0.3 else rng.getrandbits(32)
    check([(operand(), operand()) for _ in range(200)], multiplier, stages=stages)


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_clock_enable_holds_pipeline(multiplier):
    """With ``en`` low on random cycles (and junk on the inputs) the pipeline holds its contents."""
    seed = 4
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = [(rng.getrandbits(32), bits(rng.getrandbits(1), rng.randint(60, 190), rng.getrandbits(23)))
               for _ in range(400)]
    pattern = random.Random(seed + 1)
    junk = random.Random(seed + 2)
    check(vectors, multiplier, enable=lambda cycle: int(pattern.random() < 0.6),
          junk=lambda: (junk.getrandbits(32), junk.getrandbits(32)))


@pytest.mark.parametrize("bad", [{"stages": 0}, {"stages": 2.5}, {"multiplier": "dsp48"}])
def test_bad_parameters(bad):
    with pytest.raises(ValueError):
        Fp32Mul(**bad)
