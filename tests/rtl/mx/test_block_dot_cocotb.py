"""BlockDot: cocotb regression on Verilator and Icarus, all-LUT and hard-block product mappings."""

import pytest

from rtl.mx.block_dot import BlockDot
from rtl.mx.dot_product import ProductMapping
from verification.runner import SIMULATORS, run_cocotb

MAPPINGS = [(0, 0), (9, 7)]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("dsp_pairs,rom_pairs", MAPPINGS, ids=[f"dsp{d}-rom{r}" for d, r in MAPPINGS])
def test_block_dot_cocotb(sim, dsp_pairs, rom_pairs):
    run_cocotb(lambda: BlockDot(mapping=ProductMapping(dsp_pairs, rom_pairs)), toplevel="block_dot",
               config={"dsp_pairs": dsp_pairs, "rom_pairs": rom_pairs},
               test_module="verification.mx.tb_block_dot", sim=sim)
