"""``poblano gemm``: golden and RTL paths, the report, and one-line errors for bad operand files."""

import json
import subprocess
import sys

import numpy as np
import pytest

from poblano import cli
from sim_models import mx
from verification.runner import SIMULATORS


def _gemm(capsys, *args):
    status = cli.main(["gemm", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _operands(rng, m, k, n):
    a_codes, a_scales = mx.quantize(rng.standard_normal((m, k)).astype(np.float32))
    bt_codes, bt_scales = mx.quantize(rng.standard_normal((n, k)).astype(np.float32))
    return a_codes, a_scales, bt_codes.T.copy(), bt_scales.T.copy()


def _write(tmp_path, a_codes, a_scales, b_codes, b_scales):
    np.savez(tmp_path / "a.npz", codes=a_codes, scales=a_scales)
    np.savez(tmp_path / "b.npz", codes=b_codes, scales=b_scales)
    return ["--a", str(tmp_path / "a.npz"), "--b", str(tmp_path / "b.npz"), "--out", str(tmp_path / "c.npy")]


def test_golden_gemm_with_c(tmp_path, capsys):
    ops = _operands(np.random.default_rng(3), 5, 64, 7)
    c = np.full((1, 7), -1.5, dtype=np.float32)            # broadcast along M
    np.save(tmp_path / "c_in.npy", c)
    status, out, _ = _gemm(capsys, *_write(tmp_path, *ops), "--c", str(tmp_path / "c_in.npy"), "--golden")
    assert status == 0, out
    got = np.load(tmp_path / "c.npy")
    want = mx.matmul(*ops, np.broadcast_to(c, (5, 7)))
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_rtl_gemm_matches_golden_and_reports(tmp_path, capsys, sim):
    """A 3 x 96 x 10 GEMM on the 1 x 1 array: tiled in M and N, K chained through C in chunks of 2."""
    ops = _operands(np.random.default_rng(4), 3, 96, 10)
    c = np.random.default_rng(5).standard_normal((3, 10)).astype(np.float32)
    np.save(tmp_path / "c_in.npy", c)
    status, out, _ = _gemm(capsys, *_write(tmp_path, *ops), "--c", str(tmp_path / "c_in.npy"), "--rows", "1",
                           "--cols", "1", "--products", "lut", "--max-blocks", "2", "--sim", sim, "--check",
                           "--report", str(tmp_path / "report.json"))
    assert status == 0, out
    assert "bit-exact against sim_models.mx.matmul: yes" in out
    want = mx.matmul(*ops, c)
    assert np.array_equal(np.load(tmp_path / "c.npy").view(np.uint32), want.view(np.uint32))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mismatches_vs_golden"] == 0 and report["simulator"] == sim
    # 3 row tiles x 2 column tiles (8 outputs each) x 2 K chunks, 8 cycles per block on one element.
    assert report["tiles"] == 12
    assert report["ideal_cycles"] == 3 * 10 * 96 / 32
    assert report["cycles"] >= 3 * 2 * 3 * 8


def _bad_operands(rng):
    a_codes, a_scales, b_codes, b_scales = _operands(rng, 4, 64, 4)
    b = {"codes": b_codes, "scales": b_scales}
    return {
        "missing scales": ({"codes": a_codes}, b, "no 'scales' array"),
        "wrong dtype": ({"codes": a_codes.astype(np.int32), "scales": a_scales}, b,
                        "'codes' must be uint8, got int32"),
        "code above 15": ({"codes": a_codes | 0x10, "scales": a_scales}, b, "E2M1 codes are 0..15"),
        "K mismatch": ({"codes": a_codes, "scales": a_scales},
                       {"codes": b_codes[:32], "scales": b_scales[:1]},
                       "shape mismatch: A codes are 4x64 but B codes are 32x4"),
        "K not a multiple of 32": ({"codes": a_codes[:, :40], "scales": a_scales},
                                   {"codes": b_codes[:40], "scales": b_scales},
                                   "K = 40 is not a positive multiple"),
        "scales shape": ({"codes": a_codes, "scales": a_scales[:, :1]}, b,
                         "A scales have shape (4, 1), expected (4, 2)"),
        "not 2-D": ({"codes": a_codes[None], "scales": a_scales}, b, "must be 2-D"),
    }


@pytest.mark.parametrize("case", list(_bad_operands(np.random.default_rng(0))))
def test_malformed_operands_get_one_line_errors(tmp_path, capsys, case):
    a, b, message = _bad_operands(np.random.default_rng(0))[case]
    np.savez(tmp_path / "a.npz", **a)
    np.savez(tmp_path / "b.npz", **b)
    status, out, err = _gemm(capsys, "--a", str(tmp_path / "a.npz"), "--b", str(tmp_path / "b.npz"),
                             "--out", str(tmp_path / "c.npy"), "--golden")
    assert status == 2
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "c.npy").exists()


def test_bad_files_and_c_get_one_line_errors(tmp_path, capsys):
    ops = _operands(np.random.default_rng(6), 4, 32, 4)
    args = _write(tmp_path, *ops)
    (tmp_path / "junk.npz").write_text("not an archive")
    np.save(tmp_path / "c64.npy", np.zeros((4, 4)))
    np.save(tmp_path / "c_shape.npy", np.zeros((3, 4), dtype=np.float32))
    cases = [
        (["--a", str(tmp_path / "nope.npz"), *args[2:]], "does not exist"),
        (["--a", str(tmp_path / "junk.npz"), *args[2:]], "is not a readable .npz archive"),
        ([*args, "--c", str(tmp_path / "c64.npy")], "C must be float32, got float64"),
        ([*args, "--c", str(tmp_path / "c_shape.npy")], "not broadcastable to (4, 4)"),
    ]
    for extra, message in cases:
        status, _, err = _gemm(capsys, *extra, "--golden")
        assert status == 2 and message in err and err.count("\n") == 1, (extra, err)


def test_error_from_the_command_line_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "poblano.cli", "gemm", "--a", str(tmp_path / "x.npz"),
                           "--b", str(tmp_path / "y.npz"), "--out", str(tmp_path / "c.npy")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
