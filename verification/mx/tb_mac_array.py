"""cocotb testbench of :class:`rtl.mx.mac_array.MacArray`, scoreboarded against ``sim_models.mx.matmul``.

Whole GEMMs are tiled onto the array (:mod:`verification.mx.tiling`) and driven through its five
streams (:mod:`verification.mx.gemm_driver`); every output must equal the golden model bit for bit.
Random GEMMs, adversarial GEMMs (:mod:`verification.mx.operands`), one output per numeric corner
class built by hand, random idle cycles on every input and random stalls on the output, K from 32 to
1024, K split into chunks chained through C, and back-to-back one-block tiles. Every accumulation step
sent is classified into the numeric corner classes of :mod:`verification.mx.coverage`; the last test
reports them and fails on a class never hit.

Configuration (``verification.config()``): ``rows``, ``cols``, ``interleave``.
"""

import random

import cocotb
import numpy as np

from sim_models import mx
from verification import config
from verification.bench import numpy_rng, start_clock_and_reset
from verification.mx import coverage, operands, tiling
from verification.mx.gemm_driver import GemmHarness


def _shape():
    cfg = config()
    return cfg["rows"], cfg["cols"], cfg["interleave"]


async def _gemm(dut, harness, operands_, *, max_blocks=tiling.MAX_BLOCKS, check_rate=False):
    rows, cols, slots = _shape()
    a_codes, a_scales, b_codes, b_scales, c = operands_
    m, k = a_codes.shape
    n = b_codes.shape[1]
    c_bits = tiling.as_bits(c, m, n)
    plan = tiling.plan(m, n, k, rows=rows, cols=cols, interleave=slots, has_c=c is not None,
                       max_blocks=max_blocks)
    coverage.sample_gemm(a_codes, a_scales, b_codes, b_scales, c_bits)
    run = await harness.run(plan, a_codes, a_scales, b_codes, b_scales, c_bits)
    want = mx.matmul(a_codes, a_scales, b_codes, b_scales, c).view(np.uint32)
    bad = np.argwhere(run.out_bits != want)
    if len(bad):
        i, j = bad[0]
        raise AssertionError(f"{len(bad)} of {m * n} outputs differ from sim_models.mx.matmul; first "
                             f"at ({i}, {j}): got {run.out_bits[i, j]:#010x}, expected {want[i, j]:#010x}")
    dut._log.info("GEMM %dx%dx%d in %d tiles: %d cycles, ideal %d (%.1f%%)", m, n, k, len(plan.tiles),
                  run.cycles, run.issue_cycles, 100 * run.utilization)
    if check_rate:
        # Full-rate streams: only the phase wait, pipeline fill and drain separate us from the ideal.
        bound = run.issue_cycles + 3 * slots + 2 * (rows + cols) + 20
        assert run.cycles <= bound, f"{run.cycles} cycles for {run.issue_cycles} beats: the array stalled"
    return run


async def _start(dut, stream, **harness_options):
    """Clock and reset; return the array shape, the test's NumPy generator (numbered ``stream``, seed
    logged) and a :class:`GemmHarness` whose idle/stall choices come from the next stream."""
    await start_clock_and_reset(dut)
    harness = GemmHarness(dut, rng=random.Random(stream + 1), **harness_options)
    return _shape(), numpy_rng(stream), harness


@cocotb.test()
async def random_tiles(dut):
    """Random GEMMs with a supplied C: two row tiles (one partial) and two column tiles (one partial)."""
    (rows, cols, slots), rng, harness = await _start(dut, 0)
    m, n = 2 * rows - (rows > 1), cols * slots + 3
    await _gemm(dut, harness, operands.random_gemm(rng, m, n, 96), check_rate=True)
    await _gemm(dut, harness, operands.random_gemm(rng, rows, cols * slots, 64, with_c=False),
                check_rate=True)


@cocotb.test()
async def adversarial_tiles(dut):
    """NaN scales, overflow, underflow, cancellation, +-6 and zero blocks, special C, rounding ties."""
    (rows, cols, slots), rng, harness = await _start(dut, 1)
    for kind in operands.KINDS:
        dut._log.info("adversarial kind %s", kind)
        await _gemm(dut, harness, operands.make(kind, rng, rows + 1, cols * slots, 128))


@cocotb.test()
async def corner_steps(dut):
    """One output per numeric corner class, reached by construction (:data:`operands.CORNER_STEPS`),
    among random outputs, with random idle cycles and output stalls."""
    (rows, cols, slots), rng, harness = await _start(dut, 7, idle_prob=0.2, stall_prob=0.3)
    await _gemm(dut, harness, operands.corner_gemm(rng))


@cocotb.test()
async def random_stalls(dut):
    """Random idle cycles on every input stream and random stalls on the output."""
    (rows, cols, slots), rng, harness = await _start(dut, 2, idle_prob=0.25, stall_prob=0.4)
    await _gemm(dut, harness, operands.random_gemm(rng, rows + 1, cols * slots + 1, 64))
    await _gemm(dut, harness, operands.make("special_c", rng, rows, cols * slots, 32))


@cocotb.test()
async def heavy_output_backpressure(dut):
    """Output ready one cycle in eight with one-block tiles: the result buffer fills, nothing is lost."""
    (rows, cols, slots), rng, harness = await _start(dut, 3, stall_prob=0.875)
    await _gemm(dut, harness, operands.random_gemm(rng, 3 * rows, 2 * cols * slots, 32))


@cocotb.test()
async def long_k(dut):
    """K = 1024 (32 blocks per output), one tile, at full rate."""
    (rows, cols, slots), rng, harness = await _start(dut, 4)
    await _gemm(dut, harness, operands.random_gemm(rng, rows, cols * slots, 1024), check_rate=True)


@cocotb.test()
async def k_chunks_chained_through_c(dut):
    """K split into chunks of at most two blocks, each chunk starting from the previous result."""
    (rows, cols, slots), rng, harness = await _start(dut, 5)
    await _gemm(dut, harness, operands.make("cancellation", rng, rows, cols * slots, 160), max_blocks=2)
    await _gemm(dut, harness, operands.random_gemm(rng, rows + 1, cols * slots, 96), max_blocks=1)


@cocotb.test()
async def back_to_back_one_block_tiles(dut):
    """Many K = 32 tiles back to back: accumulation of each overlaps the draining of the previous."""
    (rows, cols, slots), rng, harness = await _start(dut, 6)
    await _gemm(dut, harness, operands.random_gemm(rng, 2 * rows, 2 * cols * slots, 32))


@cocotb.test()
async def coverage_report(dut):
    """Report the numeric corner classes hit by the tests above; fail if any was never hit."""
    coverage.check(dut._log)
