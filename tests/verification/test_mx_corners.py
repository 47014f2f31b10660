"""The hand-built corner steps reach every numeric corner class, whatever a run's seed."""

import numpy as np
import pytest

from sim_models import mx
from verification.mx import coverage, operands


def _classes(a, sa, b, sb, acc):
    dot = mx.block_dot_quarters(np.array(a, np.uint8), np.array(b, np.uint8))
    return coverage.classify_step(acc, dot, sa + sb - 254, sa == 0xFF or sb == 0xFF)


def test_there_is_one_corner_step_per_class():
    assert sorted(operands.CORNER_STEPS) == sorted(coverage.CLASSES)


@pytest.mark.parametrize("name", coverage.CLASSES)
def test_corner_step_reaches_its_class(name):
    assert name in _classes(*operands.CORNER_STEPS[name])


def test_corner_gemm_puts_each_step_on_the_diagonal():
    a_codes, a_scales, b_codes, b_scales, c = operands.corner_gemm(np.random.default_rng(0))
    c_bits = c.view(np.uint32)
    for i, name in enumerate(operands.CORNER_STEPS):
        step = (a_codes[i, :32], int(a_scales[i, 0]), b_codes[:32, i], int(b_scales[0, i]),
                int(c_bits[i, i]))
        assert name in _classes(*step), name
