"""``poblano vpu``: every operation on the golden model from files, reports, one-line errors."""

import json
from pathlib import Path

import numpy as np
import pytest

from poblano import cli
from poblano.commands import vpu as command
from sim_models import vpu


def _run(capsys, *args):
    status = cli.main(["vpu", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {
        "x": (rng.standard_normal((3, 64)) * 4).astype(np.float32),
        "y": rng.standard_normal((3, 64)).astype(np.float32),
        "z": rng.standard_normal((3, 64)).astype(np.float32),
        "gain": rng.standard_normal(64).astype(np.float32),
        "bf16": vpu.to_bfloat16(rng.standard_normal((3, 64)).astype(np.float32)),
        "f64": rng.standard_normal((3, 64)),
        "short": rng.standard_normal(32).astype(np.float32),
    }
    cos, sin = vpu.rope_tables(np.arange(3), 64)
    arrays["cos"], arrays["sin"] = cos, sin
    paths = {}
    for name, arr in arrays.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], arr)
    paths["out"] = tmp_path / "out.npy"
    paths["npz"] = tmp_path / "out.npz"
    paths["report"] = tmp_path / "r.json"
    return arrays, {k: str(v) for k, v in paths.items()}


CASES = [
    ("add", ["--in2", "y"], lambda a: vpu.add(a["x"], a["y"])),
    ("fma", ["--in2", "y", "--in3", "z"], lambda a: vpu.fma(a["x"], a["y"], a["z"])),
    ("scale", ["--scalar", "-1.5"], lambda a: vpu.scale(a["x"], np.float32(-1.5))),
    ("clamp", ["--lo", "-1", "--hi", "2"], lambda a: vpu.clamp(a["x"], np.float32(-1), np.float32(2))),
    ("exp", [], lambda a: vpu.exp(a["x"])),
    ("silu", [], lambda a: vpu.silu(a["x"])),
    ("sum_squares", ["--lanes", "4"], lambda a: vpu.sum_squares(a["x"], lanes=4)),
    ("max_reduce", [], lambda a: vpu.max_reduce(a["x"])),
    ("rmsnorm", ["--gain", "gain", "--eps", "1e-5"],
     lambda a: vpu.rmsnorm(a["x"], a["gain"], np.float32(1e-5))),
    ("softmax", [], lambda a: vpu.softmax(a["x"])),
    ("swiglu", ["--in2", "y"], lambda a: vpu.swiglu(a["x"], a["y"])),
    ("rope", ["--cos", "cos", "--sin", "sin"], lambda a: vpu.rope(a["x"], a["cos"], a["sin"])),
    ("to_bf16", [], lambda a: vpu.to_bfloat16(a["x"])),
]


@pytest.mark.parametrize("op, extra, want", CASES, ids=[c[0] for c in CASES])
def test_golden_operations_write_the_model_result(files, capsys, op, extra, want):
    arrays, paths = files
    extra = [paths.get(v, v) for v in extra]
    status, out, err = _run(capsys, "--op", op, "--in", paths["x"], "--out", paths["out"], *extra)
    assert status == 0, err
    got = np.load(paths["out"])
    expected = want(arrays)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))
    assert op in out


def test_topk_and_to_mx_write_npz(files, capsys):
    arrays, paths = files
    assert _run(capsys, "--op", "topk", "--k", "4", "--in", paths["x"], "--out", paths["npz"])[0] == 0
    with np.load(paths["npz"]) as data:
        values, indices = vpu.topk(arrays["x"], 4)
        assert np.array_equal(data["indices"], indices) and np.array_equal(data["values"], values)
    assert _run(capsys, "--op", "to_mx", "--mode", "rceil", "--in", paths["x"], "--out", paths["npz"])[0] == 0
    with np.load(paths["npz"]) as data:
        codes, scales = vpu.to_mx(arrays["x"], "rceil")
        assert np.array_equal(data["codes"], codes) and np.array_equal(data["scales"], scales)


def test_from_bf16_reads_uint16(files, capsys):
    arrays, paths = files
    assert _run(capsys, "--op", "from_bf16", "--in", paths["bf16"], "--out", paths["out"])[0] == 0
    assert np.array_equal(_bits(np.load(paths["out"])), _bits(vpu.from_bfloat16(arrays["bf16"])))


def test_report_gives_the_measured_accuracy(files, capsys):
    _, paths = files
    status, _, err = _run(capsys, "--op", "exp", "--in", paths["x"], "--out", paths["out"],
                          "--report", paths["report"])
    assert status == 0, err
    report = json.loads(Path(paths["report"]).read_text())
    assert report["engine"] == "golden" and report["input_shape"] == [3, 64]
    assert 0 < report["accuracy"]["max_ulp"] <= 1.0 and report["accuracy"]["in_scope"] == 192
    _run(capsys, "--op", "softmax", "--in", paths["x"], "--out", paths["out"], "--report", paths["report"])
    report = json.loads(Path(paths["report"]).read_text())
    assert 0 < report["accuracy"]["max_rel_error"] <= 1e-5


@pytest.mark.parametrize("extra, message", [
    (["--op", "cosh"], "unknown operation 'cosh'"),
    (["--op", "add"], "--in2 is required for add"),
    (["--op", "exp", "--in2", "y"], "--in2 does not apply to exp"),
    (["--op", "add", "--in2", "gain"], "needs the same shape"),
    (["--op", "exp", "--in", "f64"], "--in must be float32, got float64"),
    (["--op", "topk", "--k", "65"], "--k must be in [1, 64]"),
    (["--op", "topk"], "--k must be in [1, 64]"),
    (["--op", "rmsnorm", "--gain", "short"], "--gain has shape (32,); rmsnorm of rows of 64 needs (64,)"),
    (["--op", "rmsnorm", "--gain", "gain", "--eps", "-1"], "--eps must be finite and non-negative"),
    (["--op", "clamp", "--lo", "2", "--hi", "1"], "clamp needs --lo <= --hi"),
    (["--op", "scale"], "--scalar is required"),
    (["--op", "exp", "--in", "missing"], "not found"),
    (["--op", "exp", "--lanes", "3"], "--lanes must be a power of two"),
    (["--op", "topk", "--k", "2", "--out", "out"], "must end in .npz"),
])
def test_bad_input_is_one_line_and_exit_2(files, capsys, extra, message):
    _, paths = files
    args = ["--in", paths["x"], "--out", paths["out"]]
    extra = [paths.get(v, v) for v in extra]
    if "--in" in extra:
        args = args[2:]
    if "--out" in extra:
        args = args[:-2] if "--in" in extra else args[:2]
    status, out, err = _run(capsys, *args, *extra)
    assert status == 2
    assert err.count("\n") == 1 and message in err, err


def test_every_operation_has_a_golden_path():
    assert set(command.OPS) >= set(vpu.UNARY) | set(vpu.BINARY)
