"""``poblano mutate``: the mutator, the campaign (killed, survived, timed out, cache), the report, the CLI.

Everything here runs on tiny toy projects under ``tmp_path`` (a few pytest subprocesses of about a
second each); no real mutation campaign runs.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from poblano import cli
from poblano.mutation import campaign, equivalent, mapping, mutator, report

# -- the mutator ---------------------------------------------------------------------------------

SNIPPET = '''\
from amaranth.hdl import Module, Mux, Signal


class Toy:
    def __init__(self, width):
        self.width = width + 1

    @property
    def latency(self):
        return 1 + 1

    def elaborate(self, platform):
        """Docstring: 1 + 2."""
        m = Module()
        if self.width < 0:
            raise ValueError(f"width {self.width - 1} < 0")
        m.d.comb += self.o.eq(Mux(self.s, self.a & self.b, ~self.c))
        with m.If(self.en == 3):
            m.d.sync += [self.q.eq(self.a), self.v.eq(self.b)]
        s = Signal(8, name="x_1", reset_less=True)
        return m
'''

EXPECTED = [
    (17, "eq", "self.o.eq(Mux(self.s, self.a & self.b, ~self.c))", "(dropped)"),
    (17, "mux", "Mux(self.s, self.a & self.b, ~self.c)", "Mux(self.s, ~self.c, self.a & self.b)"),
    (17, "binop", "self.a & self.b", "self.a ^ self.b"),
    (17, "binop", "self.a & self.b", "self.a | self.b"),
    (17, "unary", "~self.c", "self.c"),
    (18, "cond", "m.If(self.en == 3)", "m.If(~(self.en == 3))"),
    (18, "compare", "self.en == 3", "self.en != 3"),
    (18, "const", "self.en == 3", "self.en == 2"),
    (18, "const", "self.en == 3", "self.en == 4"),
    (19, "eq", "self.q.eq(self.a)", "(dropped)"),
    (19, "eq", "self.v.eq(self.b)", "(dropped)"),
    (20, "const", 'Signal(8, name="x_1", reset_less=True)', 'Signal(7, name="x_1", reset_less=True)'),
    (20, "const", 'Signal(8, name="x_1", reset_less=True)', 'Signal(9, name="x_1", reset_less=True)'),
]


def test_mutator_makes_the_expected_mutants_of_a_snippet():
    """Operators, Mux arms, dropped .eq and inverted m.If in elaborate; never __init__, a property,
    a docstring, a parameter check, a name or a flag."""
    found = mutator.mutants(SNIPPET, "toy.py")
    assert [(m.line, m.operator, m.before, m.after) for m in found] == EXPECTED
    assert all(m.function == "Toy.elaborate" for m in found)
    texts = {m.apply(SNIPPET) for m in found}
    assert len(texts) == len(found) and SNIPPET not in texts
    for text in texts:
        compile(text, "toy.py", "exec")
        changed = [i + 1 for i, (a, b) in enumerate(zip(SNIPPET.splitlines(), text.splitlines(), strict=True))
                   if a != b]
        assert len(changed) == 1 and 17 <= changed[0] <= 20          # one line, line count kept


def test_mutator_operators_on_expressions():
    source = textwrap.dedent('''\
        def f(m, a, b):
            x = (a | b) ^ (a - b) + (a << 2)
            y = Mux(a, b, b) if not a else a >= 0x1F
            m.d.comb += [z.eq(1) for z in b]
    ''')
    found = {(m.operator, m.after) for m in mutator.mutants(source, "f.py")}
    for expected in [("binop", "a & b"), ("binop", "a ^ b"), ("binop", "(a | b) | (a - b) + (a << 2)"),
                     ("binop", "(a | b) & (a - b) + (a << 2)"), ("binop", "a + b"),
                     ("binop", "(a - b) - (a << 2)"), ("binop", "a >> 2"), ("const", "a << 3"),
                     ("unary", "a"), ("compare", "a > 0x1F"), ("compare", "a < 0x1F"),
                     ("const", "a >= 0x20"), ("const", "a >= 0x1E"), ("const", "z.eq(2)")]:
        assert expected in found, expected
    assert not any(op == "mux" for op, _ in found)            # identical arms: nothing to swap
    assert not any(op == "eq" for op, _ in found)             # a comprehension is not dropped


def test_sample_is_spread_evenly():
    assert mutator.sample(list(range(10)), 3) == [0, 3, 6]
    assert mutator.sample(list(range(4)), None) == [0, 1, 2, 3]
    assert mutator.sample(list(range(4)), 9) == [0, 1, 2, 3]


# -- the mapping ---------------------------------------------------------------------------------

def test_mapping_of_the_issue_example_and_every_rtl_file(request):
    root = request.config.rootpath
    names = mapping.proof_names()
    sel = mapping.selection_for(root, "rtl/mx/fp32_accumulate.py", names)
    assert sel.fast == ("tests/rtl/mx/test_fp32_accumulate.py",)
    assert sel.proofs and all(p.startswith("mx_fp32_accumulate") for p in sel.proofs)
    assert "tests/rtl/mx/test_mac_array_cocotb.py" in sel.cocotb
    assert sel.fast_args()[:3] == ["-m", "not cocotb", "tests/rtl/mx/test_fp32_accumulate.py"]
    by_convention = mapping.selection_for(root, "rtl/common/stream_register.py", names)
    assert by_convention.fast == by_convention.cocotb == ("tests/rtl/common/test_stream_register.py",)
    assert by_convention.proofs == tuple(n for n in names if n.startswith("stream_register"))
    for path in mapping.rtl_files(root):                    # every mapped test file exists
        mapping.selection_for(root, path, names)
    for path in mapping.OVERRIDES:
        assert (root / path).is_file(), f"stale entry in OVERRIDES: {path}"
    # A result depends on the file defining its proofs, not on every proof file.
    files = mapping.proof_files()
    assert {files[p] for p in sel.proofs} == {"verification/formal/mx_fp32_accumulate.py"}


def test_closure_follows_local_imports(request):
    deps = mapping.local_closure(request.config.rootpath, ["rtl/mx/fp32_accumulate.py"])
    assert {"rtl/mx/fp32_accumulate.py", "rtl/mx/layouts.py", "rtl/common/parameters.py"} <= set(deps)
    cocotb = mapping.local_closure(request.config.rootpath, ["tests/rtl/common/test_stream_register.py"])
    assert "verification/common/tb_stream_register.py" in cocotb       # named by test_module="..."


# -- campaigns on a toy project ------------------------------------------------------------------

# The mutator and the runner do not depend on Amaranth, so the toy is plain Python, and its pytest
# runs load no plugins: each takes well under a second. (The snippet above covers Amaranth code.)
GATE = '''\
def gate(a, b):
    return a & b
'''

# a == b, where a & b == a | b: the '|' mutant survives, the '^' mutant is killed.
GATE_TEST = '''\
from toyrtl.gate import gate


def test_gate():
    assert gate(0b1100, 0b1100) == 0b1100
'''

QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

STRONGER = "\n\ndef test_gate_differs():\n    assert gate(0b1100, 0b1010) == 0b1000\n"


def _make_toy(root):
    (root / "toyrtl").mkdir(parents=True)
    (root / "checks").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\nmarkers = ["cocotb: slow"]\n')
    (root / "toyrtl" / "__init__.py").write_text("")
    (root / "toyrtl" / "gate.py").write_text(GATE)
    (root / "checks" / "test_gate.py").write_text(GATE_TEST)
    return root


FAST_ONLY = mapping.Selection(fast=("checks/test_gate.py",))


def _campaign(root, build, selection=FAST_ONLY, **kwargs):
    return campaign.Campaign(root, build=build, selection=lambda path: selection, log=lambda *a: None,
                             env=QUICK, **kwargs)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One campaign on the toy (a fixed timeout, so no clean run): (root, build dir, campaign, result)."""
    base = tmp_path_factory.mktemp("mutate")
    root = _make_toy(base / "toy")
    c = _campaign(root, base / "out", timeout=60)
    (result,) = c.run(["toyrtl/gate.py"])
    return root, base / "out", c, result


def test_killed_and_survived_mutants_are_counted(toy_run):
    root, build, c, result = toy_run
    status = {r.mutant.after: (r.status, r.stage) for r in result.results}
    assert status == {"a ^ b": ("killed", "fast"), "a | b": ("survived", "fast")}
    assert c.runs == 2 and not any(r.cached for r in result.results)
    killed = next(r for r in result.results if r.status == "killed")
    assert "FAILED checks/test_gate.py::test_gate" in killed.detail
    assert (root / "toyrtl" / "gate.py").read_text() == GATE          # the tree is never written
    assert not list(build.glob("scratch-*"))                           # the scratch copy is gone


def test_cache_redoes_only_what_changed(toy_run, tmp_path):
    root, build, _, first = toy_run
    copy = tmp_path / "toy"
    shutil.copytree(root, copy)
    again = _campaign(copy, build, timeout=60)
    (cached,) = again.run(["toyrtl/gate.py"])
    assert again.runs == 0 and all(r.cached for r in cached.results)
    assert [r.status for r in cached.results] == [r.status for r in first.results]
    # A change to the tests invalidates their results: re-run, the survivor is now killed.
    (copy / "checks" / "test_gate.py").write_text(GATE_TEST + STRONGER)
    third = _campaign(copy, build, timeout=60)
    (rerun,) = third.run(["toyrtl/gate.py"])
    assert third.runs == 2 and [r.status for r in rerun.results] == ["killed", "killed"]


def test_survivors_are_rerun_against_cocotb_unless_argued_equivalent(tmp_path):
    root = _make_toy(tmp_path / "toy")
    (root / "checks" / "test_gate_cocotb.py").write_text(
        "import pytest\n\nfrom toyrtl.gate import gate\n\n\n@pytest.mark.cocotb\n"
        "def test_gate_on_a_simulator():\n    assert gate(0b1100, 0b1010) == 0b1000\n")
    both = mapping.Selection(fast=("checks/test_gate.py",), cocotb=("checks/test_gate_cocotb.py",))
    c = _campaign(root, tmp_path / "out", selection=both, timeout=60)
    (result,) = c.run(["toyrtl/gate.py"])
    assert {r.mutant.after: (r.status, r.stage) for r in result.results} == {
        "a ^ b": ("killed", "fast"), "a | b": ("killed", "cocotb")}
    assert c.runs == 3 and "test_gate_on_a_simulator" in result.results[1].detail

    argued = _campaign(root, tmp_path / "out2", selection=both, timeout=60, equivalent=lambda path, m: True)
    (result,) = argued.run(["toyrtl/gate.py"])
    assert argued.runs == 2 and [r.status for r in result.results] == ["killed", "survived"]


def test_clean_run_sets_the_timeout_and_a_failing_clean_run_is_reported(tmp_path):
    root = _make_toy(tmp_path / "toy")
    c = _campaign(root, tmp_path / "out", max_mutants=1)
    (result,) = c.run(["toyrtl/gate.py"])
    assert c.runs == 2 and "fast" in result.baseline and not result.error
    (root / "checks" / "test_gate.py").write_text(GATE_TEST.replace("== 0b1100\n", "== 0b1111\n"))
    broken = _campaign(root, tmp_path / "out", max_mutants=1)
    (result,) = broken.run(["toyrtl/gate.py"])
    assert broken.runs == 1 and "unmutated tree" in result.error and result.results == []


def test_scratch_trees_of_dead_campaigns_are_removed(tmp_path):
    dead, alive = tmp_path / "scratch-999999999", tmp_path / f"scratch-{os.getpid()}"
    for d in (dead, alive):
        (d / "tree").mkdir(parents=True)
    campaign._remove_stale_scratch(tmp_path)
    assert not dead.exists() and alive.exists()


def test_a_run_past_its_timeout_is_stopped_and_counted_timed_out(tmp_path):
    root = tmp_path / "slow"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "test_slow.py").write_text(
        "import subprocess, sys, time\n\n\ndef test_slow():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    time.sleep(60)\n")
    with campaign.Scratch(root, tmp_path / "scratch", env=QUICK) as scratch:
        total = scratch.pytest(["test_slow.py"], timeout=1)
        silent = scratch.pytest(["test_slow.py"], timeout=None, silence=1)   # no test ends for 1 s
    assert total.status == "timed out" and "no result after 1 s" in total.detail and total.seconds < 20
    assert silent.status == "timed out" and "no test ended for 1 s" in silent.detail


def test_report_merges_files_lists_survivors_and_honours_equivalents(toy_run, tmp_path, monkeypatch):
    root, _, _, result = toy_run
    md = tmp_path / "mutation.md"
    e = report.entry(result, root, "poblano mutate --file toyrtl/gate.py", fast_only=True)
    report.write_markdown(md, [e])
    text = md.read_text()
    assert "toyrtl/gate.py:2" in text and r"`a \| b`" in text
    row = report.summary(e)
    assert (row["mutants"], row["killed_fast"], row["survived"], row["rate_fast"]) == (2, 1, 1, 50.0)

    other = dict(e, path="toyrtl/other.py")
    report.write_markdown(md, [other])                        # another file: the first is kept
    text = md.read_text()
    assert "## `toyrtl/gate.py`" in text and "## `toyrtl/other.py`" in text
    assert text.count("| `toyrtl/gate.py` | 2 | 1 |") == 2     # summary table and its section

    monkeypatch.setitem(equivalent.EQUIVALENT, "toyrtl/gate.py", {("gate", "a & b", "a | b"): "toy argument"})
    argued = report.refresh_equivalents(json.loads(json.dumps(e)))     # as --report-only does
    assert report.summary(argued)["rate_fast"] == 100.0 and report.summary(e)["rate_fast"] == 50.0
    report.write_markdown(md, [argued])
    assert "equivalent: toy argument" in md.read_text()

    data = report.merge_json(tmp_path / "mutation.json", [e, other])
    assert set(data) == {"toyrtl/gate.py", "toyrtl/other.py"}
    assert json.loads((tmp_path / "mutation.json").read_text())["files"]["toyrtl/gate.py"]["mutants"]


# -- the command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--max", "0"], "--max needs a positive number"),
    (["--max", "many"], "--max needs a positive number"),
    (["--timeout-factor", "-1"], "--timeout-factor needs a positive number"),
    (["--block", "nosuch"], "unknown block 'nosuch'"),
    (["--block", "layouts"], "ambiguous"),
    (["--file", "README.md"], "not an RTL file"),
    (["--file", "rtl/mx/no_such_file.py"], "no such file"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message, capsys):
    assert cli.main(["mutate", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("poblano mutate: error:")


def test_bad_argument_from_the_shell():
    out = subprocess.run([sys.executable, "-m", "poblano.cli", "mutate", "--block", "nosuch"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_list_runs_nothing(capsys):
    assert cli.main(["mutate", "--list", "--file", "rtl/common/stream_register.py", "--max", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^rtl/common/stream_register.py: \d+ mutants \(2 selected\)$", out, re.M)
    assert "proofs stream_register_protocol" in out
