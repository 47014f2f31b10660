"""``poblano perf``: what a system built from Poblano dies would score on a model, and why.

``poblano perf --model NAME|DIR --system NAME|FILE [--isl 8192] [--osl 1024] [--concurrency
1,2,4,...] [--objective user|die] [--json]`` estimates, per concurrency (users decoding at once),
the best mapping of the model on the system (:mod:`sim_models.perf`, ``docs/perf_model.md``) and
prints a table: tokens/s/user, tokens/s per die and per MW, time to first token, the decode step
split into compute, HBM, on-die fabric, die-to-die latency and bandwidth and synchronization, the
limiting bound and the mapping. ``--json`` prints the same as JSON. Models: a name under
``models/`` or a directory with a ``config.json``; systems: a shipped name
(``sim_models/perf/systems/``) or a TOML file. An unknown name, a malformed file or a model that
does not fit the system is a one-line error with exit status 2.
"""

import json

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


def _concurrency(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"--concurrency must be comma-separated integers, got {text!r}") from None
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


def run(args):
    from sim_models.perf.estimate import FitError, estimate
    from sim_models.perf.model_desc import ModelError, load_model
    from sim_models.perf.system import SystemError, load_system

    if args.isl < 1 or args.osl < 1:
        raise UsageError(f"--isl and --osl must be at least 1, got {args.isl} and {args.osl}")
    users = _concurrency(args.concurrency)
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
    return 0
