"""cocotb testbench of :class:`rtl.mx.block_dot.BlockDot` against ``sim_models.mx.fp32_add_scaled``.

Requests (two MX blocks and an accumulator) stream in with random idle cycles; results stream out
under random backpressure and are scoreboarded in order, bit for bit, against the golden step
(canonical NaN for a 0xFF scale). Random requests, then one hand-built request per numeric corner
class of :mod:`verification.mx.coverage` and random adversarial ones aimed at the same classes; the
last test checks that every class was hit.

Configuration (``verification.config()``): ``dsp_pairs``, ``rom_pairs`` (the product mapping).
"""

import random

import cocotb
import numpy as np

from rtl.mx.layouts import BlockDotRequest
from sim_models import fp32, mx
from verification.bench import numpy_rng, start_clock_and_reset, wait_until
from verification.mx import coverage, operands
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamSink

_SPECIAL_ACCS = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001,
                 0xFFC0_1234, 0x0000_0001, 0x807F_FFFF, 0x0080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF,
                 0x3F80_0000, 0x3FFF_FFFF]


def _expected(a, sa, b, sb, acc):
    dot = mx.block_dot_quarters(np.array(a), np.array(b))
    nan = sa == 0xFF or sb == 0xFF
    coverage.sample_step(acc, dot, sa + sb - 254, nan)
    if nan or fp32.is_nan(acc):
        return fp32.QNAN
    return mx.fp32_add_scaled(acc, dot, sa + sb - 254)


def _random_request(rng):
    a = [int(x) for x in rng.integers(0, 16, 32)]
    b = [int(x) for x in rng.integers(0, 16, 32)]
    sa, sb = (int(x) for x in rng.integers(110, 145, 2))
    acc = int(rng.integers(0, 1 << 32)) if rng.random() < 0.3 else \
        int(np.float32(rng.standard_normal() * 8).view(np.uint32))
    return a, sa, b, sb, acc


def _adversarial_request(rng):
    a, sa, b, sb, acc = _random_request(rng)
    kind = int(rng.integers(0, 9))
    if kind == 0:                                   # NaN scale on either side
        sa, sb = (0xFF, sb) if rng.random() < 0.5 else (sa, 0xFF)
    elif kind == 1:                                 # special accumulators
        acc = _SPECIAL_ACCS[int(rng.integers(0, len(_SPECIAL_ACCS)))]
    elif kind == 2:                                 # +-6 x +-6 everywhere: |dot| = 4608
        a = [7] * 32
        b = [7 if rng.random() < 0.5 else 15] * 32
    elif kind == 3:                                 # all-zero block
        a = [0 if rng.random() < 0.5 else 8 for _ in range(32)]
    elif kind == 4:                                 # overflow
        sa, sb = int(rng.integers(230, 255)), int(rng.integers(120, 150))
        acc = 0x7F7F_FFFF | (int(rng.integers(0, 2)) << 31)
    elif kind == 5:                                 # underflow: terms near 2**-149 and below
        sa, sb = int(rng.integers(0, 60)), int(rng.integers(0, 60))
        acc = int(rng.integers(0, 1 << 23)) if rng.random() < 0.5 else 0
        acc |= int(rng.integers(0, 2)) << 31
    elif kind == 6:                                 # exact and massive cancellation
        dot = mx.block_dot_quarters(np.array(a), np.array(b))
        exp = sa + sb - 254
        acc = mx.fp32_add_scaled(0, -dot + int(rng.integers(-2, 3)) * (rng.random() < 0.5), exp)
    elif kind == 7:                                 # ties: one 0.5 x 0.5 product on half an ulp
        e = int(rng.integers(100, 140))
        acc = (e << 23) | (0x7FFFFF if rng.random() < 0.5 else int(rng.integers(0, 1 << 23)))
        a, b = [0] * 32, [0] * 32
        a[int(rng.integers(0, 32))] = 1
        b = [1 if x else 0 for x in a]
        sa, sb = e + 105 - 120, 120
    else:                                           # subnormal accumulator
        acc = int(rng.integers(1, 1 << 23))
    return a, sa, b, sb, acc


async def _run(dut, requests, idle_prob, stall_prob):
    await start_clock_and_reset(dut)
    scoreboard = InOrderScoreboard("block_dot.o", formatter=lambda v: f"{v:#010x}")
    driver = StreamDriver(dut, "i", dut.clk, layout=BlockDotRequest, idle_prob=idle_prob)
    StreamSink(dut, "o", dut.clk, stall_prob=stall_prob, callback=scoreboard.got)
    for a, sa, b, sb, acc in requests:
        scoreboard.expect(_expected(a, sa, b, sb, acc))
        driver.append({"a": {"codes": a, "scale": sa}, "b": {"codes": b, "scale": sb}, "acc": acc})
    budget = int(len(requests) / (1 - idle_prob) / (1 - stall_prob) * 3) + 100
    await wait_until(dut.clk, lambda: scoreboard.pending == 0, max_cycles=budget,
                     what="every block-dot result")
    assert scoreboard.finish() == len(requests)


@cocotb.test()
async def random_requests_full_rate(dut):
    """Random blocks and accumulators, one request per cycle, no backpressure."""
    rng = numpy_rng(0)
    await _run(dut, [_random_request(rng) for _ in range(400)], 0.0, 0.0)


@cocotb.test()
async def adversarial_requests_with_stalls(dut):
    """One hand-built step per numeric corner class, then random NaN scales, special accumulators,
    extreme and zero blocks, overflow, underflow, cancellation, ties; random idle input cycles and
    random output stalls."""
    rng = numpy_rng(1)
    random.seed(int(rng.integers(0, 1 << 31)))
    corners = list(operands.CORNER_STEPS.values())
    await _run(dut, corners + [_adversarial_request(rng) for _ in range(800)], 0.3, 0.4)


@cocotb.test()
async def heavy_backpressure(dut):
    """Output ready one cycle in ten: the pipeline holds, nothing is lost or duplicated."""
    rng = numpy_rng(2)
    await _run(dut, [_adversarial_request(rng) for _ in range(150)], 0.0, 0.9)


@cocotb.test()
async def coverage_report(dut):
    """Report the numeric corner classes hit; fail if any was never hit."""
    coverage.check(dut._log)
