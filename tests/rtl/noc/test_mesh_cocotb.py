"""Mesh: cocotb regression on Verilator and Icarus against the reference model (sim_models.noc)."""

import pytest

from rtl.noc.layouts import NocParams
from rtl.noc.mesh import Mesh
from verification.runner import SIMULATORS, run_cocotb

#: The cocotb configuration: 32-bit flits, 2 classes x 1 VC of 4 flits per port. (The 4-VC router is
#: exercised by the single-router test; its mesh Verilog is too large to build inside the
#: regression's time budget.)
PARAMS = dict(width=32, vcs=2, depth=4, classes=2, coord_bits=2, hash_bits=4)

#: A 2x2 mesh on both simulators, and a 4x4 mesh on Icarus (its seven tests take about seven
#: minutes on two cores, most of it the zero-load test's 1024 cases); the Verilator build of the
#: 4x4 mesh is left out of the regression for its build time.
CASES = [(2, sim) for sim in SIMULATORS] + [(4, "icarus")]


@pytest.mark.cocotb
@pytest.mark.parametrize("k, sim", CASES, ids=[f"{k}x{k}-{sim}" for k, sim in CASES])
def test_mesh_cocotb(sim, k):
    cfg = dict(PARAMS, kx=k, ky=k)
    run_cocotb(lambda: Mesh(NocParams(**PARAMS), k, k), toplevel="noc_mesh", config=cfg,
               test_module="verification.noc.tb_mesh", sim=sim)
