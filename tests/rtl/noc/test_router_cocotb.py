"""Router: one router, random traffic on every port and random credit return, on both simulators."""

import pytest

from rtl.noc.layouts import NocParams
from rtl.noc.router import Router
from verification.runner import SIMULATORS, run_cocotb

#: 32-bit flits, 2 classes x 2 VCs of 4 flits; static VCs, and dynamic VCs with 8 order buckets (few,
#: so that heads of different flows share buckets and get pinned).
PARAMS = dict(width=32, vcs=4, depth=4, classes=2, coord_bits=2)
CASES = [(buckets, sim) for buckets in (0, 8) for sim in SIMULATORS]


@pytest.mark.cocotb
@pytest.mark.parametrize("order_buckets, sim", CASES,
                         ids=[f"{'dynamic' if b else 'static'}-{sim}" for b, sim in CASES])
def test_router_cocotb(order_buckets, sim):
    params = dict(PARAMS, order_buckets=order_buckets)
    cfg = dict(params, x=1, y=1, packets=300)
    run_cocotb(lambda: Router(NocParams(**params), 1, 1), toplevel="noc_router", config=cfg,
               test_module="verification.noc.tb_router", sim=sim)
