"""MXQuantizer: cocotb regression on Verilator and Icarus, FP32 and BF16 instances."""

import pytest

from rtl.mx.quantizer import MXQuantizer
from verification.runner import SIMULATORS, run_cocotb


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("input_format", ["fp32", "bf16"])
def test_quantizer_cocotb(sim, input_format):
    run_cocotb(lambda: MXQuantizer(input_format), toplevel="mx_quantizer",
               config={"input_format": input_format}, test_module="verification.mx.tb_quantizer",
               sim=sim)
