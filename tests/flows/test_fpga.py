"""A real ULX3S-85F bitstream of a small block, as a smoke test of the whole FPGA flow."""

import json

import pytest

from poblano import tops
from poblano.flows import fpga


@pytest.mark.slow
def test_stream_register_builds_a_bitstream(tmp_path):
    report = fpga.build("stream_register", tops.get("stream_register").build(), out_dir=tmp_path)
    assert (tmp_path / "top.bit").stat().st_size > 100_000
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["fmax_mhz"] == report["fmax_mhz"] > 100
    assert report["target_mhz"] == 125
    # A 64-bit skid buffer is two 64-bit registers and a 64-bit 2:1 mux, plus the harness.
    assert 128 <= report["block_estimate"]["ff"] <= 140
    assert 64 <= report["block_estimate"]["lut4"] <= 100
    assert report["bram_dp16kd"]["available"] == 208
    assert "Fmax" in (tmp_path / "report.md").read_text()
