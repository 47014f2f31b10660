"""The ``poblano`` command line.

Every module in :mod:`poblano.commands` is a subcommand: it exports ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Bad input raises
:class:`poblano.errors.UsageError` (or the golden model's :class:`sim_models.mx.MXFormatError`);
it is printed as one line, ``poblano <command>: error: ...``, and the exit status is 2.
"""

import argparse
import importlib
import pkgutil
import sys

from poblano import commands
from poblano.errors import UsageError

__all__ = ["main"]


def _commands():
    found = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"poblano.commands.{info.name}")
        if hasattr(module, "NAME"):
            found.append(module)
    return found


def build_parser():
    parser = argparse.ArgumentParser(
        prog="poblano",
        description="Poblano: an open LLM-inference compute die (MX MAC array and quantizer, vector "
                    "unit, KV-cache controller, mesh fabric, and the compute tile that runs a "
                    "LLaMA/Mixtral checkpoint on them). Flows for simulation, Verilog, lint, formal "
                    "and FPGA.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _commands():
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    from sim_models.mx import MXFormatError

    try:
        return int(args._run(args) or 0)
    except (UsageError, MXFormatError) as exc:
        print(f"poblano {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"poblano {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
