"""VectorUnit: cocotb regression on Verilator and Icarus against sim_models.vpu."""

import pytest

from rtl.vpu.vector_unit import SUPPORTED, VectorUnit
from verification.runner import SIMULATORS, run_cocotb

CONFIGS = [
    {"lanes": 4, "slots": 4, "max_length": 512, "rope_length": 128, "max_k": 8},
]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: f"{p['lanes']}lanes")
def test_vector_unit_cocotb(sim, params):
    config = dict(params, supported=[op.name for op in SUPPORTED])
    run_cocotb(lambda: VectorUnit(params["lanes"], slots=params["slots"], max_length=params["max_length"],
                                  rope_length=params["rope_length"], max_k=params["max_k"]),
               toplevel="vpu", config=config, test_module="verification.vpu.tb_vector_unit", sim=sim,
               ports_only=True)
