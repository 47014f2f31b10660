"""``poblano fpga``: build blocks for the ULX3S-85F and report LUT4, FF, MULT18, BRAM and Fmax."""

from poblano import tops
from poblano.errors import UsageError
from poblano.flows import fpga

NAME = "fpga"
HELP = "synthesize, place, route and pack blocks for the ULX3S-85F; report resources and Fmax"


def add_arguments(parser):
    fpga_tops = [t.name for t in tops.TOPS if t.fpga]
    parser.add_argument("--top", action="append", metavar="NAME",
                        help=f"block to build (repeatable; default: {', '.join(fpga_tops)})")
    parser.add_argument("--seed", type=int, default=fpga.DEFAULT_SEED, help="nextpnr placement seed")
    parser.add_argument("--target-mhz", type=float,
                        help="clock constraint (default: the block's own goal, else the one in "
                             "constraints/ulx3s_85f.lpf)")


def run(args):
    names = args.top or [t.name for t in tops.TOPS if t.fpga]
    for name in names:
        if name not in tops.names():
            raise UsageError(f"unknown top {name!r}; known: {', '.join(tops.names())}")
    failed = 0
    for name in names:
        print(f"{name}: building for ULX3S-85F ...", flush=True)
        try:
            top = tops.get(name)
            target = args.target_mhz if args.target_mhz is not None else top.target_mhz
            report = fpga.build(name, top.build(), seed=args.seed, target_mhz=target,
                                synth_opts=top.synth_opts)
        except RuntimeError as exc:
            print(f"{name}: {exc}")
            failed += 1
            continue
        print(f"{name}: Fmax {report['fmax_mhz']:.1f} MHz, LUT4 {report['lut4']['used']}, "
              f"FF {report['ff']['used']}, MULT18 {report['mult18']['used']}, "
              f"DP16KD {report['bram_dp16kd']['used']}  (build/fpga/{name}/report.md)", flush=True)
        if not report["timing_met"]:
            print(f"{name}: timing NOT met: Fmax {report['fmax_mhz']:.1f} MHz is below the "
                  f"{report['target_mhz']:.0f} MHz target", flush=True)
    return 1 if failed else 0
