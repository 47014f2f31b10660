"""Fp32Add against sim_models.vpu._add_bits, in the Amaranth simulator.

Special values (signed zeros, infinities, NaNs with payloads, extreme subnormals and normals) in
every pair, every exponent difference from 0 to 60 (and beyond), cancellation to zero and to
subnormals, rounding ties and their neighbours, carries into the next binade, overflow, and seeded
random vectors, each as an addition and as a subtraction. Vectors stream one per cycle; one test
toggles ``en`` randomly with junk on the inputs while it is low.
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.vpu.fp32_add import Fp32Add
from sim_models import vpu

SPECIALS = [0x0000_0000, 0x7F80_0000, 0x7FC0_0000, 0x7F80_0001, 0x7FBF_FFFF, 0x7FFF_FFFF, 0x7FC0_1234,
            0x0000_0001, 0x0000_0002, 0x007F_FFFF, 0x0040_0000, 0x0080_0000, 0x0080_0001, 0x00FF_FFFF,
            0x7F7F_FFFF, 0x7F00_0000, 0x3F80_0000, 0x3FFF_FFFF, 0x4B80_0000]
SPECIALS += [x | 0x8000_0000 for x in SPECIALS]


def expected(vectors):
    a = np.array([v[0] for v in vectors], dtype=np.int64)
    b = np.array([v[1] ^ (v[2] << 31) for v in vectors], dtype=np.int64)
    return [int(x) for x in vpu._add_bits(a, b)]


def stream(dut, vectors, enable=None, junk=None):
    """Present ``(a, b, subtract)`` one per enabled cycle; return the results in order.

    With ``enable(cycle)`` low the inputs carry ``junk()`` instead, which the pipeline must ignore.
    """
    latency = dut.latency
    ports = (dut.a, dut.b, dut.subtract)
    results = []

    async def tb(ctx):
        issued, cycle, ages = 0, 0, []
        while len(results) < len(vectors):
            en = 1 if enable is None else enable(cycle)
            values = vectors[issued] if en and issued < len(vectors) else (junk() if junk else None)
            if values is not None:
                for port, value in zip(ports, values, strict=True):
                    ctx.set(port, value)
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


def check(vectors, stages=Fp32Add.DEFAULT_STAGES, **kwargs):
    vectors = [(a, b, s) for a, b, s in vectors]
    dut = Fp32Add(stages)
    assert dut.latency == stages
    got = stream(dut, vectors, **kwargs)
    want = expected(vectors)
    bad = [(v, g, w) for v, g, w in zip(vectors, got, want, strict=True) if g != w]
    assert not bad, f"Fp32Add(stages={stages}): {len(bad)} mismatches\n" + "\n".join(
        f"{a:#010x} {'-' if s else '+'} {b:#010x}: got {g:#010x}, expected {w:#010x}"
        for (a, b, s), g, w in bad[:10])


def bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def both(a, b):
    """The pair as an addition and as a subtraction."""
    return [(a, b, 0), (a, b, 1)]


# ------------------------------------------------------------------------------------------------

def test_special_values():
    """Every pair of signed zeros, infinities, NaNs (with payloads) and extreme finite values."""
    check([(a, b, s) for a in SPECIALS for b in SPECIALS for s in (0, 1)])


def test_every_exponent_difference():
    """Exponent differences 0..60 and far beyond, both orders, like and unlike signs."""
    seed = 1
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for be in (1, 2, 3, 24, 26, 61, 100, 127, 200, 254):
        for d in list(range(0, 61)) + [100, 200, 253]:
            if be - d < 0:
                continue
            for _ in range(4):
                a = bits(rng.getrandbits(1), be, rng.choice([0, 0x7FFFFF, rng.getrandbits(23)]))
                b = bits(rng.getrandbits(1), be - d, rng.choice([0, 1, 0x7FFFFF, rng.getrandbits(23)]))
                pair = (a, b) if rng.getrandbits(1) else (b, a)
                vectors.append((*pair, rng.getrandbits(1)))
    assert len(vectors) > 1400
    check(vectors)


def test_cancellation():
    """x - x = +0 (and -0 - +0 = -0), near-total cancellation, results falling into subnormals."""
    seed = 2
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(150):
        be = rng.choice([1, 2, 3, 25, 127, 254, rng.randrange(1, 255)])
        a = bits(rng.getrandbits(1), be, rng.getrandbits(23))
        vectors += both(a, a) + both(a, a ^ 0x8000_0000)                    # exact zero or 2a
        for delta in (1, 2, 3, 1 << rng.randrange(23), rng.getrandbits(23)):   # neighbours below/above
            magnitude = (a & 0x7FFF_FFFF) + rng.choice([-1, 1]) * delta
            near = (a & 0x8000_0000) | min(max(magnitude, 0), 0x7F7F_FFFF)
            vectors += both(a, near)
    for a, b in ((0x0000_0000, 0x8000_0000), (0x8000_0000, 0x8000_0000), (0x8000_0000, 0x0000_0000),
                 (0x0080_0000, 0x0000_0001), (0x0080_0000, 0x007F_FFFF), (0x0100_0000, 0x00FF_FFFF)):
        vectors += both(a, b)
    check(vectors)


def test_rounding_ties_and_carries():
    """Y exactly half an ulp of X (ties to even), a little above or below, and carries out of 2**24."""
    seed = 3
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for be in (2, 24, 25, 26, 27, 127, 253, 254):
        for frac in (0, 1, 2, 3, 0x7FFFFE, 0x7FFFFF, rng.getrandbits(23)):
            for sign in (0, 1):
                a = bits(sign, be, frac)
                for d in (22, 23, 24, 25, 26):                             # b near half an ulp of a
                    if be - d < 1:
                        continue
                    for b_frac in (0, 1, 0x400000, 0x7FFFFF, rng.getrandbits(23)):
                        vectors += both(a, bits(rng.getrandbits(1), be - d, b_frac))
                # b = 1.5 ulp, 2.5 ulp (odd tie patterns below the lsb after alignment)
                for b_be, b_frac in ((be - 23, 0x400000), (be - 22, 0x200000)):
                    if b_be >= 1:
                        vectors += both(a, bits(sign ^ 1, b_be, b_frac)) + both(a, bits(sign, b_be, b_frac))
    check(vectors)


def test_overflow_and_subnormal_results():
    """Sums reaching 2**128 (and just not), subnormal sums of subnormals and of tiny normals."""
    seed = 4
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    big = [0x7F7F_FFFF, 0x7F7F_FFFE, 0x7F00_0000, 0x7F40_0000, 0x7EFF_FFFF, 0x7F7F_0000]
    for a in big:
        for b in big + [0x7380_0000, 0x7300_0000, 0x7380_0001, 0x737F_FFFF, 0x7400_0000]:
            for sign in (0, 1):
                vectors += both(a | sign << 31, b | sign << 31) + both(a | sign << 31, b | (sign ^ 1) << 31)
    tiny = [0x0000_0001, 0x0000_0003, 0x007F_FFFF, 0x0040_0001, 0x0080_0000, 0x0080_0001, 0x0100_0001]
    for _ in range(300):
        a = rng.choice(tiny + [rng.getrandbits(24), rng.getrandbits(23)]) | rng.getrandbits(1) << 31
        b = rng.choice(tiny + [rng.getrandbits(24), rng.getrandbits(23)]) | rng.getrandbits(1) << 31
        vectors.append((a, b, rng.getrandbits(1)))
    check(vectors)


def test_random_vectors():
    seed = 5
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(1500):
        a = rng.getrandbits(32)
        if rng.random() < 0.5:                            # close exponents: real cancellation
            be = (a >> 23) & 0xFF
            b = bits(rng.getrandbits(1), min(max(be + rng.randint(-3, 3), 0), 255), rng.getrandbits(23))
        else:
            b = rng.getrandbits(32)
        vectors.append((a, b, rng.getrandbits(1)))
    check(vectors)


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 9, 11])
def test_pipeline_depths(stages):
    """Any number of registers computes the same function, with latency ``stages``."""
    seed = 100 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")
    def operand():
        return rng.choice(SPECIALS) if rng.random() < 0.3 else rng.getrandbits(32)
    vectors = [(operand(), operand(), rng.getrandbits(1)) for _ in range(250)]
    check(vectors, stages=stages)


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles (and junk on the inputs) the pipeline holds its contents."""
    seed = 6
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(500):
        a = rng.choice([rng.getrandbits(32), rng.choice(SPECIALS)])
        b = a ^ rng.choice([0x8000_0000, rng.getrandbits(4), rng.getrandbits(26), rng.getrandbits(32)])
        vectors.append((a, b, rng.getrandbits(1)))
    pattern = random.Random(seed + 1)
    junk = random.Random(seed + 2)
    check(vectors, enable=lambda cycle: int(pattern.random() < 0.6),
          junk=lambda: (junk.getrandbits(32), junk.getrandbits(32), junk.getrandbits(1)))


@pytest.mark.parametrize("stages", [0, -1, 2.0, True])
def test_bad_parameters(stages):
    with pytest.raises(ValueError):
        Fp32Add(stages)
