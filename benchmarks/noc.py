"""Fabric benchmark: zero-load latency per hop, rate sweeps on the RTL mesh (cocotb, Verilator).

Run: ``.venv/bin/python -m benchmarks.noc [--mesh 2x2|4x4]`` (default both; the two 4x4 sweeps take
about 20 minutes on two cores). Writes ``build/noc-sweep/noc_sweep_<mesh>.json`` and each sweep's
CSV/PNG there; the figures are copied into ``benchmarks/results/noc.md``. Traffic comes from Python
drivers, one call per node per cycle, so 8x8 waits for the synthesizable traffic generators.
"""

import argparse
import json
from pathlib import Path

from poblano.commands import noc_sweep
from sim_models.noc import zero_load_latency

OUT = Path("build/noc-sweep")
RATES = {
    2: [0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    4: [0.02, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", choices=("2x2", "4x4"), action="append",
                        help="mesh to sweep (repeatable; default 2x2 and 4x4)")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for mesh in args.mesh or ["2x2", "4x4"]:
        k = int(mesh[0])
        out = {"zero_load_per_hop": zero_load_latency((0, 0), (1, 0)) - zero_load_latency((0, 0), (0, 0))}
        for traffic in ("uniform", "neighbor"):
            s = noc_sweep.sweep(k, k, traffic=traffic, rates=RATES[k], packet_flits=4, cycles=1000,
                                warmup=200, seed=1, sim="verilator", out=str(OUT / f"{mesh}-{traffic}"))
            out[f"{mesh}_{traffic}"] = s
            print(f"{mesh} {traffic}: zero-load {s['zero_load_latency']:.2f}, saturation offered "
                  f"{s['saturation_offered']} accepted {s['saturation_accepted']}, worst node "
                  f"{s['saturation_min_node']}, checker errors {s['checker_errors']}", flush=True)
            (OUT / f"noc_sweep_{mesh}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
