"""ExpCore against sim_models.vpu.exp_core, in the Amaranth simulator.

``m`` and ``n`` must match the golden model bit for bit for binary32 ``|x| < 128``: zeros, tiny and
subnormal inputs, the biased exponents where the product shift reaches the 58-bit product, every
boundary of the 256-entry tables' indices (both signs, where ``n`` is a floor for negative ``x``), the
ends of the binary32 result range (``x`` near +-88.7, +-103.9, +-127.99) and seeded random vectors.
Vectors stream one per cycle through the pipeline (:func:`verification.pipeline.run_pipeline`);
two tests toggle ``en`` randomly.
"""

import random

import numpy as np
import pytest

from rtl.vpu.exp_core import ExpCore
from sim_models import vpu
from verification.pipeline import random_enable, run_pipeline

LIMIT = 0x4300_0000            # 128.0: ExpCore's inputs are |x| below it
LN2 = float(np.log(2.0))


def f32_bits(value):
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def neighbours(bits, spread=1):
    """``bits`` and the binary32 patterns ``spread`` ulps either side (same sign, |x| < 128)."""
    sign, mag = bits & 0x8000_0000, bits & 0x7FFF_FFFF
    return [sign | (mag + d) for d in range(-spread, spread + 1) if 0 <= mag + d < LIMIT]


def fraction_index(bits):
    """``(i1, i2)`` of :func:`sim_models.vpu.exp_core` for ``bits`` (its steps 1-3, in Python ints)."""
    sign, biased, frac = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7F_FFFF
    sig = frac | (1 << 23) if biased else frac
    shift = 143 - max(biased, 1)
    t = 0 if shift >= 63 else (sig * vpu.LOG2E_Q33) >> shift
    f = (-t if sign else t) & ((1 << 40) - 1)
    return f >> 32, (f >> 24) & 0xFF


def check(xs, seed, tag_width=0, multiplier="dsp", enable_pattern=None):
    """Run ``xs`` (binary32 patterns, |x| < 128) and compare with the golden model bit for bit."""
    print(f"seed {seed}")
    assert all((x & 0x7FFF_FFFF) < LIMIT for x in xs)
    rng = random.Random(seed)
    vectors = [(x, rng.getrandbits(tag_width)) for x in xs]
    dut = ExpCore(tag_width=tag_width, multiplier=multiplier)
    outputs = ["m", "n", "tag_out"] if tag_width else ["m", "n"]
    got = [(r["m"], r["n"], r.get("tag_out", 0)) for r in run_pipeline(
        dut, [{"x": x, "tag": tag} if tag_width else {"x": x} for x, tag in vectors], outputs,
        enable_pattern=enable_pattern)]
    want_m, want_n = vpu.exp_core(np.array(xs, dtype=np.int64))
    bad = [(x, g, (int(wm), int(wn), tag))
           for (x, tag), g, wm, wn in zip(vectors, got, want_m, want_n, strict=True)
           if g != (int(wm), int(wn), tag)]
    assert not bad, f"seed {seed} ({multiplier}):\n" + "\n".join(
        f"x={x:#010x}: got m={g[0]:#x} n={g[1]} tag={g[2]}, expected m={w[0]:#x} n={w[1]} tag={w[2]}"
        for x, g, w in bad[:10])
    return dut


def random_inputs(rng, count):
    """Binary32 patterns with |x| < 128: half uniform over the biased exponents 0..133, half near 1."""
    xs = []
    for _ in range(count):
        biased = rng.randrange(134) if rng.random() < 0.5 else rng.randrange(110, 134)
        xs.append((rng.getrandbits(1) << 31) | (biased << 23) | rng.getrandbits(23))
    return xs


def table_boundary_inputs():
    """Inputs just below, at and above ``t = n + k/256`` (``i1`` boundaries) and
    ``t = n + j/256 + k/65536`` (``i2`` boundaries, random ``j``) for every ``k``, both signs of ``x``."""
    xs = []
    for n in (0, 3, -1, -7):
        for k in range(256):
            xs += neighbours(f32_bits((n + k / 256) * LN2))
    rng = random.Random(11)
    for n in (0, -1):
        for k in range(256):
            xs += neighbours(f32_bits((n + rng.randrange(256) / 256 + k / 65536) * LN2))
    return xs


# ------------------------------------------------------------------------------------------------

def test_zeros_tiny_and_subnormal_inputs():
    """+-0, subnormals, and every biased exponent around the product shift's reach (T = 0 up to 85)."""
    xs = [0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x807F_FFFF,
          0x0080_0000, 0x8080_0000, 0x0040_0000, 0x8040_0000]
    rng = random.Random(1)
    for biased in range(70, 134):            # biased 80..85: T = 0 or not; 86: first non-zero T
        for frac in (0, 1, 0x7F_FFFF, 0x7F_FFFE, 0x40_0000, rng.getrandbits(23)):
            for sign in (0, 1):
                xs.append((sign << 31) | (biased << 23) | frac)
    check(xs, seed=1)


def test_every_table_index_boundary():
    """All 256 boundaries of ``i1`` and of ``i2``, both signs: every index is reached from both sides."""
    xs = table_boundary_inputs()
    every = {(s, i) for s in (0, 1) for i in range(256)}
    assert {(x >> 31, fraction_index(x)[0]) for x in xs} == every
    assert {(x >> 31, fraction_index(x)[1]) for x in xs} == every
    check(xs, seed=2)


def test_ends_of_the_result_range():
    """x near +-88.72 (2**128), +-87.34 (2**-126), +-103.28 / -103.97 (2**-149 / 2**-150) and +-127.99."""
    xs = []
    for value in (88.72283, 87.33654, 103.27893, 103.972077, 127.99999, 127.5, 64.0, 1.0, 0.5):
        for sign in (1, -1):
            xs += neighbours(f32_bits(sign * value), spread=4)
    xs += [0x42FF_FFFF, 0xC2FF_FFFF, 0x42FF_FFFE, 0xC2FF_FFFE]      # +-(128 - 2**-17): largest |x|
    check(xs, seed=3)


def test_random_inputs():
    seed = 4
    dut = check(random_inputs(random.Random(seed), 4000), seed=seed, tag_width=3)
    assert dut.latency == 12


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline and the table reads freeze; tags stay aligned."""
    seed = 5
    rng = random.Random(seed)
    check(random_inputs(rng, 800), seed=seed, tag_width=6, enable_pattern=random_enable(rng, 0.6))


def test_lut_multipliers():
    """``multiplier="lut"``: the same function through shift-and-add products, en toggled."""
    seed = 6
    rng = random.Random(seed)
    xs = random_inputs(rng, 600) + [0, 0x8000_0000, 0x42FF_FFFF, 0xC2FF_FFFF, 0x8000_0001]
    xs += [x for x in table_boundary_inputs() if rng.random() < 0.1]
    dut = check(xs, seed=seed, tag_width=2, multiplier="lut", enable_pattern=random_enable(rng, 0.8))
    assert dut.latency == 18


def test_bad_parameters():
    with pytest.raises(ValueError, match="multiplier"):
        ExpCore(multiplier="dsp48")
    with pytest.raises(ValueError, match="tag_width"):
        ExpCore(tag_width=-1)


def test_width_assumptions_of_the_datapath():
    """The bounds ExpCore's register widths rely on, from the model's constants (exhaustive)."""
    hi = np.array(vpu.EXP_TABLE_HI, dtype=np.int64)
    lo = np.array(vpu.EXP_TABLE_LO, dtype=np.int64) - (1 << 32)
    assert hi.min() >= 1 << 32 and hi.max() < 1 << 33 and lo.min() >= 0 and lo.max() < 1 << 24
    a, b = np.meshgrid(hi, lo)
    ab = a + ((a * b) >> 32)                          # every (i1, i2) pair
    assert ab.max() < 1 << 33                         # ab fits 33 bits, ab >> 16 fits 17
    assert vpu.LN2_Q18 < 1 << 18                      # p >> 14 = (r * LN2_Q18) >> 18 fits 18 bits
    t_max = ((1 << 24) - 1) * vpu.LOG2E_Q33 >> 10     # largest |x| < 128: shift 10
    assert t_max < 185 << 40 and (t_max >> 40) == 184
    assert ((1 << 24) - 1) * vpu.LOG2E_Q33 < 1 << 58  # biased <= 85 (shift >= 58) gives T = 0
