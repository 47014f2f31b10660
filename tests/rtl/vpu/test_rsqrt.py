"""Rsqrt against sim_models.vpu._rsqrt_bits, bit for bit, in the Amaranth simulator.

Special values (±0, ±Inf, NaNs, negative numbers of every kind), subnormal inputs of every
leading-zero count (both exponent parities), every exponent with both parities, perfect squares and
their neighbours, and seeded random patterns, streamed one per cycle; the clock enable toggled in
one test.
"""

import random

import numpy as np
import pytest

from rtl.vpu.rsqrt import Rsqrt
from sim_models import vpu
from verification.pipeline import random_enable, run_pipeline

SPECIALS = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001,
            0xFF80_0001, 0x7FBF_FFFF, 0x7FFF_FFFF, 0xFFFF_FFFF, 0x3F80_0000, 0xBF80_0000, 0x7F7F_FFFF,
            0xFF7F_FFFF, 0x0080_0000, 0x8080_0000, 0x007F_FFFF, 0x807F_FFFF, 0x0000_0001, 0x8000_0001,
            0x4080_0000, 0x4000_0000, 0x3E80_0000, 0x3F00_0000]


def bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def expected(patterns):
    return [int(v) for v in vpu._rsqrt_bits(np.array(patterns, dtype=np.int64))]


def check(patterns, seed, enable_pattern=None, **kwargs):
    dut = Rsqrt(**kwargs)
    got = [g["result"] for g in run_pipeline(dut, [{"x": x} for x in patterns], ["result"],
                                               enable_pattern=enable_pattern)]
    bad = [(x, g, w) for x, g, w in zip(patterns, got, expected(patterns), strict=True) if g != w]
    assert not bad, f"seed {seed}: {len(bad)} mismatches\n" + "\n".join(
        f"rsqrt({x:#010x}): got {g:#010x}, expected {w:#010x}" for x, g, w in bad[:12])
    return dut


def subnormals(rng):
    """Every leading-zero count of a subnormal significand (so both parities of the normalized
    exponent), a few fractions each, and their negatives (NaN)."""
    out = []
    for top in range(23):
        for frac in (1 << top, (2 << top) - 1, (1 << top) | rng.getrandbits(top) if top else 1):
            out += [bits(0, 0, frac), bits(1, 0, frac)]
    return out


def every_exponent(rng):
    out = []
    for biased in range(256):
        for frac in (0, 1, 0x7F_FFFF, rng.getrandbits(23), rng.getrandbits(23)):
            out.append(bits(0, biased, frac))
        out.append(bits(1, biased, rng.getrandbits(23)))
    return out


def squares(rng):
    """Significands that are perfect squares (exact square roots for one exponent parity), neighbours."""
    out = []
    for _ in range(120):
        root = rng.randint(1 << 11, (1 << 12) - 1)                 # root**2 has 23 or 24 bits
        sig = root * root
        sig <<= 24 - sig.bit_length()
        for shift in (0, 1):
            biased = 2 * rng.randint(0, 126) + 1 + shift            # 1..254, both parities
            for delta in (-1, 0, 1):
                frac = (sig + delta) & 0x7F_FFFF
                out.append(bits(0, biased, frac))
    return out


# ------------------------------------------------------------------------------------------------

def test_special_values_and_subnormal_inputs():
    seed = 1
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(SPECIALS + subnormals(rng), seed)


def test_every_exponent_and_squares():
    seed = 2
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(every_exponent(rng) + squares(rng), seed)


def test_random_patterns():
    seed = 3
    print(f"seed {seed}")
    rng = random.Random(seed)
    patterns = [rng.getrandbits(31) for _ in range(1500)] + [rng.getrandbits(32) for _ in range(300)]
    dut = check(patterns, seed)
    assert dut.latency == 37                              # decode 2, square root 16, divider 14, rounding 5


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline freezes; results still come out in order."""
    seed = 4
    print(f"seed {seed}")
    rng = random.Random(seed)
    patterns = SPECIALS + subnormals(rng)[:20] + [rng.getrandbits(31) for _ in range(400)]
    check(patterns, seed, enable_pattern=random_enable(random.Random(seed + 1000), 0.6))


@pytest.mark.parametrize("sqrt_steps, digits, round_stages", [(3, 2, 2), (31, 14, 0)])
def test_shorter_pipelines(sqrt_steps, digits, round_stages):
    """Fewer registers in the square root, divider and rounding compute the same function."""
    seed = 5
    print(f"seed {seed}")
    rng = random.Random(seed)
    patterns = SPECIALS + subnormals(rng)[:20] + [rng.getrandbits(31) for _ in range(200)]
    dut = check(patterns, seed, sqrt_steps_per_stage=sqrt_steps, digits_per_stage=digits,
                round_stages=round_stages)
    assert dut.latency == 2 + -(-31 // sqrt_steps) + -(-14 // digits) + round_stages
