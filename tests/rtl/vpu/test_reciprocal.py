"""Reciprocal against sim_models.vpu._reciprocal_bits, bit for bit, in the Amaranth simulator.

Special values (±0, ±Inf, NaNs of every kind), subnormal inputs of every leading-zero count, the
overflow boundary near ``2**-128`` and the subnormal-result range above ``2**126``, every exponent,
and seeded random patterns, streamed one per cycle; the clock enable toggled in one test.
"""

import random

import numpy as np
import pytest

from rtl.vpu.reciprocal import Reciprocal
from sim_models import vpu
from verification.pipeline import random_enable, run_pipeline

SPECIALS = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001,
            0xFF80_0001, 0x7FBF_FFFF, 0x7FFF_FFFF, 0xFFFF_FFFF, 0x3F80_0000, 0xBF80_0000, 0x7F7F_FFFF,
            0xFF7F_FFFF, 0x0080_0000, 0x8080_0000, 0x007F_FFFF, 0x0000_0001, 0x8000_0001]


def bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def expected(patterns):
    return [int(v) for v in vpu._reciprocal_bits(np.array(patterns, dtype=np.int64))]


def check(patterns, seed, enable_pattern=None, **kwargs):
    dut = Reciprocal(**kwargs)
    got = [g["result"] for g in run_pipeline(dut, [{"x": x} for x in patterns], ["result"],
                                               enable_pattern=enable_pattern)]
    bad = [(x, g, w) for x, g, w in zip(patterns, got, expected(patterns), strict=True) if g != w]
    assert not bad, f"seed {seed}: {len(bad)} mismatches\n" + "\n".join(
        f"1/{x:#010x}: got {g:#010x}, expected {w:#010x}" for x, g, w in bad[:12])
    return dut


def subnormals(rng):
    """Every leading-zero count of a subnormal significand, with a few fractions each, both signs."""
    out = []
    for top in range(23):
        for frac in (1 << top, (2 << top) - 1, (1 << top) | rng.getrandbits(top) if top else 1):
            out += [bits(0, 0, frac), bits(1, 0, frac)]
    return out


def boundaries(rng):
    """Inputs whose reciprocals overflow, or land just below 2**128, or are subnormal or tiny."""
    out = []
    for frac in range(0x1F_FFF0, 0x20_0011):             # around 2**-128 = 0x00200000: 1/x near 2**128
        out.append(bits(rng.getrandbits(1), 0, frac))
    for frac in (0x10_0000, 0x0F_FFFF, 0x3F_FFFF, 0x40_0000, 0x7F_FFFF, 0x20_1000, 0x20_0100):
        out.append(bits(0, 0, frac))
    for biased in (251, 252, 253, 254):                  # 1/x at 2**-125 .. 2**-128: subnormal results
        for frac in (0, 1, 2, 0x7F_FFFF, 0x7F_FFFE, 0x40_0000, 0x3F_FFFF, 0x55_5555, 0x2A_AAAB):
            out += [bits(0, biased, frac), bits(1, biased, frac)]
        out += [bits(rng.getrandbits(1), biased, rng.getrandbits(23)) for _ in range(20)]
    return out


def every_exponent(rng):
    out = []
    for biased in range(256):
        for frac in (0, 1, 0x7F_FFFF, rng.getrandbits(23), rng.getrandbits(23)):
            out.append(bits(rng.getrandbits(1), biased, frac))
    return out


# ------------------------------------------------------------------------------------------------

def test_special_values_and_subnormal_inputs():
    seed = 1
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(SPECIALS + subnormals(rng), seed)


def test_overflow_and_subnormal_results():
    seed = 2
    print(f"seed {seed}")
    patterns = boundaries(random.Random(seed))
    results = [w & 0x7FFF_FFFF for w in expected(patterns)]
    assert 0x7F80_0000 in results and 0x7F7F_FFE0 in results            # overflow, and just below
    assert sum(0 < r < 0x0080_0000 for r in results) > 50                 # subnormal results
    check(patterns, seed)


def test_every_exponent():
    seed = 3
    print(f"seed {seed}")
    check(every_exponent(random.Random(seed)), seed)


def test_random_patterns():
    seed = 4
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = check([rng.getrandbits(32) for _ in range(2000)], seed)
    assert dut.latency == 21                              # decode 2, divider 14, rounding 5


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline freezes; results still come out in order."""
    seed = 5
    print(f"seed {seed}")
    rng = random.Random(seed)
    patterns = SPECIALS + subnormals(rng)[:20] + [rng.getrandbits(32) for _ in range(400)]
    check(patterns, seed, enable_pattern=random_enable(random.Random(seed + 1000), 0.6))


@pytest.mark.parametrize("digits_per_stage, round_stages", [(2, 2), (14, 0)])
def test_shorter_pipelines(digits_per_stage, round_stages):
    """Fewer divider and rounding registers compute the same function, with their latency."""
    seed = 6
    print(f"seed {seed}")
    rng = random.Random(seed)
    patterns = SPECIALS + subnormals(rng)[:20] + [rng.getrandbits(32) for _ in range(200)]
    dut = check(patterns, seed, digits_per_stage=digits_per_stage, round_stages=round_stages)
    assert dut.latency == 2 + -(-14 // digits_per_stage) + round_stages

