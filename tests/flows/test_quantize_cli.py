"""``poblano quantize``: golden and RTL paths, dtypes, and one-line errors for bad input."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from poblano import cli
from sim_models import mx
from verification.runner import SIMULATORS


def _quantize(capsys, *args):
    status = cli.main(["quantize", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _load(path):
    with np.load(path) as result:
        return result["codes"], result["scales"]


def _sample(rng, shape):
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape[:-1] + (1,)))).astype(np.float32)
    x.reshape(-1)[:3] = [np.inf, 0.0, -0.0]
    x.reshape(-1)[40] = 1e-40                       # subnormal
    return x


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_golden_quantize_writes_codes_and_scales(tmp_path, capsys, mode):
    x = _sample(np.random.default_rng(1), (2, 3, 64))
    np.save(tmp_path / "x.npy", x)
    status, out, _ = _quantize(capsys, "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.npz"),
                               "--mode", mode)
    assert status == 0, out
    codes, scales = _load(tmp_path / "x.npz")
    want_codes, want_scales = mx.quantize(x, mode)
    assert codes.dtype == np.uint8 and scales.dtype == np.uint8
    assert codes.shape == (2, 3, 64) and scales.shape == (2, 3, 2)
    assert np.array_equal(codes, want_codes) and np.array_equal(scales, want_scales)
    assert "12 blocks" in out and "1 NaN/Inf block" in out


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16])
def test_other_float_dtypes(tmp_path, capsys, dtype):
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    status, _, _ = _quantize(capsys, "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.npz"))
    assert status == 0
    codes, scales = _load(tmp_path / "x.npz")
    want_codes, want_scales = mx.quantize(x)
    assert np.array_equal(codes, want_codes) and np.array_equal(scales, want_scales)


def test_default_mode_is_floor(tmp_path, capsys):
    x = np.full(32, 7.0, dtype=np.float32)          # FLOOR saturates 7 -> 6 (code 7); RCEIL scales up
    np.save(tmp_path / "x.npy", x)
    assert _quantize(capsys, "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.npz"))[0] == 0
    codes, scales = _load(tmp_path / "x.npz")
    assert scales.tolist() == [127] and set(codes.tolist()) == {7}


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_rtl_matches_golden(tmp_path, capsys, sim):
    from verification.runner import sim_params
    sim_params(sim)
    x = _sample(np.random.default_rng(3), (5, 96))
    np.save(tmp_path / "x.npy", x)
    status, out, _ = _quantize(capsys, "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.npz"),
                               "--mode", "rceil", "--rtl", "--sim", sim)
    assert status == 0, out
    assert "matches the golden model bit for bit" in out
    assert "15 blocks in 21 cycles" in out           # one block per cycle plus the 6-cycle latency
    codes, scales = _load(tmp_path / "x.npz")
    want_codes, want_scales = mx.quantize(x, "rceil")
    assert np.array_equal(codes, want_codes) and np.array_equal(scales, want_scales)


@pytest.mark.cocotb
def test_rtl_bfloat16_runs_the_bf16_instance(tmp_path, capsys):
    x = _sample(np.random.default_rng(4), (3, 32)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    status, out, _ = _quantize(capsys, "--in", str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.npz"),
                               "--rtl")
    assert status == 0 and "bit for bit" in out, out
    codes, scales = _load(tmp_path / "x.npz")
    want_codes, want_scales = mx.quantize(x)
    assert np.array_equal(codes, want_codes) and np.array_equal(scales, want_scales)


def _bad_inputs(tmp_path):
    np.save(tmp_path / "ints.npy", np.arange(32))
    np.save(tmp_path / "axis.npy", np.zeros((2, 33), np.float32))
    np.save(tmp_path / "empty_axis.npy", np.zeros((2, 0), np.float32))
    np.save(tmp_path / "scalar.npy", np.float32(1.0))
    np.save(tmp_path / "complex.npy", np.zeros(32, np.complex64))
    np.save(tmp_path / "good.npy", np.zeros(32, np.float32))
    np.savez(tmp_path / "archive.npz", x=np.zeros(32, np.float32))
    (tmp_path / "junk.npy").write_text("not an array\n")
    return [
        (["--in", str(tmp_path / "missing.npy")], "not found"),
        (["--in", str(tmp_path / "ints.npy")], "must be floating point"),
        (["--in", str(tmp_path / "complex.npy")], "must be floating point"),
        (["--in", str(tmp_path / "axis.npy")], "not a positive multiple of 32"),
        (["--in", str(tmp_path / "empty_axis.npy")], "not a positive multiple of 32"),
        (["--in", str(tmp_path / "scalar.npy")], "at least one dimension"),
        (["--in", str(tmp_path / "archive.npz")], ".npz archive"),
        (["--in", str(tmp_path / "junk.npy")], "cannot read"),
        (["--in", str(tmp_path / "good.npy"), "--mode", "ceil"], "unknown mode 'ceil'"),
        (["--in", str(tmp_path / "good.npy"), "--rtl", "--sim", "modelsim"], "unknown simulator"),
    ]


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    for args, message in _bad_inputs(tmp_path):
        status, out, err = _quantize(capsys, *args, "--out", str(tmp_path / "out.npz"))
        lines = err.strip().splitlines()
        assert status == 2, (args, out, err)
        assert len(lines) == 1 and lines[0].startswith("poblano quantize: error: ") and message in lines[0], \
            (args, err)
        assert not (tmp_path / "out.npz").exists()


def test_missing_output_directory(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros(32, np.float32))
    status, _, err = _quantize(capsys, "--in", str(tmp_path / "x.npy"),
                               "--out", str(tmp_path / "no" / "x.npz"))
    assert status == 2 and "does not exist" in err


def test_error_from_the_command_line_has_no_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "poblano.cli", "quantize", "--in", str(tmp_path / "nope.npy"),
                          "--out", str(tmp_path / "x.npz")], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"poblano quantize: error: input file {str(tmp_path / 'nope.npy')!r} not found"]
