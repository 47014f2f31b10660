"""``poblano noc``: synthetic traffic on the RTL mesh (cocotb), every packet checked.

Two traffic sources, on routers of 2 classes x 2 VCs (``--vcs 4``, hardware traffic's default) or
2 classes x 1 VC (``--vcs 2``, the only configuration of Python-driven traffic) of 4 flits per port,
with static VCs (the default) or, with ``--order-buckets N``, dynamic VCs:

* ``--generator hardware`` (the default): a :class:`rtl.noc.traffic_mesh.TrafficMesh`, with a
  synthesizable traffic generator and checker at every node (64-bit flits, 3-bit coordinates, so up
  to 8x8). The testbench only configures the run and reads the counters: a 4x4 point of 5000 cycles
  takes seconds of simulation, an 8x8 one about a minute; the checkers' counts are compared with what
  the generators' reference model (``sim_models.noc_traffic``) says each node must receive.
* ``--generator python``: a :class:`rtl.noc.mesh.Mesh` (32-bit flits, at most 4x4) driven by cocotb
  drivers with :class:`sim_models.noc.NetworkModel` checking every packet
  (``verification/noc/tb_experiment.py``); a 4x4 point of 1200 cycles takes about a minute.

The builds are shared with the regression's. The first Verilator build of a mesh takes minutes (about
3 for the 4x4 traffic mesh, 15 for 8x8, elaboration included).
"""

import json
import re
import tempfile
from pathlib import Path

from poblano.errors import UsageError

NAME = "noc"
HELP = "run synthetic traffic on the RTL mesh and report throughput, latency and checker counts"

#: The mesh configuration of Python-driven traffic (also the one of tests/rtl/noc/test_mesh_cocotb.py).
PARAMS = dict(width=32, vcs=2, depth=4, classes=2, coord_bits=2)
#: The configuration of hardware traffic (tests/rtl/noc/test_traffic_mesh_cocotb.py).
HW_PARAMS = dict(width=64, vcs=4, depth=4, classes=2, coord_bits=3)
GENERATORS = ("hardware", "python")


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
    parser.add_argument("--generator", default="hardware", metavar="hardware|python",
                        help="traffic from synthesizable generators beside every node (default; up to "
                             "8x8) or from cocotb drivers (up to 4x4)")
    parser.add_argument("--vcs", type=int, default=None, metavar="2|4",
                        help="virtual channels per port, split between the 2 classes (hardware generator "
                             "only; default 4)")
    parser.add_argument("--order-buckets", type=int, default=0, metavar="0|2..64",
                        help="0: static VCs, a packet keeps its VC end to end (default); a power of 2 "
                             "from 2 to 64: dynamic VCs, heads take any free VC of their class, with this "
                             "many order buckets keeping flows in order (hardware generator, --vcs 4)")
    parser.add_argument("--stall", type=float, default=0.0,
                        help="probability that a node's receiver takes nothing in a cycle (hardware "
                             "generator only; default 0)")


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
    if args.generator not in GENERATORS:
        raise UsageError(f"--generator must be hardware or python, not {args.generator!r}")
    params = HW_PARAMS if args.generator == "hardware" else PARAMS
    kx, ky = parse_mesh(args.mesh, 1 << params["coord_bits"])
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
    if not 0.0 <= args.stall < 1.0:
        raise UsageError(f"--stall must be within 0..1 (excluding 1), not {args.stall}")
    if args.stall and args.generator != "hardware":
        raise UsageError("--stall needs --generator hardware")
    if args.vcs not in (None, 2, 4):
        raise UsageError(f"--vcs must be 2 or 4, not {args.vcs}")
    if args.vcs is not None and args.generator != "hardware":
        raise UsageError("--vcs needs --generator hardware")
    if args.vcs is None:
        args.vcs = params["vcs"]
    from rtl.noc.layouts import ORDER_BUCKETS
    if args.order_buckets not in ORDER_BUCKETS:
        raise UsageError(f"--order-buckets must be 0 or a power of 2 in 2..64, not {args.order_buckets}")
    if args.order_buckets and (args.generator != "hardware" or args.vcs != 4):
        raise UsageError("--order-buckets needs --generator hardware and --vcs 4 (dynamic VCs choose "
                         "among the VCs of a class)")
    if not 0 <= args.seed < (1 << 32):
        raise UsageError(f"--seed must be within 0..{(1 << 32) - 1}, not {args.seed}")
    if args.generator == "hardware" and args.warmup + args.cycles >= (1 << 31):
        raise UsageError("--warmup plus --cycles must stay below 2**31")
    return kx, ky


def experiment(kx, ky, *, traffic, rate, packet_flits, cycles, warmup, seed, sim="verilator",
               generator="hardware", stall=0.0, vcs=4, order_buckets=0):
    """Run one experiment; returns the result dict (see ``verification/noc/tb_experiment.py`` and
    ``verification/noc/traffic_run.py``).

    ``rate`` may also be a list of rates (hardware traffic only): they run in one simulation and the
    result is the list of their results, ending with ``{"error": ..., "offered": rate}`` at the first
    rate whose run cannot be measured (its source queues overflowed)."""
    from rtl.noc.layouts import NocParams
    from rtl.noc.mesh import Mesh
    from rtl.noc.traffic_mesh import TrafficMesh
    from verification.runner import run_cocotb

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        def settings(r):
            return dict(traffic=traffic, rate=r, packet_flits=packet_flits, cycles=cycles, warmup=warmup,
                        seed=seed, stall=stall)
        exp = [settings(r) for r in rate] if isinstance(rate, list) else settings(rate)
        env = {"POBLANO_NOC_EXPERIMENT": json.dumps(exp), "POBLANO_NOC_RESULT": str(out)}
        if generator == "hardware":
            params = dict(HW_PARAMS, vcs=vcs, order_buckets=order_buckets)
            cfg = dict(params, kx=kx, ky=ky)
            run_cocotb(lambda: TrafficMesh(NocParams(**params), kx, ky), toplevel="noc_traffic_mesh",
                       config=cfg, test_module="verification.noc.tb_traffic_experiment", sim=sim,
                       extra_env=env, ports_only=True)
        else:
            cfg = dict(PARAMS, kx=kx, ky=ky)
            slug = "-".join(f"{k}{cfg[k]}" for k in sorted(cfg))
            run_cocotb(lambda: Mesh(NocParams(**PARAMS), kx, ky), toplevel="noc_mesh", config=cfg,
                       build_name=f"noc_mesh-{slug}", test_module="verification.noc.tb_experiment", sim=sim,
                       extra_env=env, ports_only=True)
        result = json.loads(out.read_text())
    if isinstance(result, list):
        return result
    if "error" in result:
        raise UsageError(result["error"])
    return result


def run(args):
    kx, ky = validate(args)
    result = experiment(kx, ky, traffic=args.traffic, rate=args.rate, packet_flits=args.packet_flits,
                        cycles=args.cycles, warmup=args.warmup, seed=args.seed, sim=args.sim,
                        generator=args.generator, stall=args.stall, vcs=args.vcs,
                        order_buckets=args.order_buckets)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:20s} {value}")
    bad = result["lost"] + result["duplicated"] + result["corrupted"] + result["reordered"]
    return 1 if bad else 0
