"""Router: one router, random traffic on every port and random credit return, on both simulators."""

import pytest

from rtl.noc.layouts import NocParams
from rtl.noc.router import Router
from verification.runner import SIMULATORS, run_cocotb

#: 32-bit flits, 2 classes x 2 VCs of 4 flits (the 4-VC router with the in-order VC choice).
PARAMS = dict(width=32, vcs=4, depth=4, classes=2, coord_bits=2)


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_router_cocotb(sim):
    cfg = dict(PARAMS, x=1, y=1, packets=300)
    run_cocotb(lambda: Router(NocParams(**PARAMS), 1, 1), toplevel="noc_router", config=cfg,
               test_module="verification.noc.tb_router", sim=sim)
