"""Run the mutants of RTL files against their tests, on a scratch copy of the tree, with a cache.

For each file: its mutants (:mod:`.mutator`) run against its fast tests (:mod:`.mapping`); the
survivors run against its cocotb tests unless ``fast_only``. Each run is one ``pytest -x``
process, one at a time, in a scratch copy of the project (``build/mutation/scratch-<pid>/tree``);
the working tree is never written. A run longer than ``timeout_factor`` times the clean run of the
same tests, or with no test ending for ``timeout_factor`` times the longest test of the clean run
(each limit at least :data:`MIN_TIMEOUT` seconds), is stopped, with every process it started, and
counted as *timed out*.

A result is cached under ``build/mutation/cache/`` by a key made of the mutant, the pytest
arguments and the content of every project file the RTL file and its tests import (transitively; for formal
proofs, the files that define the proofs that run),
so a re-run redoes only what changed.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from poblano.mutation import equivalent, mapping, mutator

__all__ = ["TOOL_VERSION", "MIN_TIMEOUT", "Outcome", "MutantResult", "FileResult", "Scratch", "Campaign",
           "BaselineFailed", "STATUSES"]

#: Part of every cache key: bump it when a change to the mutator or the runner changes results.
TOOL_VERSION = "1"
MIN_TIMEOUT = 30.0
_FROZEN = 10.0      # a watchdog poll (every 0.2 s) this late means the machine paused or starved it
STATUSES = ("killed", "timed out", "survived", "untested", "error")

_COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".pytest_cache",
                                      ".hypothesis", ".ruff_cache", "*.egg-info", "sim_build", "*.fst",
                                      "*.vcd", "results.xml")


class BaselineFailed(RuntimeError):
    """The tests of a file fail (or time out) on the unmutated tree: its mutants cannot be judged."""


@dataclass
class Outcome:
    """One pytest run."""

    status: str          #: killed, survived, timed out or error
    seconds: float
    detail: str = ""     #: the first failing test, or why the run is an error
    max_gap: float = 0.0  #: the longest time without output (about the longest test)


@dataclass
class MutantResult:
    mutant: mutator.Mutant
    status: str                      #: one of :data:`STATUSES`
    stage: str = ""                  #: the stage that decided it: fast or cocotb ("" if none ran)
    seconds: float = 0.0             #: test time, over both stages (cached runs included)
    stage_seconds: dict = field(default_factory=dict)   #: stage -> test time
    detail: str = ""
    cached: bool = False             #: every stage came from the cache

    def to_json(self):
        m = self.mutant
        return {"key": m.key, "line": m.line, "function": m.function, "operator": m.operator,
                "before": m.before, "after": m.after, "status": self.status, "stage": self.stage,
                "seconds": round(self.seconds, 2),
                "stage_seconds": {k: round(v, 2) for k, v in self.stage_seconds.items()},
                "detail": self.detail, "cached": self.cached}


@dataclass
class FileResult:
    path: str
    selection: mapping.Selection
    results: list = field(default_factory=list)
    baseline: dict = field(default_factory=dict)     #: stage -> clean run seconds
    wall_seconds: float = 0.0
    error: str = ""                                  #: set when the file could not be judged
    rtl_hash: str = ""
    sampled_from: int = 0                            #: mutants of the file before --max

    def count(self, status, stage=None):
        return sum(1 for r in self.results if r.status == status and (stage is None or r.stage == stage))


def _digest(*parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _hash_files(root, files):
    h = hashlib.sha256()
    for rel in sorted(set(files)):
        h.update(rel.encode() + b"\0")
        try:
            h.update((Path(root) / rel).read_bytes())
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


class Scratch:
    """A scratch copy of the project tree in which mutants are written and tests run."""

    def __init__(self, root, base, env=None):
        self.root = Path(root)
        self.base = Path(base)
        self.tree = self.base / "tree"
        self.extra_env = dict(env or {})

    def __enter__(self):
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        shutil.copytree(self.root, self.tree, ignore=_COPY_IGNORE, symlinks=True)
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.base, ignore_errors=True)

    def write(self, rel, text):
        """Write ``text`` to ``rel`` in the scratch tree and drop its stale bytecode."""
        path = self.tree / rel
        path.write_text(text)
        for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)

    def env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.tree), *filter(None, [env.get("PYTHONPATH")])])
        env.pop("PYTHONPYCACHEPREFIX", None)
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop("PYTEST_CURRENT_TEST", None)
        env.update(self.extra_env)
        return env

    def pytest(self, args, timeout, silence=None):
        """Run ``pytest -x <args>`` in the scratch tree: an :class:`Outcome` (killed = tests failed).

        ``timeout`` bounds the whole run; ``silence`` bounds the time without output (``pytest -q``
        writes a character as each test ends, so it bounds one test). Past either, the run and
        every process it started are stopped and it is *timed out*. A stretch in which this
        watchdog itself did not run (the machine paused or starved it) counts towards neither, and
        not towards the run's time: it would otherwise time out a run that did nothing wrong.
        """
        # One process: the project's addopts has no -n, and PYTEST_ADDOPTS is dropped from env().
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "--tb=line", "--no-header", f"--basetemp={self.base / 'pytest-tmp'}", *args]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.tree, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        chunks, last, gap = [], [start], [0.0]

        def reader():
            while data := os.read(proc.stdout.fileno(), 65536):
                now = time.monotonic()
                gap[0] = max(gap[0], now - last[0])
                last[0] = now
                chunks.append(data)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        why, frozen, tick = None, 0.0, start
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now - tick > _FROZEN:           # this loop did not run: do not count the gap
                    frozen += now - tick
                    last[0] = max(last[0], now)
                tick = now
                if timeout is not None and now - start - frozen > timeout:
                    why = f"no result after {timeout:.0f} s"
                elif silence is not None and now - last[0] > silence:
                    why = f"no test ended for {silence:.0f} s"
                if why:
                    break
                time.sleep(0.2)
        finally:
            _kill_group(proc)                      # also whatever the run left behind
            thread.join(timeout=10)
            proc.stdout.close()
        seconds = time.monotonic() - start - frozen
        out = b"".join(chunks).decode(errors="replace")
        if why:
            return Outcome("timed out", seconds, why, gap[0])
        if proc.returncode == 0:
            return Outcome("survived", seconds, "", gap[0])
        if proc.returncode in (1, 2):              # tests failed / collection error (-x stops early)
            return Outcome("killed", seconds, _first_failure(out), gap[0])
        tail = " | ".join(line.strip() for line in out.strip().splitlines()[-3:])
        return Outcome("error", seconds, f"pytest exit status {proc.returncode}: {tail}"[:300], gap[0])


def _remove_stale_scratch(build):
    """Scratch trees left by campaigns that were killed (their process is gone)."""
    for stale in Path(build).glob("scratch-*"):
        try:
            os.kill(int(stale.name.removeprefix("scratch-")), 0)
        except ValueError:
            continue
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:
            pass


def _argued_equivalent(path, m):
    return equivalent.reason(path, m.function, m.before, m.after) is not None


def _kill_group(proc):
    """Stop a run and every process it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _first_failure(out):
    for line in out.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.strip()[:300]
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


class Campaign:
    """Mutation testing of RTL files of the project at ``root``.

    ``build`` is where the cache and the scratch tree live (``<root>/build/mutation`` by default);
    ``selection`` (a callable ``path -> Selection``) overrides :func:`mapping.selection_for`;
    ``timeout`` (seconds) overrides the timeout derived from the clean run; ``env`` is added to the
    environment of every pytest run; ``use_cache=False`` re-runs everything (and refreshes the cache).
    Survivors of the fast tests that ``equivalent(path, mutant)`` argues equivalent (by default:
    :mod:`.equivalent`) are not re-run against the cocotb tests: no test can kill them.
    """

    def __init__(self, root, build=None, fast_only=False, max_mutants=None, timeout_factor=3.0,
                 timeout=None, selection=None, log=print, env=None, use_cache=True, equivalent=None):
        self.root = Path(root).resolve()
        self.build = Path(build) if build else self.root / "build" / "mutation"
        self.cache = self.build / "cache"
        self.fast_only = fast_only
        self.max_mutants = max_mutants
        self.timeout_factor = timeout_factor
        self.timeout = timeout
        self._selection = selection
        self.log = log
        self.env = env
        self.use_cache = use_cache
        self.equivalent = equivalent or _argued_equivalent
        self.runs = 0                      #: pytest processes started (baselines included)

    # -- planning -------------------------------------------------------------------------------
    def selection(self, path):
        if self._selection is not None:
            return self._selection(path)
        return mapping.selection_for(self.root, path, list(self.proof_files()))

    def proof_files(self):
        if not hasattr(self, "_proof_files"):
            self._proof_files = mapping.proof_files()
        return self._proof_files

    def mutants(self, path, root=None):
        """(sampled mutants, total) of the file ``path``."""
        source = (Path(root or self.root) / path).read_text()
        found = mutator.mutants(source, path)
        return mutator.sample(found, self.max_mutants), len(found)

    # -- cache ----------------------------------------------------------------------------------
    def _cache_get(self, key):
        if not self.use_cache:
            return None
        try:
            return json.loads((self.cache / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def _cache_put(self, key, value):
        self.cache.mkdir(parents=True, exist_ok=True)
        tmp = self.cache / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        tmp.replace(self.cache / f"{key}.json")

    # -- running --------------------------------------------------------------------------------
    def run(self, paths):
        """Run every file in ``paths``; a list of :class:`FileResult`."""
        _remove_stale_scratch(self.build)
        results = []
        with Scratch(self.root, self.build / f"scratch-{os.getpid()}", env=self.env) as scratch:
            for path in paths:
                results.append(self.run_file(scratch, path))
        return results

    def _stage_hash(self, tree, files, extra=()):
        deps = mapping.local_closure(tree, [*files, *extra])
        return _hash_files(tree, deps)

    def run_file(self, scratch, path):
        start = time.monotonic()
        tree = scratch.tree
        sel = self.selection(path)
        original = (tree / path).read_text()
        sample, total = self.mutants(path, root=tree)
        result = FileResult(path, sel, sampled_from=total)
        result.rtl_hash = self._stage_hash(tree, [path])
        common = ["pyproject.toml", "tests/conftest.py"]
        formal = []
        if sel.proofs:                  # the files of the proofs that run, not every proof file
            files = self.proof_files()
            formal = ["verification/formal/proof.py", *sorted({files[n] for n in sel.proofs if n in files})]
        stages = {
            "fast": (sel.fast_args(), self._stage_hash(tree, sel.fast_files(), common + formal)),
            "cocotb": (sel.cocotb_args(), self._stage_hash(tree, sel.cocotb, common)),
        }
        baselines = {}

        def limits(stage):
            """(timeout, silence) of the runs of ``stage``."""
            if self.timeout is not None:
                return self.timeout, None
            if stage not in baselines:
                args, deps = stages[stage]
                key = _digest(TOOL_VERSION, "baseline", path, result.rtl_hash, deps, args)
                cached = self._cache_get(key)
                if cached is None or "max_gap" not in cached:
                    self.log(f"{path}: clean run of the {stage} tests ...")
                    outcome = scratch.pytest(args, timeout=None)
                    self.runs += 1
                    if outcome.status != "survived":
                        raise BaselineFailed(f"{stage} tests {outcome.status.replace('killed', 'fail')} on "
                                             f"the unmutated tree: {outcome.detail}")
                    cached = {"seconds": outcome.seconds, "max_gap": outcome.max_gap}
                    self._cache_put(key, cached)
                baselines[stage] = cached
                result.baseline[stage] = round(cached["seconds"], 2)
                self.log(f"{path}: clean {stage} run {cached['seconds']:.1f} s, longest test "
                         f"{cached['max_gap']:.1f} s")
            clean = baselines[stage]
            return (max(self.timeout_factor * clean["seconds"], MIN_TIMEOUT),
                    max(self.timeout_factor * clean["max_gap"], MIN_TIMEOUT))

        def run_stage(stage, m):
            args, deps = stages[stage]
            key = _digest(TOOL_VERSION, stage, path, result.rtl_hash, deps, args, m.key)
            cached = self._cache_get(key)
            if cached is not None:
                return Outcome(**cached), True
            limit, silence = limits(stage)
            scratch.write(path, m.apply(original))
            try:
                outcome = scratch.pytest(args, timeout=limit, silence=silence)
            finally:
                scratch.write(path, original)
            self.runs += 1
            if outcome.status != "error":
                self._cache_put(key, asdict(outcome))
            return outcome, False

        try:
            for i, m in enumerate(sample, 1):
                r = MutantResult(m, "untested", cached=True)
                if stages["fast"][0]:
                    outcome, cached = run_stage("fast", m)
                    r.status, r.stage, r.seconds = outcome.status, "fast", outcome.seconds
                    r.detail, r.cached = outcome.detail, cached
                    r.stage_seconds["fast"] = outcome.seconds
                result.results.append(r)
                self._progress(i, len(sample), r)
            if not self.fast_only and stages["cocotb"][0]:
                pending = [r for r in result.results if r.status == "untested"
                           or r.status == "survived" and not self.equivalent(path, r.mutant)]
                argued = sum(1 for r in result.results if r.status == "survived") - len(
                    [r for r in pending if r.status == "survived"])
                if argued:
                    self.log(f"{path}: {argued} survivors argued equivalent are not re-run against cocotb")
                for i, r in enumerate(pending, 1):
                    outcome, cached = run_stage("cocotb", r.mutant)
                    r.status, r.stage, r.detail = outcome.status, "cocotb", outcome.detail
                    r.seconds += outcome.seconds
                    r.stage_seconds["cocotb"] = outcome.seconds
                    r.cached = r.cached and cached
                    self._progress(i, len(pending), r)
        except BaselineFailed as exc:
            result.error = str(exc)
            self.log(f"{path}: {exc}")
        result.wall_seconds = time.monotonic() - start
        return result

    def _progress(self, i, n, r):
        m = r.mutant
        how = "cached" if r.cached else f"{r.seconds:.1f} s"
        stage = f" ({r.stage})" if r.stage else ""
        self.log(f"[{i}/{n}] {m.where} {m.operator:7s} {r.status}{stage}, {how}: {m.description}")
