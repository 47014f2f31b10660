"""cocotb module behind ``poblano vpu --sim``: one command from a file on the vector-unit RTL.

Environment (set by :mod:`poblano.commands.vpu` through ``run_cocotb(extra_env=...)``):

``POBLANO_VPU_JOB``
    ``.npz`` with ``op`` (the operation's name), ``x`` and, where the operation takes them, ``b`` and
    ``c`` (``uint32`` bit patterns, rows x length), and ``scalar0``/``scalar1`` (bit patterns).
``POBLANO_VPU_OUT``
    ``.npz`` written at the end: ``beats`` (``uint32``, beats x lanes), ``error`` and ``last`` flags
    per beat, and ``cycles`` from the command's acceptance to its last result beat.

Operands stream at full rate and ``o`` is always ready. Comparing with the golden model is the
caller's job.
"""

import os

import cocotb
import numpy as np

from rtl.vpu.layouts import Op
from verification import config
from verification.bench import TransferSpan, numpy_rng, start_clock_and_reset, wait_until
from verification.vpu.env import VpuEnv, VpuJob


@cocotb.test()
async def run_file(dut):
    cfg = config()
    with np.load(os.environ["POBLANO_VPU_JOB"]) as data:
        arrays = {name: data[name] for name in data.files}
    op = Op[str(arrays["op"]).upper()]
    job = VpuJob(op, arrays["x"], arrays.get("b"), arrays.get("c"), int(arrays["scalar0"]),
                 int(arrays["scalar1"]))
    await start_clock_and_reset(dut)
    env = VpuEnv(dut, cfg["lanes"], cfg["slots"], numpy_rng(), max_length=cfg["max_length"], check=False)
    span = TransferSpan(dut, dut.clk, ["cmd"], "o")
    env.submit(job)
    await wait_until(dut.clk, env.done, max_cycles=40 * job.x.size + 2000, what=f"{env.results} result beats")
    span.stop()
    beats = np.array([beat["data"] for beat in env.received], dtype=np.uint32)
    np.savez(os.environ["POBLANO_VPU_OUT"], beats=beats, cycles=np.int64(span.cycles),
             error=np.array([beat["error"] for beat in env.received], dtype=np.uint8),
             last=np.array([beat["last"] for beat in env.received], dtype=np.uint8))
    dut._log.info("%s: %d result beats in %d cycles", op.name.lower(), len(beats), span.cycles)
