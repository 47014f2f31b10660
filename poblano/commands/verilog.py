"""``poblano verilog``: Verilog of every top-level block, linted with Verilator."""

from poblano import tops
from poblano.errors import UsageError
from poblano.flows import verilog

NAME = "verilog"
HELP = "write Verilog of the top-level blocks to build/verilog/ and lint each with Verilator"


def add_arguments(parser):
    parser.add_argument("--top", action="append", metavar="NAME",
                        help=f"block to write (repeatable; default: all of {', '.join(tops.names())})")
    parser.add_argument("--no-lint", action="store_true", help="write the Verilog only")


def run(args):
    names = args.top or tops.names()
    unknown = [n for n in names if n not in tops.names()]
    if unknown:
        raise UsageError(f"unknown top {unknown[0]!r}; known: {', '.join(tops.names())}")
    paths = verilog.generate(names)
    failed = 0
    for name, path in paths.items():
        if args.no_lint:
            print(f"{name:24s} {path}")
            continue
        result = verilog.lint(name, path)
        print(f"{name:24s} {path}  lint {'clean' if result.passed else 'FAILED'}")
        if not result.passed:
            failed += 1
            print(result.output)
    if not args.no_lint:
        print(f"waived Verilator warnings: {', '.join(verilog.LINT_WAIVERS)} "
              "(reasons: poblano/flows/verilog.py)")
    return 1 if failed else 0
