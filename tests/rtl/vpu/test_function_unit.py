"""FunctionUnit (exp, reciprocal, rsqrt, sigmoid, silu) against sim_models.vpu, Amaranth simulator.

Every function on the special values, the saturation limits, subnormals and seeded random patterns
over the whole binary32 range and over [-128, 128]; the functions interleaved vector by vector (the
op travels with its operand), and the clock enable toggled in one test.
"""

import random

import numpy as np
import pytest

from rtl.vpu.function_unit import FUNCTIONS, FunctionUnit
from rtl.vpu.layouts import Op
from sim_models import vpu
from sim_models.vpu_reference import special_patterns
from verification.pipeline import random_enable, run_pipeline

MODEL = {Op.EXP: vpu._exp_bits, Op.RECIPROCAL: vpu._reciprocal_bits, Op.RSQRT: vpu._rsqrt_bits,
         Op.SIGMOID: vpu._sigmoid_bits, Op.SILU: vpu._silu_bits}

EDGES = [0x42B1_7218, 0x42B1_7217, 0xC2CE_8ED0, 0xC2CE_8ECF, 0x42FF_FFFF, 0xC2FF_FFFF, 0x4300_0000,
         0xC300_0000, 0x3F80_0000, 0xBF80_0000, 0x3400_0000, 0xB400_0000, 0x0000_0001, 0x8000_0001,
         0x7E80_0000, 0x7F00_0000, 0x4180_0000, 0xC1A0_0000, 0xC2AE_0000, 0x4200_0000]


def patterns(rng, count):
    out = [int(v) for v in special_patterns()] + EDGES
    for _ in range(count // 2):
        out.append(rng.getrandbits(32))
    for _ in range(count - count // 2):
        out.append(int(np.float32(rng.uniform(-130.0, 130.0)).view(np.uint32)))
    return out


def check(ops_and_bits, seed, **kwargs):
    dut = FunctionUnit()
    got = run_pipeline(dut, [{"op": op, "x": x} for op, x in ops_and_bits], ["result"], **kwargs)
    bad = []
    for (op, x), result in zip(ops_and_bits, got, strict=True):
        want = int(MODEL[op](np.array([x], dtype=np.int64))[0])
        if result["result"] != want:
            bad.append(f"{op.name.lower()}({x:#010x}): got {result['result']:#010x}, expected {want:#010x}")
    assert not bad, f"seed {seed}: {len(bad)} mismatches\n" + "\n".join(bad[:12])


@pytest.mark.parametrize("op", FUNCTIONS, ids=lambda op: op.name.lower())
def test_each_function_matches_the_model(op):
    seed = 100 + op.value
    print(f"seed {seed}")
    rng = random.Random(seed)
    check([(op, x) for x in patterns(rng, 600)], seed)


def test_functions_interleaved_with_enable_toggling():
    seed = 7
    print(f"seed {seed}")
    rng = random.Random(seed)
    vectors = [(rng.choice(FUNCTIONS), x) for x in patterns(rng, 800)]
    check(vectors, seed, enable_pattern=random_enable(rng))


# ---- directed classes (every exponent, perfect squares, inputs next to a rounding boundary) -----

def _bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def every_exponent(rng):
    """Both signs of every exponent field, with extreme and random fractions."""
    return [_bits(rng.getrandbits(1), biased, frac) for biased in range(256)
            for frac in (0, 1, 0x7F_FFFF, rng.getrandbits(23))]


def perfect_squares(rng):
    """Significands that are perfect squares (an exact square root for one exponent parity) and
    their neighbours, at both parities."""
    out = []
    for _ in range(60):
        root = rng.randint(1 << 11, (1 << 12) - 1)
        sig = root * root
        sig <<= 24 - sig.bit_length()
        for parity in (0, 1):
            biased = 2 * rng.randint(0, 126) + 1 + parity
            out += [_bits(0, biased, (sig + delta) & 0x7F_FFFF) for delta in (-1, 0, 1)]
    return out


# exp(x) for these negative x lands next to a rounding boundary: a one-unit error in the last of
# the exponential core's 40 fraction bits (e.g. floor instead of ceiling for negative x) shows.
EXP_ROUNDING_SENSITIVE = [0xB2FF_6CCC, 0xB547_FBDF, 0xB873_E18B, 0xC035_F5DE, 0xB645_FDB3, 0xB731_7EBF,
                          0xB3BF_9195, 0xBD38_57EB, 0xB577_F3AB, 0xC0EB_781E, 0xB41F_E694, 0xC168_2FD6,
                          0xC18E_9D94, 0xBD85_DD5E, 0xB81F_E0B2]


@pytest.mark.parametrize("op", FUNCTIONS, ids=lambda op: op.name.lower())
def test_every_exponent(op):
    seed = 200 + op.value
    print(f"seed {seed}")
    rng = random.Random(seed)
    extra = perfect_squares(rng) if op == Op.RSQRT else []
    check([(op, x) for x in every_exponent(rng) + extra], seed)


def test_exp_next_to_rounding_boundaries():
    """exp(x) just below 1 (x near -2**-25 and -2**-24) and the sensitive inputs above."""
    xs = list(EXP_ROUNDING_SENSITIVE)
    for centre in (0xB300_0000, 0xB280_0000, 0x3300_0000, 0x3380_0000, 0xB2FF_6D00):
        xs += [centre + delta for delta in range(-32, 32)]
    check([(Op.EXP, x) for x in xs], 0)
