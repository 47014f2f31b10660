"""MacArray: cocotb regression on Verilator and Icarus, shapes 1x1, 2x3 and 4x4, both product mappings."""

import pytest

from rtl.mx.dot_product import ProductMapping
from rtl.mx.mac_array import MacArray
from verification.runner import SIMULATORS, run_cocotb

# (rows, cols, interleave, dsp_pairs, rom_pairs)
CONFIGS = [(1, 1, 8, 0, 0), (2, 3, 4, 16, 0), (4, 4, 8, 9, 7)]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("rows,cols,interleave,dsp_pairs,rom_pairs", CONFIGS,
                         ids=[f"{r}x{c}-i{i}-dsp{d}-rom{m}" for r, c, i, d, m in CONFIGS])
def test_mac_array_cocotb(sim, rows, cols, interleave, dsp_pairs, rom_pairs):
    run_cocotb(lambda: MacArray(rows, cols, interleave=interleave,
                                mapping=ProductMapping(dsp_pairs, rom_pairs)),
               toplevel="mac_array",
               config={"rows": rows, "cols": cols, "interleave": interleave, "dsp_pairs": dsp_pairs,
                       "rom_pairs": rom_pairs},
               test_module="verification.mx.tb_mac_array", sim=sim)
