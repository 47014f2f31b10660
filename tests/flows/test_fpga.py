"""The FPGA flow: real ULX3S-85F bitstreams of small blocks, and the netlist clean-up before nextpnr."""

import json

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from poblano import cli, tops
from poblano.flows import fpga
from poblano.flows.netlist_fixups import drop_dangling_carry_outs


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


class _Adder(wiring.Component):
    """A registered 16-bit adder: one carry chain whose carry out nobody reads."""

    a: In(16)
    b: In(16)
    total: Out(17)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.total.eq(self.a + self.b)
        return m


@pytest.mark.slow
def test_a_carry_chain_costs_no_feed_out(tmp_path):
    report = fpga.build("adder", _Adder(), out_dir=tmp_path)
    assert report["dangling_carry_outs_dropped"] == 1
    # 17 sum bits are 9 CCU2C, plus nextpnr's feed-in for the constant carry in: 20 LUT4 sites.
    # With the dangling carry out left connected, nextpnr would add a feed-out CCU2C (22).
    assert report["block_estimate"]["lut4"] == 20


def _netlist(cells, outputs=()):
    return {"modules": {"top": {
        "attributes": {"top": "00000000000000000000000000000001"},
        "ports": {"o": {"direction": "output", "bits": list(outputs)}},
        "cells": {name: {"type": kind, "port_directions": {"CIN": "input", "COUT": "output", "A": "input"},
                         "connections": conn} for name, (kind, conn) in cells.items()},
    }}}


def test_only_unread_carry_outs_are_disconnected(tmp_path):
    path = tmp_path / "top.json"
    path.write_text(json.dumps(_netlist({
        "chain_lo": ("CCU2C", {"CIN": ["0"], "COUT": [10], "A": [2]}),
        "chain_hi": ("CCU2C", {"CIN": [10], "COUT": [11], "A": [3]}),      # 11: read by nobody
        "other": ("CCU2C", {"CIN": ["0"], "COUT": [12], "A": [4]}),         # 12: a top-level output
        "lut": ("LUT4", {"CIN": [], "COUT": [13], "A": [5]}),               # not a carry cell
    }, outputs=[12])))
    assert drop_dangling_carry_outs(path) == 1
    cells = json.loads(path.read_text())["modules"]["top"]["cells"]
    assert cells["chain_hi"]["connections"]["COUT"] == ["x"]
    assert [cells[n]["connections"]["COUT"] for n in ("chain_lo", "other", "lut")] == [[10], [12], [13]]
    assert drop_dangling_carry_outs(path) == 0


def test_a_netlist_without_one_top_module_is_rejected(tmp_path):
    path = tmp_path / "top.json"
    path.write_text(json.dumps({"modules": {"a": {"attributes": {}}}}))
    with pytest.raises(ValueError, match="one top module"):
        drop_dangling_carry_outs(path)


@pytest.mark.parametrize("argv, expected", [
    (["fpga", "--top", "noc_router"], (100, "-nowidelut -dff")),              # the router's own goal
    (["fpga", "--top", "noc_router", "--target-mhz", "80"], (80, "-nowidelut -dff")),  # the flag wins
    (["fpga", "--top", "stream_register"], (None, "")),                       # the board's 125 MHz
])
def test_each_block_is_built_with_its_own_clock_goal_and_options(monkeypatch, argv, expected):
    builds = []

    def fake_build(name, component, *, seed, target_mhz, synth_opts):
        Fragment.get(component, None)  # elaborated, as the real flow would
        builds.append((target_mhz, synth_opts))
        return {"fmax_mhz": 200.0, "target_mhz": target_mhz or 125, "timing_met": True,
                **{k: {"used": 0} for k in ("lut4", "ff", "mult18", "bram_dp16kd")}}

    monkeypatch.setattr(fpga, "build", fake_build)
    assert cli.main(argv) == 0
    assert builds == [expected]


def test_make_fpga_builds_one_router():
    assert "noc_router" in [top.name for top in tops.TOPS if top.fpga]
