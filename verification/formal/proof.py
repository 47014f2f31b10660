"""Formal proofs of Amaranth designs with SymbiYosys (``yowasp-sby``, smtbmc with z3).

A proof module under ``verification/formal/`` exports ``PROOFS``, a list of :class:`Proof`. Each
``build`` callable returns an Elaboratable holding the design *and* its ``Assert``/``Assume``/``Cover``
statements; :func:`run` writes it as RTLIL, writes the ``.sby`` file and runs the solver.
``make formal`` (``poblano formal``) runs every proof; ``tests/formal`` runs them under pytest.

Conventions for properties (Amaranth 0.5 has no ``Past``: register what you need):

* Design inputs are *not* free by default: an undriven signal is a constant at its reset value.
  Drive every input the environment controls with :func:`free` (``AnySeq``), then constrain it
  with ``Assume``.
* :func:`reset_at_start` assumes ``rst`` is high in the first cycle and low after, and returns a
  signal that is high once reset has been seen; guard assertions with it.
* Environment behaviour (a producer keeping valid and payload stable while stalled) is an
  ``Assume``; everything the design promises is an ``Assert``.
"""

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amaranth.asserts import AnySeq, Initial
from amaranth.back import rtlil
from amaranth.hdl import Assume, Module, ResetSignal, Signal

from poblano import toolchain

__all__ = ["Proof", "ProofResult", "run", "reset_at_start", "free", "discover", "BUILD_DIR"]

BUILD_DIR = Path(__file__).resolve().parents[2] / "build" / "formal"


@dataclass(frozen=True)
class Proof:
    """One SymbiYosys task.

    ``mode`` is ``"prove"`` (k-induction: the assertions hold in every reachable state), ``"bmc"``
    (no assertion fails within ``depth`` cycles of reset) or ``"cover"`` (every ``Cover`` is reached
    within ``depth`` cycles).
    """
    name: str
    build: Callable[[], object]
    mode: str = "prove"
    depth: int = 20
    description: str = ""


@dataclass(frozen=True)
class ProofResult:
    name: str
    mode: str
    depth: int
    passed: bool
    status: str
    seconds: float
    log: Path


def reset_at_start(m):
    """Assume reset in the first cycle only; return a signal high from the cycle after reset."""
    started = Signal(init=0, name="reset_done")
    m.d.comb += Assume(ResetSignal() == Initial())
    m.d.sync += started.eq(1)
    return started


def free(m, *values):
    """Drive each of ``values`` (input signals of the design) with a fresh ``AnySeq`` every cycle."""
    for value in values:
        m.d.comb += value.eq(AnySeq(len(value)))


def _sby_text(proof, il_name):
    return f"""[options]
mode {proof.mode}
depth {proof.depth}
multiclock off

[engines]
smtbmc z3

[script]
read_rtlil {il_name}
prep -top top

[files]
{il_name}
"""


def run(proof, build_dir=None):
    """Run ``proof``; returns a :class:`ProofResult` (``passed`` False on a failed or errored proof)."""
    build_dir = Path(build_dir or BUILD_DIR)
    work = build_dir / proof.name
    work.mkdir(parents=True, exist_ok=True)
    design = proof.build()
    if not isinstance(design, Module):
        wrapper = Module()
        wrapper.submodules.design = design
        design = wrapper
    il_name = f"{proof.name}.il"
    (work / il_name).write_text(rtlil.convert(design, name="top", ports=[]))
    sby = work / f"{proof.name}.sby"
    sby.write_text(_sby_text(proof, il_name))
    env = toolchain.activate(dict(os.environ))
    start = time.monotonic()
    out = subprocess.run(["yowasp-sby", "-f", sby.name], cwd=work, env=env,
                         capture_output=True, text=True)
    seconds = time.monotonic() - start
    log = work / "sby.log"
    log.write_text(out.stdout + out.stderr)
    match = re.findall(r"DONE \((\w+), rc=(\d+)\)", out.stdout)
    status = match[-1][0] if match else "ERROR"
    return ProofResult(proof.name, proof.mode, proof.depth, out.returncode == 0 and status == "PASS",
                       status, seconds, log)


def discover():
    """Every :class:`Proof` of every module in ``verification/formal`` (sorted by module)."""
    import importlib
    import pkgutil

    from verification import formal

    proofs = []
    for info in sorted(pkgutil.iter_modules(formal.__path__), key=lambda i: i.name):
        if info.name == "proof":
            continue
        module = importlib.import_module(f"verification.formal.{info.name}")
        proofs.extend(getattr(module, "PROOFS", []))
    return proofs
