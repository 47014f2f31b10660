"""WeightPort behind cocotbext-axi's AXI RAM: cocotb regression on both simulators."""

import pytest

from rtl.tile.weight_port import WeightPort
from verification.runner import SIMULATORS, run_cocotb

CONFIGS = [
    {"data_bytes": 8, "max_burst": 16, "max_outstanding": 4},
    {"data_bytes": 4, "max_burst": 4, "max_outstanding": 2},
]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"db{c['data_bytes']}")
def test_weight_port_cocotb(sim, config):
    run_cocotb(lambda: WeightPort(**config), toplevel="weight_port", config=config,
               test_module="verification.tile.tb_weight_port", sim=sim)
