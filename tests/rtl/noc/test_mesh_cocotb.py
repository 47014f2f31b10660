"""Mesh: cocotb regression on Verilator and Icarus against the reference model (sim_models.noc)."""

import pytest

from rtl.noc.layouts import NocParams
from rtl.noc.mesh import Mesh
from verification.runner import SIMULATORS, run_cocotb

#: The cocotb configuration: 32-bit flits, 2 classes x 1 VC of 4 flits per port, checked packet by
#: packet against the reference model from Python. (Meshes of 2 classes x 2 VCs run in the traffic
#: mesh regression, ``test_traffic_mesh_cocotb.py``, and the 4-VC router in ``test_router_cocotb.py``.)
PARAMS = dict(width=32, vcs=2, depth=4, classes=2, coord_bits=2)

#: 2x2 and 4x4 meshes on both simulators. The 4x4 Icarus run takes several minutes (most of it the
#: zero-load test's 1024 cases); the 4x4 Verilator model builds quickly because only the mesh's ports
#: are visible to cocotb (``ports_only``) and its pieces are compiled without optimisation.
CASES = [(k, sim) for k in (2, 4) for sim in SIMULATORS]


@pytest.mark.cocotb
@pytest.mark.parametrize("k, sim", CASES, ids=[f"{k}x{k}-{sim}" for k, sim in CASES])
def test_mesh_cocotb(sim, k):
    cfg = dict(PARAMS, kx=k, ky=k)
    run_cocotb(lambda: Mesh(NocParams(**PARAMS), k, k), toplevel="noc_mesh", config=cfg,
               test_module="verification.noc.tb_mesh", sim=sim, ports_only=True)
