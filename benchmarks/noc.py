"""Fabric benchmark: zero-load latency per hop, rate sweeps on the RTL mesh (cocotb, Verilator).

Run: ``.venv/bin/python -m benchmarks.noc``. Writes ``build/noc-sweep/noc_sweep.json`` and the sweep
CSV/PNG there; the figures are copied by hand into ``benchmarks/results/noc.md``. Only the 2x2 mesh is
swept (the cocotb configuration's 4x4 build takes too long, and 8x8 needs the synthesizable traffic
generators, not written yet).
"""

import json
from pathlib import Path

from poblano.commands import noc_sweep
from sim_models.noc import zero_load_latency

OUT = Path("build/noc-sweep")
RATES = [0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def main():
    out = {"zero_load_per_hop": zero_load_latency((0, 0), (1, 0)) - zero_load_latency((0, 0), (0, 0))}
    for traffic in ("uniform", "neighbor"):
        s = noc_sweep.sweep(2, 2, traffic=traffic, rates=RATES, packet_flits=4, cycles=1000, warmup=200,
                            seed=1, sim="verilator", out="build/noc-sweep")
        out[f"2x2_{traffic}"] = s
        print(f"2x2 {traffic}: zero-load {s['zero_load_latency']:.2f}, saturation offered "
              f"{s['saturation_offered']} accepted {s['saturation_accepted']}, worst node "
              f"{s['saturation_min_node']}, checker errors {s['checker_errors']}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "noc_sweep.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
