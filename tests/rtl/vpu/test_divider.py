"""Divider against Python integer division and sim_models.vpu.divide_core, in the Amaranth simulator.

``quotient = floor(num * 2**26 / den)`` and ``sticky = (remainder != 0)`` for normalized 34-bit
operands: directed corners (equal operands, extreme ratios, exact quotients and their neighbours)
and seeded random vectors, streamed one per cycle, with the clock enable toggled in one test.
"""

import random

import numpy as np
import pytest

from rtl.vpu.divider import Divider
from sim_models import fp32, vpu
from verification.pipeline import random_enable, run_pipeline

LO, HI = 1 << 33, (1 << 34) - 1          # normalized operand range


def expected(num, den):
    q, r = divmod(num << 26, den)
    return q, int(r != 0)


def check(pairs, seed, tag_width=5, digits_per_stage=1, enable_pattern=None):
    rng = random.Random(seed)
    vectors = [(num, den, rng.getrandbits(tag_width) if tag_width else 0) for num, den in pairs]
    dut = Divider(tag_width=tag_width, digits_per_stage=digits_per_stage)
    outputs = ["quotient", "sticky"] + (["tag_out"] if tag_width else [])
    inputs = [{"num": n, "den": d, **({"tag": t} if tag_width else {})} for n, d, t in vectors]
    got = run_pipeline(dut, inputs, outputs, enable_pattern=enable_pattern)
    got = [(g["quotient"], g["sticky"], g.get("tag_out", 0)) for g in got]
    bad = [(v, g, expected(v[0], v[1])) for v, g in zip(vectors, got, strict=True)
           if g != (*expected(v[0], v[1]), v[2])]
    assert not bad, f"seed {seed}:\n" + "\n".join(
        f"num={v[0]:#011x} den={v[1]:#011x} tag={v[2]}: got q={g[0]:#x} sticky={g[1]} tag={g[2]}, "
        f"expected q={w[0]:#x} sticky={w[1]}" for v, g, w in bad[:10])
    return dut


def random_pairs(rng, count):
    return [(rng.randint(LO, HI), rng.randint(LO, HI)) for _ in range(count)]


def corner_pairs(rng):
    pairs = []
    specials = [LO, LO + 1, LO + 2, HI, HI - 1, HI - 2, (LO + HI) // 2, 0x3_5555_5555, 0x2_AAAA_AAAB,
                0x3_0000_0000, 0x2_0000_0001, 0x3_FFFF_FFFE]
    for num in specials:
        for den in specials:
            pairs.append((num, den))
    for _ in range(60):
        den = rng.randint(LO, HI)
        pairs += [(den, den), (den - 1 if den > LO else den, den), (den + 1 if den < HI else den, den),
                  (LO, den), (HI, den), (den, LO), (den, HI)]
    # Exact quotients (sticky 0) and their neighbours (sticky 1, tiny or large remainders):
    # den = c * 2**26 divides num * 2**26 when num = c * m.
    for c in range(128, 256, 3):
        for _ in range(4):
            m = rng.randint(-(-LO // c), HI // c)
            pairs += [(c * m, c << 26), (c * m + 1, c << 26), (c * m - 1, c << 26)]
    # Odd divisors just above 2**33 against numerators just below a multiple of them.
    for _ in range(60):
        den = rng.randint(LO, LO + 1000) | 1
        q = rng.randint(1 << 25, (1 << 27) - 1)
        num = (q * den) >> 26
        if LO <= num <= HI:
            pairs.append((num, den))
    return pairs


# ------------------------------------------------------------------------------------------------

def test_expected_matches_the_golden_model():
    """The integer division checked here is what ``divide_core`` rounds (2q + sticky, 2**-27)."""
    rng = random.Random(0)
    pairs = corner_pairs(rng) + random_pairs(rng, 500)
    num = np.array([p[0] for p in pairs], np.int64)
    den = np.array([p[1] for p in pairs], np.int64)
    zeros = np.zeros_like(num)
    model = vpu.divide_core(num, zeros, den, zeros, zeros)
    mine = [fp32.encode_rne(0, 2 * q + s, -27) for q, s in (expected(n, d) for n, d in pairs)]
    assert list(model) == mine


def test_corners():
    seed = 1
    check(corner_pairs(random.Random(seed)), seed)


def test_random_vectors():
    seed = 2
    print(f"seed {seed}")
    check(random_pairs(random.Random(seed), 3000), seed)


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline freezes; results (and tags) come out in order."""
    seed = 3
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(corner_pairs(rng)[:200] + random_pairs(rng, 600), seed,
          enable_pattern=random_enable(random.Random(seed + 1000), 0.6))


@pytest.mark.parametrize("digits_per_stage", [2, 3, 5, 14])
def test_stage_splits(digits_per_stage):
    """Any split of the 14 units into register stages computes the same function, with that latency."""
    seed = 10 + digits_per_stage
    rng = random.Random(seed)
    dut = check(corner_pairs(rng)[:150] + random_pairs(rng, 150), seed, tag_width=0,
                digits_per_stage=digits_per_stage)
    assert dut.latency == -(-14 // digits_per_stage)


def test_bad_parameters():
    for kwargs in ({"tag_width": -1}, {"tag_width": 1.5}, {"digits_per_stage": 0},
                   {"digits_per_stage": 15}, {"digits_per_stage": True}):
        with pytest.raises(ValueError):
            Divider(**kwargs)
