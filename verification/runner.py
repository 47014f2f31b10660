"""Build an Amaranth component for a real simulator and run a cocotb test module on it.

This is the one place that knows how Poblano drives cocotb. A pytest wrapper looks like::

    @pytest.mark.parametrize("sim", SIMULATORS)
    @pytest.mark.parametrize("depth", [2, 4])
    def test_fifo(sim, depth):
        run_cocotb(lambda: Fifo(depth=depth), toplevel="fifo", config={"depth": depth},
                   test_module="verification.common.tb_fifo", sim=sim)

* Verilog is written with Amaranth's back end into ``build/cocotb/<toplevel>-<config>/``; each
  configuration has its own directory, and each simulator its own build below it, so pytest-xdist
  workers never share a build in flight (a file lock serializes the rare case where they would).
* A build is reused while the Verilog it was made from is unchanged.
* The configuration reaches the testbench as JSON in ``POBLANO_CONFIG``; read it with
  :func:`verification.config`.
* Seeds: ``COCOTB_RANDOM_SEED`` is passed through when set, so a failing run reproduces with
  ``COCOTB_RANDOM_SEED=<seed printed in the log> make test``. ``WAVES=1`` records an FST trace
  (``dump.fst`` for Verilator, ``<toplevel>.fst`` for Icarus) in the run directory.
"""

import fcntl
import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

from amaranth.back import verilog

from poblano import toolchain

__all__ = ["SIMULATORS", "BUILD_ROOT", "run_cocotb", "write_verilog", "sim_params", "RunFailed"]

#: The simulators every block's regression runs on.
SIMULATORS = ("verilator", "icarus")

#: Root of all generated files.
BUILD_ROOT = Path(__file__).resolve().parent.parent / "build"

# Verilator warnings that Amaranth's Yosys back end trips on correct designs; the build must not
# stop on them. The lint flow (``make lint``) keeps its own, narrower, documented waiver list.
# Icarus compiles Verilog-2005 (the dialect Amaranth writes). In its -g2012 mode (cocotb's default,
# which this overrides) a declaration initializer is not an event, so an ``always @*`` block that
# reads only registers still at their initial values is never evaluated and its outputs stay X; in
# Verilog-2005 mode the initializers run at time 0 like ``initial`` blocks and wake every such block.
_ICARUS_BUILD_ARGS = ["-g2005"]
_VERILATOR_BUILD_ARGS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT",
                         "-Wno-CMPCONST", "-Wno-UNSIGNED", "--x-assign", "unique",
                         "--x-initial", "unique"]

# Small designs build as one C++ file. Large ones (``ports_only``) are split so that make compiles the
# pieces in parallel and the initialisation code (Amaranth writes an initial value for every memory
# word) without optimisation. The wheel's verilated.mk has an empty CFG_CXXFLAGS_PCH_I, so a split build
# would pass the precompiled header to c++ as a bare file name ("Vtop__pch.h.fast: linker input file
# not found"); ``_SPLIT_MAKEFLAGS`` supplies the missing ``-include``.
_ONE_FILE_ARGS = ["--output-split", "0"]
_SPLIT_ARGS = ["--output-split", "20000", "--output-split-cfuncs", "20000"]
#
# The pieces of a large model are compiled without optimisation (``OPT_FAST=-O0``): g++ spends most of a
# mesh build optimising Verilator's enormous evaluation functions (a 1.5 MB piece of the 4x4 traffic
# mesh takes 3 s at -O0, 14 s at -O1 and longer at the default -Os), while the simulation only runs
# for some thousands of cycles.
_SPLIT_MAKEFLAGS = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST="


class RunFailed(AssertionError):
    """A cocotb run failed, ran no test, or could not be built."""


def _slug(config):
    parts = []
    for key in sorted(config):
        value = config[key]
        if isinstance(value, (list, tuple)):
            value = "x".join(str(v) for v in value)
        parts.append(f"{key}{value}")
    text = "-".join(parts) or "default"
    text = re.sub(r"[^A-Za-z0-9_.x-]+", "_", text)
    if len(text) > 80:
        text = text[:60] + "-" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return text


@contextmanager
def _locked(directory):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _environment(**values):
    """Set the environment variables whose value is not ``None`` for the duration of a block."""
    saved = {k: os.environ.get(k) for k, v in values.items() if v is not None}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_verilog(component, path, *, name):
    """Write ``component`` (an Amaranth :class:`~amaranth.lib.wiring.Component`) as Verilog.

    Returns the text; the file is rewritten only when the text changes, so timestamps stay useful.
    """
    text = verilog.convert(component, name=name, emit_src=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return text


def sim_params(sim):
    """Check that ``sim`` is a supported simulator and can run here; skip under pytest otherwise."""
    if sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {sim!r}; choose one of {', '.join(SIMULATORS)}")
    if sim == "icarus" and not toolchain.icarus_available():
        message = "Icarus Verilog (iverilog, vvp) is not installed"
        if os.environ.get("POBLANO_REQUIRE_ALL_SIMULATORS"):
            raise RunFailed(f"{message}, and POBLANO_REQUIRE_ALL_SIMULATORS is set (as in CI)")
        import pytest
        pytest.skip(f"{message}: Icarus runs skipped (apt-get install iverilog)")


def run_cocotb(component, *, toplevel, test_module, sim, config=None, testcase=None,
               extra_env=None, seed=None, waves=None, build_name=None, timescale=("1ns", "1ps"),
               ports_only=False, optimize=None):
    """Build ``component`` for ``sim`` and run the cocotb ``test_module`` on it.

    Parameters
    ----------
    component : Component or callable
        The design, or a zero-argument callable that makes it (called once per run).
    toplevel : str
        Verilog module name of the top level.
    test_module : str
        Dotted name of the cocotb test module (under ``verification``).
    sim : str
        ``"verilator"`` or ``"icarus"``.
    config : dict, optional
        The elaboration parameters; they name the build directory and reach the testbench as
        ``POBLANO_CONFIG``.
    testcase : str or list of str, optional
        Run only these cocotb tests of the module.
    extra_env : dict, optional
        Extra environment for the simulation (e.g. paths of input files).
    build_name : str, optional
        Overrides the build directory name derived from ``toplevel`` and ``config``.
    ports_only : bool
        Verilator only: make just the top level's signals visible to the testbench instead of every
        signal of the hierarchy. For large designs (a mesh of routers) this cuts the generated C++ about
        fivefold and its compile time with it; the testbench can then read and drive ports only.
    optimize : str, optional
        Verilator with ``ports_only``: the g++ optimisation of the model's pieces (default ``-O0``,
        the fastest build). A run of many cycles (a model on the tile) gains from ``-O1``.

    Returns
    -------
    Path
        The run directory (results XML, log and waves).

    Raises
    ------
    RunFailed
        If any cocotb test failed or none ran.
    """
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    sim_params(sim)
    config = dict(config or {})
    toolchain.activate()

    base = BUILD_ROOT / "cocotb" / (build_name or f"{toplevel}-{_slug(config)}")
    build_dir = base / sim
    source = base / f"{toplevel}.v"
    waves = bool(int(os.environ.get("WAVES", "0"))) if waves is None else waves

    with _locked(base):
        if callable(component) and not hasattr(component, "signature"):
            component = component()
        text = write_verilog(component, source, name=toplevel)
        opt = optimize or "-O0"
        digest = hashlib.sha256((text + sim + str(waves) + str(ports_only) + opt).encode()).hexdigest()
        stamp = build_dir / ".built-from"
        runner = get_runner(sim)
        build_args = list(_VERILATOR_BUILD_ARGS) if sim == "verilator" else list(_ICARUS_BUILD_ARGS)
        if sim == "verilator":
            build_args += _SPLIT_ARGS if ports_only else _ONE_FILE_ARGS
        if sim == "verilator" and ports_only:
            build_args += ["--no-public-flat-rw", "--public-depth", "1"]
        if sim == "verilator" and waves:
            build_args.append("--trace-fst")
        fresh = stamp.exists() and stamp.read_text() == digest
        makeflags = None
        if sim == "verilator" and ports_only:
            makeflags = f"{os.environ.get('MAKEFLAGS', '')} {_SPLIT_MAKEFLAGS}{opt}".strip()
        with _environment(MAKEFLAGS=makeflags):
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=build_dir, always=not fresh,
                         build_args=build_args, timescale=timescale, waves=waves,
                         log_file=build_dir / "build.log")
        stamp.write_text(digest)

    current = os.environ.get("PYTEST_CURRENT_TEST", "standalone").rsplit(":", 1)[-1].split(" ")[0]
    run_dir = build_dir / "runs" / re.sub(r"[^A-Za-z0-9_.-]+", "_", current)[:120]
    env = {"POBLANO_CONFIG": json.dumps(config)}
    env.update(extra_env or {})
    if seed is None and os.environ.get("COCOTB_RANDOM_SEED"):
        seed = os.environ["COCOTB_RANDOM_SEED"]
    try:
        results = runner.test(test_module=test_module, hdl_toplevel=toplevel, testcase=testcase,
                              build_dir=build_dir, test_dir=run_dir, extra_env=env, seed=seed,
                              waves=waves, timescale=timescale, log_file=run_dir / "sim.log")
    except SystemExit:
        raise RunFailed(_failure_summary(test_module, sim, run_dir / "sim.log")) from None
    tests, failed = get_results(results)
    if tests == 0:
        raise RunFailed(f"cocotb module {test_module} ran no test on {sim}")
    if failed:
        raise RunFailed(_failure_summary(test_module, sim, run_dir / "sim.log"))
    return run_dir


def _failure_summary(test_module, sim, log):
    """One paragraph for pytest: the seed to reproduce with, the failing tests and their errors."""
    seed, errors, failing = None, [], []
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        if seed is None and "Seeding Python random module with" in line:
            seed = line.rsplit(" ", 1)[-1]
        stripped = line.strip()
        if re.match(r"^[\w.]+(Error|Exception|Timeout|Failure)\b.*:", stripped) and len(errors) < 5:
            errors.append(stripped)
        if stripped.startswith("**") and " FAIL " in stripped:
            failing.append(stripped.strip("* ").split()[0])
    text = [f"cocotb {test_module} failed on {sim}: {', '.join(failing) or 'simulator error'}",
            f"reproduce: COCOTB_RANDOM_SEED={seed} (log: {log})"]
    text += [f"  {e}" for e in errors]
    return "\n".join(text)
