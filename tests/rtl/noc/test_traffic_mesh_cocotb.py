"""Traffic mesh (generators and checkers in hardware): cocotb on Verilator and Icarus."""

import pytest

from rtl.noc.layouts import NocParams
from rtl.noc.traffic_mesh import TrafficMesh
from verification.runner import SIMULATORS, run_cocotb

#: The configuration of ``poblano noc``'s hardware traffic: 64-bit flits (the header's ``user`` field
#: holds the generator's time stamp and sequence number), 2 classes x 2 VCs of 4 flits (the benchmark's
#: configuration, where every flow's VC comes from ``flow_vc``) with static and with dynamic VCs (32
#: order buckets), and 1 VC per class; 3-bit coordinates.
PARAMS = dict(width=64, depth=4, classes=2, coord_bits=3)
CASES = [(vcs, buckets, sim) for vcs, buckets in ((4, 0), (4, 32), (2, 0)) for sim in SIMULATORS]


@pytest.mark.cocotb
@pytest.mark.parametrize("vcs, order_buckets, sim", CASES,
                         ids=[f"vcs{vcs}-{'dynamic' if b else 'static'}-{sim}" for vcs, b, sim in CASES])
def test_traffic_mesh_cocotb(vcs, order_buckets, sim):
    params = dict(PARAMS, vcs=vcs, order_buckets=order_buckets)
    cfg = dict(params, kx=2, ky=2)
    run_cocotb(lambda: TrafficMesh(NocParams(**params), 2, 2), toplevel="noc_traffic_mesh", config=cfg,
               test_module="verification.noc.tb_traffic_mesh", sim=sim, ports_only=True)


def test_traffic_mesh_rejects_flits_too_narrow_for_the_tag():
    with pytest.raises(ValueError, match="user bits"):
        TrafficMesh(NocParams(width=32, vcs=2, classes=2, coord_bits=2), 2, 2)
