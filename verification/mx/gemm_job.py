"""cocotb module behind ``poblano gemm`` and ``poblano sim``: one GEMM from files, on the RTL.

``POBLANO_GEMM_JOB`` names a directory holding ``inputs.npz`` (``a_codes``, ``a_scales``,
``b_codes``, ``b_scales``, optional ``c``) and ``job.json`` (``max_blocks``). The module runs the GEMM
through :mod:`verification.mx.gemm_driver` at full rate and writes ``out.npy`` (uint32 result
patterns) and ``stats.json`` (cycles, ideal cycles, simulated cycles, wall-clock seconds).
"""

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np

from verification import config
from verification.bench import start_clock_and_reset
from verification.mx import tiling
from verification.mx.gemm_driver import GemmHarness


@cocotb.test()
async def gemm(dut):
    """Run the GEMM of the job directory and write its results."""
    job = Path(os.environ["POBLANO_GEMM_JOB"])
    spec = json.loads((job / "job.json").read_text())
    cfg = config()
    with np.load(job / "inputs.npz") as data:
        arrays = {name: data[name] for name in data.files}
    a_codes, a_scales = arrays["a_codes"], arrays["a_scales"]
    b_codes, b_scales = arrays["b_codes"], arrays["b_scales"]
    c = arrays.get("c")
    m, k = a_codes.shape
    n = b_codes.shape[1]
    plan = tiling.plan(m, n, k, rows=cfg["rows"], cols=cfg["cols"], interleave=cfg["interleave"],
                       has_c=c is not None, max_blocks=spec.get("max_blocks", tiling.MAX_BLOCKS))
    await start_clock_and_reset(dut)
    harness = GemmHarness(dut, rng=random.Random(0))
    run = await harness.run(plan, a_codes, a_scales, b_codes, b_scales, tiling.as_bits(c, m, n))
    np.save(job / "out.npy", run.out_bits)
    (job / "stats.json").write_text(json.dumps({
        "cycles": run.cycles, "issue_cycles": run.issue_cycles, "tiles": len(plan.tiles),
        "simulated_cycles": run.total_cycles, "wall_seconds": run.wall_seconds,
    }, indent=2) + "\n")
