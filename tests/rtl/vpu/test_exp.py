"""Exp against sim_models.vpu._exp_bits (the model of ``vpu.exp``), in the Amaranth simulator.

Every binary32 input class: NaNs (any payload, both signs), ±Inf, ±0, subnormals, the saturation
limit ``|x| = 128`` on both sides, the overflow threshold near 88.72, the normal/subnormal and
subnormal/zero thresholds of the result near -87.34, -103.28 and -103.97, and seeded random
patterns over the whole binary32 range and over ``[-128, 128]``; results must match bit for bit.
Vectors stream one per cycle (:func:`verification.pipeline.run_pipeline`); ``en`` is toggled randomly
in two tests.
"""

import random

import numpy as np
import pytest

from rtl.vpu.exp import Exp
from sim_models import vpu
from sim_models.vpu_reference import special_patterns
from verification.pipeline import random_enable, run_pipeline


def f32_bits(value):
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def around(bits, spread):
    """Binary32 patterns within ``spread`` ulps of ``bits`` (same sign)."""
    sign, mag = bits & 0x8000_0000, bits & 0x7FFF_FFFF
    return [sign | (mag + d) for d in range(-spread, spread + 1) if 0 <= mag + d <= 0x7FFF_FFFF]


def check(xs, seed, tag_width=0, multiplier="dsp", enable_pattern=None):
    """Run ``xs`` (binary32 patterns) through Exp; every result must equal ``_exp_bits`` exactly."""
    print(f"seed {seed}")
    rng = random.Random(seed)
    tags = [rng.getrandbits(tag_width) for _ in xs]
    dut = Exp(tag_width=tag_width, multiplier=multiplier)
    vectors = [{"x": x, "tag": tag} if tag_width else {"x": x} for x, tag in zip(xs, tags, strict=True)]
    outputs = ["result", "tag_out"] if tag_width else ["result"]
    got = run_pipeline(dut, vectors, outputs, enable_pattern=enable_pattern)
    want = vpu._exp_bits(np.array(xs, dtype=np.int64))
    bad = [(x, g, int(w), tag) for x, g, w, tag in zip(xs, got, want, tags, strict=True)
           if g["result"] != w or g.get("tag_out", 0) != tag]
    assert not bad, f"seed {seed} ({multiplier}): {len(bad)} mismatches\n" + "\n".join(
        f"exp({x:#010x}): got {g['result']:#010x} tag {g.get('tag_out', 0)}, expected {w:#010x} tag {tag}"
        for x, g, w, tag in bad[:10])
    return dut


def random_patterns(rng, count):
    """Half uniform over all 2**32 patterns, half uniform in value over [-128, 128]."""
    xs = [rng.getrandbits(32) for _ in range(count // 2)]
    xs += [f32_bits(rng.uniform(-128.0, 128.0)) for _ in range(count - count // 2)]
    return xs


# ------------------------------------------------------------------------------------------------

def test_special_values():
    """NaNs -> 0x7FC00000, +Inf -> +Inf, -Inf -> +0, +-0 -> 1.0, subnormals and tiny inputs -> 1.0."""
    xs = [int(v) for v in special_patterns()]
    xs += [0x7F80_0001, 0x7FBF_FFFF, 0x7FC0_0001, 0x7FFF_FFFF, 0xFF80_0001, 0xFFC0_0000, 0xFFBF_FFFF,
           0x7F80_0000, 0xFF80_0000, 0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x3380_0000,
           0xB380_0000, 0x3300_0001, 0xB300_0001, 0x3F80_0000, 0xBF80_0000]
    dut = check(xs, seed=1)
    assert dut.latency == 17
    want = vpu._exp_bits(np.array([0x7F80_0001, 0xFF80_0000, 0x7F80_0000, 0x0000_0000], dtype=np.int64))
    assert [int(w) for w in want] == [0x7FC0_0000, 0x0000_0000, 0x7F80_0000, 0x3F80_0000]


def test_saturation_limit():
    """Around |x| = 128 (biased exponent 133 against 134) and the largest finite inputs."""
    xs = []
    for bits in (0x4300_0000, 0xC300_0000, 0x4380_0000, 0xC380_0000, 0x7F7F_FFFF, 0xFF7F_FFFF,
                 0x4B00_0000, 0xCB00_0000):
        xs += around(bits, 6)
    for biased in range(128, 140):
        for sign in (0, 1):
            xs += [(sign << 31) | (biased << 23) | frac for frac in (0, 1, 0x40_0000, 0x7F_FFFF)]
    check(xs, seed=2)


def test_result_range_thresholds():
    """Overflow to +Inf near 88.72, the smallest normal result near -87.34, the smallest subnormal
    near -103.28, rounding to +0 near -103.97; a spread of results in between."""
    xs = []
    for value in (88.72283935546875, 88.7228, -87.33654475, -87.3365, -103.27892990343184,
                  -103.972077, -103.97207708, -95.0, -100.5, -88.0, 80.0, 0.5, -0.5, 1.0):
        xs += around(f32_bits(value), 40)
    results = [int(w) for w in vpu._exp_bits(np.array(xs, dtype=np.int64))]
    finite = [r for r in results if r < 0x7F80_0000]
    assert {0, 1, 0x7F80_0000} <= set(results)                    # +0, 2**-149 and +Inf reached
    assert max(finite) >= 0x7F7F_0000                             # ... and just below the overflow
    assert any(0x7F_0000 <= r < 0x80_0000 for r in results)       # subnormals near the normal range
    assert any(0x80_0000 <= r < 0x81_0000 for r in results)       # smallest normals
    check(xs, seed=3)


# Negative inputs whose binary32 result changes if the core's t = -T is off by one unit of 2**-40
# (the mutant ``t = ~T``, i.e. n and f taken without the ceiling's +1): found by running that mutated
# model over 2 million random negative |x| < 128 (about one input in 10**5 is sensitive).
OFF_BY_ONE_SENSITIVE = [0xB2FF_6CCC, 0xB547_FBDF, 0xB873_E18B, 0xC035_F5DE, 0xB645_FDB3, 0xB731_7EBF,
                        0xB3BF_9195, 0xBD38_57EB, 0xB577_F3AB, 0xC0EB_781E, 0xB41F_E694, 0xC168_2FD6,
                        0xC18E_9D94, 0xBD85_DD5E, 0xB81F_E0B2]


def test_rounding_sensitive_inputs():
    """Results that sit next to a rounding boundary: exp(x) just below 1 (x near -2**-25 and
    -2**-24, where 1 - |x| meets the binade edge) and the off-by-one-sensitive inputs above."""
    xs = list(OFF_BY_ONE_SENSITIVE)
    for bits in (0xB300_0000, 0xB280_0000, 0x3300_0000, 0x3380_0000, 0xB2FF_6D00):
        xs += around(bits, 64)
    check(xs, seed=7)


def test_random_patterns():
    seed = 4
    check(random_patterns(random.Random(seed), 5000), seed=seed)


def test_clock_enable_and_tag():
    """``en`` low on random cycles freezes the core, the tables and RoundPack; tags stay aligned."""
    seed = 5
    rng = random.Random(seed)
    check(random_patterns(rng, 1200), seed=seed, tag_width=4, enable_pattern=random_enable(rng, 0.6))


def test_lut_multipliers():
    """``multiplier="lut"``: the same results without DSP tiles, ``en`` toggled."""
    seed = 6
    rng = random.Random(seed)
    xs = random_patterns(rng, 800) + [int(v) for v in special_patterns()] + around(f32_bits(88.72284), 4)
    dut = check(xs, seed=seed, tag_width=1, multiplier="lut", enable_pattern=random_enable(rng, 0.8))
    assert dut.latency == 23


def test_bad_parameters():
    with pytest.raises(ValueError, match="multiplier"):
        Exp(multiplier="dsp48")
    with pytest.raises(ValueError, match="tag_width"):
        Exp(tag_width=-1)
