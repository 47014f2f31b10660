"""``poblano lint``: ruff on the Python sources, Verilator on the generated Verilog."""

import subprocess
import sys
from pathlib import Path

from poblano.flows import verilog

NAME = "lint"
HELP = "ruff on the Python sources and verilator --lint-only -Wall on every generated top"

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIRS = ["rtl", "sim_models", "verification", "poblano", "tests", "benchmarks"]


def add_arguments(parser):
    parser.add_argument("--python-only", action="store_true", help="skip the Verilog lint")


def run(args):
    dirs = [d for d in PYTHON_DIRS if (ROOT / d).exists()]
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", *dirs],
                          cwd=ROOT)
    failed = ruff.returncode != 0
    if not args.python_only:
        for name, path in verilog.generate().items():
            result = verilog.lint(name, path)
            print(f"verilator lint {name}: {'clean' if result.passed else 'FAILED'}")
            if not result.passed:
                print(result.output)
                failed = True
    return 1 if failed else 0
