"""MXQuantizer: cocotb regression on Verilator and Icarus: FP32 and BF16 inputs, the E2M1-only and the
all-formats instances (the latter with a random element format per block)."""

import pytest

from rtl.mx.quantizer import FORMATS, MXQuantizer
from verification.runner import SIMULATORS, run_cocotb

INSTANCES = {"e2m1_only": ("e2m1",), "all_formats": FORMATS}


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("input_format", ["fp32", "bf16"])
@pytest.mark.parametrize("instance", list(INSTANCES))
def test_quantizer_cocotb(sim, input_format, instance):
    formats = INSTANCES[instance]
    run_cocotb(lambda: MXQuantizer(input_format, formats), toplevel="mx_quantizer",
               config={"input_format": input_format, "formats": list(formats)},
               test_module="verification.mx.tb_quantizer", sim=sim)
