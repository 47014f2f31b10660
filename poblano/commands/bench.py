"""``poblano bench``: run the recorded benchmarks (``benchmarks/<name>.py``)."""

import pkgutil
import subprocess
import sys
from pathlib import Path

from poblano.errors import UsageError

NAME = "bench"
HELP = "run the benchmarks and rewrite their recorded figures under benchmarks/results/"

ROOT = Path(__file__).resolve().parents[2]


def _benchmarks():
    """The benchmarks' names in the order they run: the performance model's last, since they read
    the tile's recorded runs."""
    import benchmarks
    return sorted((info.name for info in pkgutil.iter_modules(benchmarks.__path__)),
                  key=lambda name: (name.startswith("perf_"), name))


def add_arguments(parser):
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this benchmark")


def run(args):
    names = _benchmarks()
    chosen = args.only or names
    for name in chosen:
        if name not in names:
            raise UsageError(f"unknown benchmark {name!r}; known: {', '.join(names) or 'none'}")
    failed = 0
    for name in chosen:
        print(f"== benchmarks.{name}", flush=True)
        failed += subprocess.run([sys.executable, "-m", f"benchmarks.{name}"], cwd=ROOT).returncode != 0
    return 1 if failed else 0
