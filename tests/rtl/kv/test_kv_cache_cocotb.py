"""KvCache: cocotb regression on Verilator and Icarus, against the golden model."""

import pytest

from rtl.kv.kv_cache import KvCache
from verification.runner import SIMULATORS, run_cocotb

#: Configurations: the default (the FPGA build), a small one whose pool fills in a few dozen
#: appends (no_space and seq_full come quickly; the same design as ``tests/flows/test_kv_trace.py``
#: replays, so they share one build), and an odd one: one bank (copy-on-write at half rate), a page
#: of two, non-power-of-two slots and table rows, two-bit ECC counters (saturation).
CONFIGS = {
    "default": {},
    "small": dict(pages=8, page_tokens=4, token_bits=16, seqs=4, max_pages_per_seq=4, banks=2),
    "odd": dict(pages=5, page_tokens=2, token_bits=8, seqs=3, max_pages_per_seq=3, banks=1,
                counter_bits=2),
}


#: Every configuration on every simulator, except the default one on Verilator: its C++ build alone
#: takes minutes on two cores, so that run is part of ``benchmarks/kv_cache.py`` (same testbench,
#: same build as the benchmark's), and the default configuration is covered here on Icarus.
CASES = [(name, sim) for name in CONFIGS for sim in SIMULATORS if (name, sim) != ("default", "verilator")]


@pytest.mark.cocotb
@pytest.mark.parametrize("name, sim", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_kv_cache_cocotb(sim, name):
    params = CONFIGS[name]
    run_cocotb(lambda: KvCache(**params), toplevel="kv_cache", config=params,
               test_module="verification.kv.tb_kv_cache", sim=sim)
