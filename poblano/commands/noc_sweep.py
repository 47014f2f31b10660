"""``poblano noc-sweep``: sweep the offered rate of ``poblano noc``; CSV, latency-throughput plot.

The zero-load latency is the average latency measured at the lowest rate of the sweep (a very light
load); the saturation throughput is the highest offered rate whose average latency is at most 3x the
zero-load latency (and the accepted throughput there).

With hardware traffic every rate runs in one simulation. A rate so far beyond saturation that the
generators' source queues overflow within the run cannot be measured: the sweep stops there and
reports it as ``overflow_from`` (the summary's points are the rates below it).
"""

import csv
import json
from pathlib import Path

from poblano.commands import noc
from poblano.commands._values import comma_separated
from poblano.errors import UsageError

NAME = "noc-sweep"
HELP = "sweep the offered rate on the RTL mesh: CSV, latency-vs-throughput PNG, saturation"


def add_arguments(parser):
    noc.add_experiment_arguments(parser, per_point=" per point")
    parser.add_argument("--rates", default="0.02,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0",
                        help="comma-separated offered rates (flits/node/cycle), ascending")
    parser.add_argument("--out", default="build/noc-sweep", help="output directory for CSV and PNG")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def parse_rates(text):
    rates = comma_separated(text, "--rates", float, skip_empty=True)
    if not rates or any(not 0.0 < r <= 1.0 for r in rates) or rates != sorted(rates):
        raise UsageError(f"--rates must be ascending rates within (0, 1], not {text!r}")
    return rates


def saturation(points, zero_load):
    """Highest offered rate whose average latency is at most 3x ``zero_load`` (None if none)."""
    ok = [p for p in points if p["latency_avg"] is not None and p["latency_avg"] <= 3 * zero_load]
    return max(ok, key=lambda p: p["offered"]) if ok else None


def sweep(kx, ky, *, traffic, rates, packet_flits, cycles, warmup, seed, sim, out, generator="hardware",
          stall=0.0, vcs=4, order_buckets=0):
    common = dict(traffic=traffic, packet_flits=packet_flits, cycles=cycles, warmup=warmup, seed=seed,
                  sim=sim, generator=generator, stall=stall, vcs=vcs, order_buckets=order_buckets)
    overflow = None
    if generator == "hardware":
        # every rate in one simulation; the sweep ends at the first rate whose source queues overflow
        points = noc.experiment(kx, ky, rate=list(rates), **common)
        if points and "error" in points[-1]:
            overflow = points.pop()["offered"]
        if not points:
            raise UsageError(f"even the lowest rate ({rates[0]}) overflows the source queues")
    else:
        points = [noc.experiment(kx, ky, rate=r, **common) for r in rates]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"noc-{kx}x{ky}-{traffic}"
    with open(out / f"{stem}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(points[0]))
        writer.writeheader()
        writer.writerows(points)
    zero_load = points[0]["latency_avg"]
    sat = saturation(points, zero_load)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["accepted"] for p in points], [p["latency_avg"] for p in points], "o-")
    ax.axhline(3 * zero_load, linestyle=":", color="grey", label="3x zero-load latency")
    ax.set_xlabel("accepted throughput (flits/node/cycle)")
    ax.set_ylabel("average packet latency (cycles)")
    ax.set_title(f"{kx}x{ky} mesh, {traffic}, {packet_flits}-flit packets")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=100)
    plt.close(fig)
    bad = sum(p["lost"] + p["duplicated"] + p["corrupted"] + p["reordered"] for p in points)
    return {"mesh": f"{kx}x{ky}", "traffic": traffic, "packet_flits": packet_flits, "generator": generator,
            "vcs": vcs, "order_buckets": order_buckets,
            "zero_load_latency": zero_load,
            "overflow_from": overflow,
            "saturation_offered": sat["offered"] if sat else None,
            "saturation_accepted": sat["accepted"] if sat else None,
            "saturation_min_node": sat["accepted_min_node"] if sat else None,
            "checker_errors": bad, "csv": str(out / f"{stem}.csv"), "png": str(out / f"{stem}.png"),
            "points": points}


def run(args):
    checked = argparse_like(args, rate=0.5)
    kx, ky = noc.validate(checked)
    rates = parse_rates(args.rates)
    summary = sweep(kx, ky, traffic=args.traffic, rates=rates, packet_flits=args.packet_flits,
                    cycles=args.cycles, warmup=args.warmup, seed=args.seed, sim=args.sim, out=args.out,
                    generator=args.generator, stall=args.stall, vcs=checked.vcs,
                    order_buckets=checked.order_buckets)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            if key != "points":
                print(f"{key:20s} {value}")
    return 1 if summary["checker_errors"] else 0


def argparse_like(args, **overrides):
    from types import SimpleNamespace
    return SimpleNamespace(**{**vars(args), **overrides})
