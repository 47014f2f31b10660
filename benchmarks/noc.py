"""Fabric benchmark: zero-load latency per hop, rate sweeps on the RTL mesh (cocotb, Verilator).

Run: ``.venv/bin/python -m benchmarks.noc [--mesh 2x2|4x4|8x8 ...] [--generator hardware|python]``.
The default sweeps 4x4 and 8x8 with the synthesizable traffic generators (``--generator hardware``);
``--generator python --mesh 2x2 --mesh 4x4`` runs the same sweeps with Python-driven traffic, the
cross-check of the hardware generators (2 classes x 1 VC; about 20 minutes for 4x4).
``--order-buckets N`` sweeps the routers with dynamic VCs and ``N`` order buckets instead of static
VCs (hardware generator only). Writes ``build/noc-sweep/noc_sweep_<generator>_<mesh>.json`` (with
``_buckets<N>`` before ``.json`` for dynamic VCs) and each sweep's CSV/PNG there; the figures are
copied into ``benchmarks/results/noc.md``.
"""

import argparse
import json
from pathlib import Path

from poblano.commands import noc_sweep
from rtl.noc.layouts import ORDER_BUCKETS
from sim_models.noc import zero_load_latency

OUT = Path("build/noc-sweep")
RATES = {
    2: [0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    4: [0.02, 0.2, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0],
    8: [0.02, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.8, 1.0],
}
#: Measured and warm-up cycles per point: hardware traffic runs long windows cheaply; Python-driven
#: traffic (the cross-check) keeps the short window it can afford.
CYCLES = {"hardware": 4000, "python": 1000}
WARMUP = {"hardware": 1000, "python": 200}
#: VCs per port: 2 classes x 2 VCs with hardware traffic (the goal's configuration); Python-driven traffic
#: has one configuration, 2 classes x 1 VC.
VCS = {"hardware": 4, "python": 2}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", choices=("2x2", "4x4", "8x8"), action="append",
                        help="mesh to sweep (repeatable; default 4x4 and 8x8)")
    parser.add_argument("--generator", choices=("hardware", "python"), default="hardware")
    parser.add_argument("--order-buckets", type=int, choices=ORDER_BUCKETS, default=0, metavar="0|2..64",
                        help="dynamic VCs with this many order buckets (default 0: static VCs)")
    args = parser.parse_args(argv)
    if args.generator == "python" and "8x8" in (args.mesh or []):
        parser.error("the Python-driven mesh has 2-bit coordinates: at most 4x4")
    if args.generator == "python" and args.order_buckets:
        parser.error("--order-buckets needs --generator hardware (the Python-driven mesh has static VCs)")
    tag = f"{args.generator}_buckets{args.order_buckets}" if args.order_buckets else args.generator
    OUT.mkdir(parents=True, exist_ok=True)
    for mesh in args.mesh or ["4x4", "8x8"]:
        k = int(mesh[0])
        out = {"zero_load_per_hop": zero_load_latency((0, 0), (1, 0)) - zero_load_latency((0, 0), (0, 0)),
               "generator": args.generator, "order_buckets": args.order_buckets}
        for traffic in ("uniform", "neighbor"):
            s = noc_sweep.sweep(k, k, traffic=traffic, rates=RATES[k], packet_flits=4,
                                cycles=CYCLES[args.generator], warmup=WARMUP[args.generator], seed=1,
                                sim="verilator", generator=args.generator, vcs=VCS[args.generator],
                                order_buckets=args.order_buckets,
                                out=str(OUT / f"{tag.replace('_', '-')}-{mesh}-{traffic}"))
            out[f"{mesh}_{traffic}"] = s
            print(f"{mesh} {traffic} ({tag}): zero-load {s['zero_load_latency']:.2f}, saturation "
                  f"offered {s['saturation_offered']} accepted {s['saturation_accepted']}, worst node "
                  f"{s['saturation_min_node']}, checker errors {s['checker_errors']}", flush=True)
            (OUT / f"noc_sweep_{tag}_{mesh}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
