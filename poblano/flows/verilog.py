"""Verilog generation and Verilator lint of every registered top-level block.

Each block of :mod:`poblano.tops` is written in its default configuration to
``build/verilog/<name>.v`` and linted with the pinned Verilator as ``--lint-only -Wall``, with only
the waivers below. Each waiver names a warning that Amaranth's Yosys back end trips on correct
designs; anything else fails the lint.
"""

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from poblano import toolchain, tops
from verification.runner import BUILD_ROOT, write_verilog

__all__ = ["LINT_WAIVERS", "generate", "lint", "LintResult"]

#: Verilator warnings waived for generated Verilog, each with the reason it is benign.
LINT_WAIVERS = {
    "PROCASSINIT": "Amaranth declares every register with its reset value as an initializer "
                   "(`reg x = 0;`) and assigns it in an always block; that is the intended "
                   "power-on value, not a conflicting driver.",
    "DECLFILENAME": "one generated file holds the top and all of its submodules, so module names "
                    "cannot match the file name.",
    "UNUSEDSIGNAL": "the back end keeps intermediate wires whose upper bits or whole value are "
                    "unused after its own optimisation (e.g. a carry bit sliced away).",
    "WIDTHEXPAND": "the back end relies on Verilog's implicit zero-extension of operands "
                   "(Amaranth has already sized every expression exactly).",
    "WIDTHTRUNC": "the back end relies on Verilog's implicit truncation when assigning a wider "
                  "expression to a narrower net (Amaranth's own truncation semantics).",
    "UNOPTFLAT": "Amaranth flattens combinational logic into wide nets whose bit-level "
                 "dependencies Verilator reports as a loop although no bit depends on itself.",
    "CASEINCOMPLETE": "the back end writes every combinational case after a default assignment of "
                      "its target (no latch can form); the cases of an FSM's state or an Array "
                      "index leave out only the encodings the design never reaches.",
}


@dataclass(frozen=True)
class LintResult:
    name: str
    path: Path
    passed: bool
    output: str


def generate(names=None, out_dir=None):
    """Write Verilog for ``names`` (default: every top); returns ``{name: path}``."""
    out_dir = Path(out_dir or BUILD_ROOT / "verilog")
    paths = {}
    for name in names or tops.names():
        path = out_dir / f"{name}.v"
        write_verilog(tops.get(name).build(), path, name=name)
        paths[name] = path
    return paths


def lint(name, path):
    """Run ``verilator --lint-only -Wall`` with :data:`LINT_WAIVERS` on one generated file."""
    cmd = [str(toolchain.verilator_bin()), "--lint-only", "-Wall", "--top-module", name]
    cmd += [f"-Wno-{code}" for code in LINT_WAIVERS]
    cmd.append(str(path))
    env = toolchain.activate(dict(os.environ))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return LintResult(name, Path(path), out.returncode == 0, (out.stdout + out.stderr).strip())
