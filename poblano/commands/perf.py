"""``poblano perf``: what a system built from Poblano dies would score on a model, and why.

``poblano perf --model NAME|DIR --system NAME|FILE [--isl 8192] [--osl 1024] [--concurrency
1,2,4,...] [--objective user|die] [--json] [--plot P.png]`` estimates, per concurrency (users
decoding at once), the best mapping of the model on the system (:mod:`sim_models.perf`,
``docs/perf_model.md``) and prints a table: tokens/s/user, tokens/s per die and per MW, time to
first token, the decode step split into compute, HBM, on-die fabric, die-to-die latency and
bandwidth and synchronization, the limiting bound and the mapping. ``--json`` prints the same as
JSON. ``--plot`` draws the InferenceX-style frontier: tokens/s per die and per MW against
tokens/s/user, one point per concurrency, with the physical bounds as lines (a die's peak compute
over the FLOPs of a token; the HBM of the first point's dies over the bytes a token reads).
Models: a name under ``models/`` or a directory with a ``config.json``; systems: a shipped name
(``sim_models/perf/systems/``) or a TOML file. An unknown name, a malformed file or a model that
does not fit the system is a one-line error with exit status 2.
"""

import json

from poblano.commands._values import comma_separated
from poblano.errors import UsageError

NAME = "perf"
HELP = "estimate tokens/s/user, tokens/s per die and per MW of a model on a system of Poblano dies"

_SPLIT = ("compute", "hbm", "fabric", "d2d_latency", "d2d_bandwidth", "sync")


def add_arguments(parser):
    parser.add_argument("--model", required=True, metavar="NAME|DIR",
                        help="a model under models/ (gpt-oss-120b, deepseek-r1, kimi-k2.5, ...) or a "
                             "directory with a Hugging Face config.json")
    parser.add_argument("--system", required=True, metavar="NAME|FILE",
                        help="a shipped system (jalapeno-b0-like, poblano-tile, poblano-die-2x2, "
                             "poblano-ulx3s) or a TOML file")
    parser.add_argument("--isl", type=int, default=8192, help="input tokens per request (default 8192)")
    parser.add_argument("--osl", type=int, default=1024, help="output tokens per request (default 1024)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64,128,256", metavar="N,N,...",
                        help="users decoding at once, one table row each (default 1,2,4,...,256)")
    parser.add_argument("--objective", choices=("user", "die"), default="user",
                        help="mapping search: highest tokens/s/user (default) or tokens/s per die")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="P.png", help="also draw the throughput / interactivity frontier")


def _concurrency(text):
    values = comma_separated(text, "--concurrency")
    if any(v < 1 for v in values):
        raise UsageError(f"--concurrency values must be at least 1, got {text!r}")
    return values


def _us(seconds):
    return f"{seconds * 1e6:,.1f}"


def table(model, system, args, points):
    """The text table of ``points`` (one per concurrency)."""
    lines = [f"{model.name} on {system.name}: ISL {args.isl}, OSL {args.osl}; "
             f"{model.total_params() / 1e9:.4g}B parameters, {model.active_params() / 1e9:.4g}B active; "
             f"decode step in microseconds",
             "| users | tok/s/user | tok/s/die | tok/s/MW | TTFT ms | step us | " +
             " | ".join(_SPLIT) + " | bound | mapping |",
             "|---" * (8 + len(_SPLIT)) + "|"]
    for p in points:
        lines.append(f"| {p.concurrency} | {p.tokens_per_s_user:,.1f} | {p.tokens_per_s_die:,.1f} | "
                     f"{p.tokens_per_s_mw:,.0f} | {p.ttft_s * 1e3:,.2f} | {_us(p.decode_s)} | " +
                     " | ".join(_us(p.split[k]) for k in _SPLIT) + f" | {p.bound} | {p.mapping} |")
    return "\n".join(lines)


def plot(model, system, args, points, path):
    """Draw the frontier of ``points`` into ``path`` (PNG): tokens/s per die and per MW against
    tokens/s/user, log scales, each point labelled with its concurrency, and the bounds as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    die = system.die
    context = args.isl + args.osl // 2
    compute_per_die = die.flops / model.flops_per_token(context)
    first = points[0]
    read = (model.active_params() - model.embedding_params()) * die.weight_bits / 8 + \
        first.concurrency * model.kv_bytes_read(context, die.kv_bytes_per_element)
    hbm_per_user = first.dies * die.hbm_bytes_per_s / read
    x = [p.tokens_per_s_user for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, label in ((axes[0], "tokens_per_s_die", "output tokens/s per die"),
                           (axes[1], "tokens_per_s_mw", "output tokens/s per MW")):
        y = [getattr(p, key) for p in points]
        ax.plot(x, y, "o-", label="estimate (best mapping per concurrency)")
        for p, xi, yi in zip(points, x, y, strict=True):
            ax.annotate(str(p.concurrency), (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axvline(hbm_per_user, color="tab:red", linestyle="--",
                   label=f"HBM bound per user, {first.dies} dies ({hbm_per_user:,.0f})")
        if key == "tokens_per_s_die":
            ax.axhline(compute_per_die, color="tab:green", linestyle="--",
                       label=f"peak compute per die ({compute_per_die:,.0f})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("output tokens/s per user")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{model.name} on {system.name}, ISL {args.isl} / OSL {args.osl} "
                 f"(numbers: concurrency)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args):
    from sim_models.perf.estimate import FitError, estimate
    from sim_models.perf.model_desc import ModelError, load_model
    from sim_models.perf.system import SystemError, load_system

    if args.isl < 1 or args.osl < 1:
        raise UsageError(f"--isl and --osl must be at least 1, got {args.isl} and {args.osl}")
    users = _concurrency(args.concurrency)
    if args.plot:
        from pathlib import Path
        if not Path(args.plot).parent.is_dir():
            raise UsageError(f"--plot: no directory {str(Path(args.plot).parent)!r} for {args.plot!r}")
        if Path(args.plot).suffix.lower() != ".png":
            raise UsageError(f"--plot writes a PNG: give a file name ending in .png, got {args.plot!r}")
    try:
        model = load_model(args.model)
        system = load_system(args.system)
        points = [estimate(model, system, args.isl, args.osl, c, args.objective) for c in users]
    except (ModelError, SystemError, FitError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({"model": model.name, "system": system.name, "isl": args.isl, "osl": args.osl,
                          "objective": args.objective, "points": [p.as_dict() for p in points]}, indent=2))
    else:
        print(table(model, system, args, points))
    if args.plot:
        plot(model, system, args, points, args.plot)
    return 0
