"""AxilRegisters with the tile's map on Verilator and Icarus: cocotbext-axi's AXI4-Lite manager under
random backpressure, through the host driver, against the register block's model."""

import pytest

from rtl.tile.axil_registers import AxilRegisters
from rtl.tile.register_map import tile_register_map
from verification.runner import SIMULATORS, run_cocotb

# Sizes that are not powers of two: the regions' range checks inside their windows are exercised.
BUILD = {"spad_words": 5000, "prog_words": 100}


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_axil_registers_cocotb(sim):
    run_cocotb(lambda: AxilRegisters(tile_register_map(**BUILD)), toplevel="axil_registers",
               config=BUILD, test_module="verification.tile.tb_axil_registers", sim=sim)
