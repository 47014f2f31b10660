"""The CLI: discovery of commands and one-line errors with a non-zero exit."""

import subprocess
import sys

import pytest

from poblano import cli


def _poblano(*args):
    return subprocess.run([sys.executable, "-m", "poblano.cli", *args], capture_output=True, text=True)


def test_help_lists_the_flows():
    out = _poblano("--help")
    assert out.returncode == 0
    for command in ("sim", "verilog", "lint", "formal", "fpga", "bench"):
        assert command in out.stdout


@pytest.mark.parametrize("args, message", [
    (["verilog", "--top", "nonexistent"], "unknown top 'nonexistent'"),
    (["formal", "--only", "no-such-proof"], "no proof matches"),
    (["fpga", "--top", "nonexistent"], "unknown top"),
    (["sim", "--gemm", "--k", "33"], "multiple of 32"),
    (["sim", "--generate", "0"], "at least 1"),
    (["sim", "--model", "no/such/dir"], "no/such/dir"),
])
def test_bad_input_is_one_line_and_nonzero(args, message):
    out = _poblano(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_main_returns_status_in_process(capsys):
    assert cli.main(["formal", "--list"]) == 0
    assert "stream_register_protocol" in capsys.readouterr().out
