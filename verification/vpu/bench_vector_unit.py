"""cocotb benchmark of :class:`rtl.vpu.vector_unit.VectorUnit`: cycles of every operation.

For each operation the build runs (or those named in ``POBLANO_VPU_BENCH_OPS``, comma-separated) and
each row length of ``POBLANO_VPU_BENCH_LENGTHS`` (default 64, 1024, 8192), one command of one row
with random operands, no idle cycles and no stalls: the cycles from the command's acceptance to its
last result beat (both included), checked bit for bit against the golden model like the regression.
Writes JSON to ``POBLANO_VPU_BENCH_OUT``.
"""

import json
import os

import cocotb
import numpy as np

from rtl.vpu.layouts import PASSES, Op
from verification import config
from verification.bench import TransferSpan, numpy_rng, start_clock_and_reset, wait_until
from verification.vpu.env import VpuEnv, VpuJob, random_operand


@cocotb.test()
async def cycles_per_operation(dut):
    cfg = config()
    rng = numpy_rng()
    await start_clock_and_reset(dut)
    supported = tuple(Op[name] for name in cfg["supported"])
    env = VpuEnv(dut, cfg["lanes"], cfg["slots"], rng, max_length=cfg["max_length"], supported=supported)
    span = TransferSpan(dut, dut.clk, ["cmd"], "o")
    lengths = [int(v) for v in os.environ.get("POBLANO_VPU_BENCH_LENGTHS", "64,1024,8192").split(",")]
    results = {}
    only = os.environ.get("POBLANO_VPU_BENCH_OPS")
    ops = supported if not only else [op for op in supported if op.name.lower() in only.split(",")]
    for op in ops:
        for n in lengths:
            if op == Op.ROPE and n > env.rope_length:    # rope rows are one head (rope_length at most)
                continue
            operands = {name: random_operand(rng, 1, n) for name in "xbc"}
            if op in PASSES:                         # rows of normal values (specials give all-NaN rows)
                operands = {name: rng.standard_normal((1, n)).astype(np.float32).view(np.uint32)
                            for name in "xbc"}
            # scale by 1.5; clamp to [-4, 4]; rmsnorm's eps 1e-6; topk's k the build's largest
            scalar0 = {Op.CLAMP: 0xC080_0000, Op.RMSNORM: 0x3586_37BD,
                       Op.TOPK: env.max_k}.get(op, 0x3FC0_0000)
            job = VpuJob(op, operands["x"], operands["b"], operands["c"], scalar0=scalar0,
                         scalar1=0x4080_0000)
            span.restart()
            env.submit(job)
            await wait_until(dut.clk, env.done, max_cycles=40 * n + 2000, what=f"{op.name} of {n}")
            results.setdefault(op.name.lower(), {})[n] = span.cycles
            cocotb.log.info("%s n=%d: %d cycles", op.name.lower(), n, span.cycles)
    env.scoreboard.finish()
    span.stop()
    with open(os.environ["POBLANO_VPU_BENCH_OUT"], "w") as out:
        json.dump(results, out, indent=2)
