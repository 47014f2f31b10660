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
