"""IntegerSqrt against math.isqrt (and sim_models.vpu.isqrt_array), in the Amaranth simulator.

Radicands shaped as the rsqrt unit builds them (``sig << (36 + p)``), perfect squares and their
neighbours, the extremes of the 61-bit range and seeded random integers, streamed one per cycle,
with the clock enable toggled in one test.
"""

import math
import random

import numpy as np
import pytest

from rtl.vpu.isqrt import IntegerSqrt
from sim_models import vpu
from verification.pipeline import random_enable, run_pipeline

TOP = (1 << 61) - 1


def check(radicands, seed, tag_width=3, steps_per_stage=2, enable_pattern=None):
    rng = random.Random(seed)
    vectors = [(v, rng.getrandbits(tag_width) if tag_width else 0) for v in radicands]
    dut = IntegerSqrt(tag_width=tag_width, steps_per_stage=steps_per_stage)
    outputs = ["root"] + (["tag_out"] if tag_width else [])
    got = run_pipeline(dut, [{"radicand": v, **({"tag": t} if tag_width else {})} for v, t in vectors],
                       outputs, enable_pattern=enable_pattern)
    got = [(g["root"], g.get("tag_out", 0)) for g in got]
    bad = [(v, g) for v, g in zip(vectors, got, strict=True) if g != (math.isqrt(v[0]), v[1])]
    assert not bad, f"seed {seed}:\n" + "\n".join(
        f"radicand={v[0]:#x} tag={v[1]}: got root={g[0]:#x} tag={g[1]}, expected {math.isqrt(v[0]):#x}"
        for v, g in bad[:10])
    return dut


def shaped(rng, count):
    """Radicands of ``_rsqrt_parts``: normalized 24-bit significand shifted by 36 or 37."""
    return [rng.randint(1 << 23, (1 << 24) - 1) << (36 + rng.getrandbits(1)) for _ in range(count)]


def corner_radicands(rng):
    out = [0, 1, 2, 3, 4, 5, TOP, TOP - 1, 1 << 60, (1 << 60) - 1, 1 << 59, (1 << 59) - 1, 1 << 61 >> 1]
    for sig in (1 << 23, (1 << 23) + 1, (1 << 24) - 1, (1 << 24) - 2, 0xC0_0000, 0xB5_04F3, 0xB5_04F4):
        out += [sig << 36, sig << 37]
    for _ in range(150):                             # perfect squares and their neighbours
        s = rng.randint(1, math.isqrt(TOP))
        out += [s * s, s * s - 1, min(s * s + 2 * s, TOP), min(s * s + 1, TOP)]
    for k in range(61):                              # every bit length
        out += [1 << k, (1 << (k + 1)) - 1, rng.randint(1 << k, (1 << (k + 1)) - 1)]
    return out


# ------------------------------------------------------------------------------------------------

def test_model_isqrt_is_exact():
    """The golden model's float-estimate isqrt agrees with math.isqrt on the vectors used here."""
    rng = random.Random(0)
    values = corner_radicands(rng) + shaped(rng, 2000) + [rng.randint(0, TOP) for _ in range(2000)]
    assert list(vpu.isqrt_array(np.array(values, np.int64))) == [math.isqrt(v) for v in values]


def test_corners():
    seed = 1
    check(corner_radicands(random.Random(seed)), seed)


def test_random_vectors():
    seed = 2
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(shaped(rng, 1500) + [rng.randint(0, TOP) for _ in range(1500)], seed)


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline freezes; roots (and tags) come out in order."""
    seed = 3
    print(f"seed {seed}")
    rng = random.Random(seed)
    check(corner_radicands(rng)[:200] + shaped(rng, 400), seed,
          enable_pattern=random_enable(random.Random(seed + 1000), 0.6))


@pytest.mark.parametrize("steps_per_stage", [1, 3, 4, 31])
def test_stage_splits(steps_per_stage):
    """Any split of the 31 steps into register stages computes the same function, with that latency."""
    seed = 10 + steps_per_stage
    rng = random.Random(seed)
    dut = check(corner_radicands(rng)[:150] + shaped(rng, 150), seed, tag_width=0,
                steps_per_stage=steps_per_stage)
    assert dut.latency == -(-31 // steps_per_stage)


def test_bad_parameters():
    for kwargs in ({"tag_width": -1}, {"steps_per_stage": 0}, {"steps_per_stage": 32}):
        with pytest.raises(ValueError):
            IntegerSqrt(**kwargs)
