"""``poblano noc``: synthetic traffic on the RTL mesh (cocotb), with the reference model checking it.

The mesh is built in the cocotb configuration of the regression (32-bit flits, 2 classes x 1 VC of 4
flits per port, 2-bit coordinates, so at most 4x4; the builds are shared with the tests, and the first
4x4 Verilator build takes about six minutes). Traffic comes from Python drivers
(``verification/noc/tb_experiment.py``), so a 4x4 point of 1200 cycles takes a few minutes; the
synthesizable generators that would make 8x8 sweeps practical are not written yet.
"""

import json
import re
import tempfile
from pathlib import Path

from poblano.errors import UsageError

NAME = "noc"
HELP = "run synthetic traffic on the RTL mesh and report throughput, latency and checker counts"

#: The mesh configuration (also the one of tests/rtl/noc/test_mesh_cocotb.py).
PARAMS = dict(width=32, vcs=2, depth=4, classes=2, coord_bits=2, hash_bits=4)


def add_experiment_arguments(parser, *, per_point=""):
    """The arguments ``noc`` and ``noc-sweep`` share, except the offered rate."""
    parser.add_argument("--mesh", default="2x2", metavar="KXxKY", help="mesh size (default 2x2)")
    parser.add_argument("--traffic", default="uniform",
                        metavar="uniform|transpose|bitcomp|hotspot|neighbor", help="destination pattern")
    parser.add_argument("--packet-flits", type=int, default=4, help="flits per packet (1..15)")
    parser.add_argument("--cycles", type=int, default=1000, help=f"measured cycles{per_point}")
    parser.add_argument("--warmup", type=int, default=200, help=f"warm-up cycles before measuring{per_point}")
    parser.add_argument("--seed", type=int, default=1, help="traffic seed")
    parser.add_argument("--sim", default="verilator", metavar="verilator|icarus", help="simulator")


def add_arguments(parser):
    add_experiment_arguments(parser)
    parser.add_argument("--rate", type=float, default=0.1, help="offered flits per node per cycle, 0..1")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def parse_mesh(text, max_side):
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text or "")
    if not m:
        raise UsageError(f"--mesh must look like 4x4, not {text!r}")
    kx, ky = int(m.group(1)), int(m.group(2))
    if not (1 <= kx <= max_side and 1 <= ky <= max_side):
        raise UsageError(f"a {kx}x{ky} mesh does not fit the header's coordinates (at most "
                         f"{max_side}x{max_side})")
    return kx, ky


def validate(args):
    from sim_models.noc import PATTERNS
    kx, ky = parse_mesh(args.mesh, 1 << PARAMS["coord_bits"])
    if args.traffic not in PATTERNS:
        raise UsageError(f"unknown traffic pattern {args.traffic!r}; choose one of {', '.join(PATTERNS)}")
    if args.traffic == "transpose" and kx != ky:
        raise UsageError("transpose traffic needs a square mesh")
    if not 0.0 <= args.rate <= 1.0:
        raise UsageError(f"--rate must be within 0..1 flits per node per cycle, not {args.rate}")
    if not 1 <= args.packet_flits <= 15:
        raise UsageError(f"--packet-flits must be 1..15, not {args.packet_flits}")
    if args.cycles < 1 or args.warmup < 0:
        raise UsageError("--cycles must be positive and --warmup not negative")
    if args.sim not in ("verilator", "icarus"):
        raise UsageError(f"--sim must be verilator or icarus, not {args.sim!r}")
    return kx, ky


def experiment(kx, ky, *, traffic, rate, packet_flits, cycles, warmup, seed, sim="verilator"):
    """Run one experiment; returns the result dict (see ``verification/noc/tb_experiment.py``)."""
    from rtl.noc.layouts import NocParams
    from rtl.noc.mesh import Mesh
    from verification.runner import run_cocotb

    cfg = dict(PARAMS, kx=kx, ky=ky)
    slug = "-".join(f"{k}{cfg[k]}" for k in sorted(cfg))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        exp = dict(traffic=traffic, rate=rate, packet_flits=packet_flits, cycles=cycles, warmup=warmup,
                   seed=seed)
        run_cocotb(lambda: Mesh(NocParams(**PARAMS), kx, ky), toplevel="noc_mesh", config=cfg,
                   build_name=f"noc_mesh-{slug}", test_module="verification.noc.tb_experiment", sim=sim,
                   extra_env={"POBLANO_NOC_EXPERIMENT": json.dumps(exp), "POBLANO_NOC_RESULT": str(out)},
                   ports_only=True)
        return json.loads(out.read_text())


def run(args):
    kx, ky = validate(args)
    result = experiment(kx, ky, traffic=args.traffic, rate=args.rate, packet_flits=args.packet_flits,
                        cycles=args.cycles, warmup=args.warmup, seed=args.seed, sim=args.sim)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:20s} {value}")
    bad = result["lost"] + result["duplicated"] + result["corrupted"] + result["reordered"]
    return 1 if bad else 0
