"""``poblano quantize --format`` and ``poblano gemm`` on operand files of any MX element format.

The golden model runs every format pair; the built hardware quantizer runs every format (checked bit
for bit with ``--rtl``); the built MAC array runs e2m1 only, and asking it for anything else is a
one-line usage error with exit status 2, before any build.
"""

import numpy as np
import pytest

from poblano import cli
from sim_models import mx


def _run(capsys, *args):
    status = cli.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _one_line_error(status, err, message):
    lines = err.strip().splitlines()
    return status == 2 and len(lines) == 1 and message in lines[0] and lines[0].startswith("poblano ")


@pytest.mark.parametrize("fmt", mx.FORMATS)
def test_quantize_format_writes_the_format_entry(tmp_path, capsys, fmt):
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32) * 100
    x[2, 5] = np.inf
    np.save(tmp_path / "x.npy", x)
    status, out, _ = _run(capsys, "quantize", "--in", str(tmp_path / "x.npy"),
                          "--out", str(tmp_path / "q.npz"), "--format", fmt, "--mode", "rceil")
    assert status == 0, out
    assert f"to {fmt}" in out and "1 NaN/Inf block" in out
    with np.load(tmp_path / "q.npz") as q:
        assert sorted(q.files) == ["codes", "format", "scales"]
        assert q["format"].dtype.kind == "U" and q["format"].shape == () and str(q["format"]) == fmt
        want_codes, want_scales = mx.quantize(x, "rceil", fmt)
        assert np.array_equal(q["codes"], want_codes) and np.array_equal(q["scales"], want_scales)


def test_quantize_default_format_is_e2m1(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.full((1, 32), 7.0, np.float32))
    assert _run(capsys, "quantize", "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "q.npz"))[0] == 0
    with np.load(tmp_path / "q.npz") as q:
        assert str(q["format"]) == "e2m1" and set(q["codes"].ravel().tolist()) == {7}


@pytest.mark.parametrize("args, message", [
    (["--format", "e3m3"], "unknown element format 'e3m3'; choose e2m1, e2m3, e3m2, e4m3 or e5m2"),
    (["--format", "E4M3"], "unknown element format 'E4M3'"),
])
def test_quantize_format_errors_are_one_line(tmp_path, capsys, args, message):
    np.save(tmp_path / "x.npy", np.zeros((1, 32), np.float32))
    status, _, err = _run(capsys, "quantize", "--in", str(tmp_path / "x.npy"),
                          "--out", str(tmp_path / "q.npz"), *args)
    assert _one_line_error(status, err, message), err
    assert not (tmp_path / "q.npz").exists()


@pytest.mark.cocotb
@pytest.mark.parametrize("fmt, mode, sim", [("e2m3", "floor", "verilator"), ("e3m2", "rceil", "verilator"),
                                            ("e4m3", "floor", "verilator"), ("e5m2", "rceil", "verilator"),
                                            ("e4m3", "rceil", "icarus")])
def test_quantize_rtl_runs_every_format(tmp_path, capsys, fmt, mode, sim):
    from verification.runner import sim_params
    sim_params(sim)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 64)) * np.exp2(rng.integers(-20, 20, (4, 1)))).astype(np.float32)
    x[1, 3] = -np.inf
    x[2, :32] = 0.0
    np.save(tmp_path / "x.npy", x)
    status, out, _ = _run(capsys, "quantize", "--in", str(tmp_path / "x.npy"),
                          "--out", str(tmp_path / "q.npz"), "--format", fmt, "--mode", mode, "--rtl",
                          "--sim", sim)
    assert status == 0 and "bit for bit" in out, out
    with np.load(tmp_path / "q.npz") as q:
        want_codes, want_scales = mx.quantize(x, mode, fmt)
        assert str(q["format"]) == fmt
        assert np.array_equal(q["codes"], want_codes) and np.array_equal(q["scales"], want_scales)


def _quantized_operands(tmp_path, capsys, a_format, b_format, m=3, k=96, n=4):
    rng = np.random.default_rng(2)
    np.save(tmp_path / "a.npy", rng.standard_normal((m, k)).astype(np.float32))
    np.save(tmp_path / "bt.npy", rng.standard_normal((n, k)).astype(np.float32))
    for name, fmt in (("a", a_format), ("bt", b_format)):
        status, out, _ = _run(capsys, "quantize", "--in", str(tmp_path / f"{name}.npy"),
                              "--out", str(tmp_path / f"{name}.npz"), "--format", fmt)
        assert status == 0, out
    with np.load(tmp_path / "bt.npz") as bt:           # B is quantized along K: transpose the file
        np.savez(tmp_path / "b.npz", codes=bt["codes"].T.copy(), scales=bt["scales"].T.copy(),
                 format=bt["format"])
    return ["--a", str(tmp_path / "a.npz"), "--b", str(tmp_path / "b.npz"), "--out", str(tmp_path / "c.npy")]


@pytest.mark.parametrize("a_format, b_format", [("e4m3", "e2m1"), ("e2m3", "e2m1"), ("e5m2", "e5m2"),
                                                ("e2m1", "e3m2"), ("e2m1", "e2m1")])
def test_gemm_golden_runs_the_pair_named_in_the_files(tmp_path, capsys, a_format, b_format):
    args = _quantized_operands(tmp_path, capsys, a_format, b_format)
    status, out, err = _run(capsys, "gemm", *args, "--golden", "--report", str(tmp_path / "r.json"))
    assert status == 0, err
    assert f"golden model: {a_format} x {b_format}" in out
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        want = mx.matmul(a["codes"], a["scales"], b["codes"], b["scales"], a_format=a_format,
                         b_format=b_format)
    got = np.load(tmp_path / "c.npy")
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert f'"a_format": "{a_format}"' in (tmp_path / "r.json").read_text()


def test_gemm_files_without_a_format_are_e2m1(tmp_path, capsys):
    args = _quantized_operands(tmp_path, capsys, "e2m1", "e2m1")
    for name in ("a", "b"):                          # rewrite both files the way they used to be written
        with np.load(tmp_path / f"{name}.npz") as q:
            codes, scales = q["codes"], q["scales"]
        np.savez(tmp_path / f"{name}.npz", codes=codes, scales=scales)
    status, out, _ = _run(capsys, "gemm", *args, "--golden")
    assert status == 0 and "golden model: e2m1 x e2m1" in out


@pytest.mark.parametrize("a_format, b_format", [("e4m3", "e2m1"), ("e2m1", "e4m3"), ("e5m2", "e5m2")])
@pytest.mark.parametrize("sim", [[], ["--sim", "icarus"], ["--check"]])
def test_gemm_rtl_with_another_format_is_a_usage_error(tmp_path, capsys, a_format, b_format, sim):
    args = _quantized_operands(tmp_path, capsys, a_format, b_format)
    status, _, err = _run(capsys, "gemm", *args, *sim)
    assert _one_line_error(status, err, f"the built MAC array supports only e2m1 x e2m1, not {a_format} x "
                                        f"{b_format}; use --golden"), err
    assert not (tmp_path / "c.npy").exists()


def test_gemm_bad_format_entries_are_one_line_errors(tmp_path, capsys):
    args = _quantized_operands(tmp_path, capsys, "e2m3", "e2m1")
    with np.load(tmp_path / "a.npz") as a:
        codes, scales = a["codes"], a["scales"]
    cases = [
        ({"format": np.array("e3m3")}, "A file", "names unknown element format 'e3m3'"),
        ({"format": np.array(["e2m3"])}, "", "A 'format' must be a string such as 'e4m3'"),
        ({"format": np.array(4)}, "", "A 'format' must be a string"),
        ({"format": np.array("e2m1")}, "", "A 'codes' holds code"),                 # FP6 codes as FP4
        ({"format": np.array("e2m3"), "codes": codes | 0x40}, "", "E2M3 codes are 0..63"),
    ]
    for change, prefix, message in cases:
        arrays = {"codes": codes, "scales": scales, "format": np.array("e2m3"), **change}
        np.savez(tmp_path / "a.npz", **arrays)
        status, _, err = _run(capsys, "gemm", *args, "--golden")
        assert _one_line_error(status, err, message) and prefix in err, (change, err)
        assert not (tmp_path / "c.npy").exists()
