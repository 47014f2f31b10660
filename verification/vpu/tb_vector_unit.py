"""cocotb testbench of :class:`rtl.vpu.vector_unit.VectorUnit`, scoreboarded against ``sim_models.vpu``.

Random commands of every operation the build runs (element-wise, reductions, composites), on operands of every
binary32 class (uniform bit patterns, values near the saturation limits, wide-range normals, specials),
with rows whose length is a multiple of the lane count, one more, or a single element; random idle
cycles on the command and operand streams and random stalls on ``o``; refused commands (length 0, too
long, an operation the build lacks) interleaved with good ones. Every result beat is compared bit for
bit and in order; the stream monitors check the valid/ready rules.

The NumPy generator is seeded from ``COCOTB_RANDOM_SEED`` (logged), so one number reproduces a run.
"""

import cocotb
import numpy as np

from rtl.vpu.layouts import COMPOSITES, ELEMENTWISE, REDUCTIONS, Op
from verification import config
from verification.bench import numpy_rng, start_clock_and_reset, wait_until
from verification.vpu.env import (
    VpuEnv,
    VpuJob,
    random_composite_job,
    random_job,
    random_rope_job,
    random_topk_job,
)


def _env(dut, rng, idle_prob, stall_prob):
    cfg = config()
    supported = tuple(Op[name] for name in cfg["supported"])
    return VpuEnv(dut, cfg["lanes"], cfg["slots"], rng, max_length=cfg["max_length"],
                  supported=supported, rope_length=cfg["rope_length"], max_k=cfg["max_k"],
                  idle_prob=idle_prob, stall_prob=stall_prob)


async def _run(dut, env, jobs, max_cycles):
    first = 0
    for job in jobs:
        count = len(env.scoreboard.expected)
        env.submit(job)
        dut._log.info("job %s: %d rows of %d, result beats #%d..#%d", job.op.name.lower(), job.rows,
                      job.n, first, first + len(env.scoreboard.expected) - count - 1)
        first += len(env.scoreboard.expected) - count
    await wait_until(dut.clk, env.done, max_cycles=max_cycles, what=f"{env.results} result beats")
    env.scoreboard.finish()


@cocotb.test()
async def elementwise_ops(dut):
    """Every element-wise operation, three commands each, under idle cycles and stalls."""
    rng = numpy_rng()
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.2, stall_prob=0.3)
    jobs = [random_job(rng, op, env.lanes) for op in ELEMENTWISE for _ in range(3)]
    rng.shuffle(jobs)
    await _run(dut, env, jobs, max_cycles=60_000)


@cocotb.test()
async def reductions(dut):
    """sum, sum_squares and max_reduce over rows up to 40 lanes long, back to back."""
    rng = numpy_rng(1)
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.1, stall_prob=0.3)
    jobs = [random_job(rng, op, env.lanes, max_n=40 * env.lanes) for op in REDUCTIONS for _ in range(4)]
    rng.shuffle(jobs)
    await _run(dut, env, jobs, max_cycles=60_000)


@cocotb.test()
async def refused_commands(dut):
    """Length 0, a length above the build's maximum and unbuilt operations get one error beat each
    and consume no operands; the commands around them run normally."""
    rng = numpy_rng(2)
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.2, stall_prob=0.2)
    good = [random_job(rng, op, env.lanes) for op in (Op.ADD, Op.EXP, Op.SUM)]
    bad = [VpuJob(Op.ADD, good[0].x, good[0].b, length=0),
           VpuJob(Op.EXP, good[1].x, length=env.max_length + 1)]
    bad += [random_job(rng, op, env.lanes) for op in COMPOSITES if op not in env.supported]
    await _run(dut, env, [good[0], bad[0], good[1], bad[1], *bad[2:], good[2]], max_cycles=20_000)


@cocotb.test()
async def composites(dut):
    """rmsnorm and softmax: rows of every scale (subnormal, huge, all zero, with NaN/Inf), eps from 0
    to the largest finite, lengths from 1 to the build's maximum, each row streamed once per pass."""
    rng = numpy_rng(3)
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.15, stall_prob=0.3)
    ops = [op for op in (Op.RMSNORM, Op.SOFTMAX) if op in env.supported]
    assert ops, "this build runs no composite"
    jobs = [random_composite_job(rng, op, env.lanes, max_n=24 * env.lanes) for op in ops for _ in range(6)]
    for op in ops:                                       # one row of the longest length
        job = random_composite_job(rng, op, env.lanes, max_rows=1)
        job.x = np.resize(job.x, (1, env.max_length))
        job.b = None if job.b is None else np.resize(job.b, (1, env.max_length))
        jobs.append(job)
    rng.shuffle(jobs)
    if Op.RMSNORM in env.supported:                      # eps NaN, +Inf or negative: refused
        x = jobs[0].x
        for eps in (0x7FC0_0000, 0x7F80_0000, 0xBF80_0000):
            jobs.insert(1, VpuJob(Op.RMSNORM, x, x, scalar0=eps))
    await _run(dut, env, jobs, max_cycles=200_000)


@cocotb.test()
async def rope(dut):
    """rope over head dimensions from 2 to the build's rope_length, tables from the documented recipe
    and operands of every class; odd and too long rows refused. Each row arrives rotated by half, then
    straight; cos and sin once."""
    rng = numpy_rng(4)
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.15, stall_prob=0.3)
    jobs = [random_rope_job(rng, env.lanes) for _ in range(10)]
    longest = random_rope_job(rng, env.lanes, max_rows=2)
    operands = (longest.x, longest.b, longest.c)
    jobs.append(VpuJob(Op.ROPE, *(np.resize(v, (2, env.rope_length)) for v in operands)))
    odd, long = (VpuJob(Op.ROPE, np.resize(jobs[0].x, (1, n)), np.resize(jobs[0].b, (1, n)),
                        np.resize(jobs[0].c, (1, n))) for n in (2 * env.lanes + 1, env.rope_length + 2))
    jobs[3:3] = [odd, long]
    await _run(dut, env, jobs, max_cycles=100_000)


@cocotb.test()
async def topk(dut):
    """topk with k from 1 to the build's max_k over rows full of ties, NaN, infinities and signed
    zeros, back to back with other commands; k of 0, above max_k or above the length refused."""
    rng = numpy_rng(5)
    await start_clock_and_reset(dut)
    env = _env(dut, rng, idle_prob=0.15, stall_prob=0.3)
    jobs = [random_topk_job(rng, env.lanes, env.max_k) for _ in range(14)]
    jobs.append(random_topk_job(rng, env.lanes, env.max_k, max_rows=1, max_n=env.max_length))
    jobs.insert(4, random_job(rng, Op.SUM, env.lanes))
    x = jobs[0].x
    for k in (0, env.max_k + 1, x.shape[1] + 1):
        jobs.insert(2, VpuJob(Op.TOPK, x, scalar0=k))
    await _run(dut, env, jobs, max_cycles=100_000)
