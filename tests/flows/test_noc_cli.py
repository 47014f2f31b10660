"""``poblano noc`` / ``poblano noc-sweep``: one-line errors for bad requests, one real run."""

import json

import pytest

from poblano import cli
from poblano.commands.noc_sweep import saturation


def _run(capsys, *args):
    status = cli.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("args, message", [
    (["noc", "--mesh", "9x9"], "does not fit the header's coordinates"),
    (["noc", "--mesh", "4by4"], "--mesh must look like 4x4"),
    (["noc", "--rate", "1.5"], "--rate must be within 0..1"),
    (["noc", "--rate", "-0.1"], "--rate must be within 0..1"),
    (["noc", "--traffic", "tornado"], "unknown traffic pattern 'tornado'"),
    (["noc", "--mesh", "2x4", "--traffic", "transpose"], "square mesh"),
    (["noc", "--packet-flits", "16"], "--packet-flits must be 1..15"),
    (["noc-sweep", "--rates", "0.5,0.2"], "ascending"),
    (["noc-sweep", "--mesh", "5x5", "--generator", "python"], "does not fit"),
    (["noc", "--generator", "fpga"], "--generator must be hardware or python"),
    (["noc", "--stall", "1.0"], "--stall must be within 0..1"),
    (["noc", "--stall", "0.2", "--generator", "python"], "--stall needs --generator hardware"),
    (["noc", "--seed", "-1"], "--seed must be within"),
    (["noc", "--vcs", "3"], "--vcs must be 2 or 4"),
    (["noc", "--vcs", "4", "--generator", "python"], "--vcs needs --generator hardware"),
    (["noc", "--order-buckets", "3"], "--order-buckets must be 0 or a power of 2"),
    (["noc", "--order-buckets", "32", "--vcs", "2"], "--order-buckets needs --generator hardware and"),
    (["noc-sweep", "--order-buckets", "32", "--generator", "python"], "--order-buckets needs"),
    (["noc-sweep", "--traffic", "bogus"], "unknown traffic pattern"),
])
def test_bad_requests_get_one_line_errors(capsys, args, message):
    status, out, err = _run(capsys, *args)
    assert status == 2
    assert message in err and err.count("\n") == 1 and err.startswith(f"poblano {args[0]}: error: ")


def test_saturation_definition():
    points = [{"offered": r, "accepted": r, "latency_avg": lat}
              for r, lat in [(0.1, 10), (0.5, 20), (0.7, 30), (0.8, 31), (0.9, 80)]]
    assert saturation(points, 10)["offered"] == 0.7
    assert saturation(points, 2) is None


@pytest.mark.cocotb
@pytest.mark.parametrize("generator, extra", [("python", ()), ("hardware", ()),
                                              ("hardware", ("--order-buckets", "32"))],
                         ids=["python", "hardware", "hardware-dynamic-vcs"])
def test_noc_runs_clean_on_the_rtl(capsys, generator, extra):
    status, out, _ = _run(capsys, "noc", "--mesh", "2x2", "--traffic", "uniform", "--rate", "0.3",
                          "--packet-flits", "4", "--cycles", "300", "--warmup", "50", "--json",
                          "--generator", generator, *extra)
    assert status == 0
    result = json.loads(out)
    assert result["packets_delivered"] == result["packets_injected"] > 0
    assert result["lost"] == result["duplicated"] == result["corrupted"] == result["reordered"] == 0
    assert abs(result["accepted"] - 0.3) < 0.1
    assert result["latency_avg"] >= 5


@pytest.mark.cocotb
def test_noc_reports_a_source_queue_overflow_in_one_line(capsys):
    # Receivers taking a word in one cycle of ten cannot keep up with full-rate traffic: the
    # generators' source queues overflow, and the run cannot be measured.
    status, out, err = _run(capsys, "noc", "--mesh", "2x2", "--rate", "1.0", "--packet-flits", "1",
                            "--stall", "0.9", "--cycles", "2000", "--warmup", "0")
    assert status == 2 and out == ""
    assert "source queue overflow" in err and err.count("\n") == 1


@pytest.mark.cocotb
def test_noc_sweep_runs_rates_in_one_simulation_and_stops_at_an_overflow(capsys, tmp_path):
    # Two measurable rates back to back (the second after the reset between runs), then a rate whose
    # source queues overflow: the sweep keeps the first two and reports where measuring stopped.
    status, out, _ = _run(capsys, "noc-sweep", "--mesh", "2x2", "--rates", "0.01,0.02,1.0",
                          "--packet-flits", "1", "--stall", "0.9", "--cycles", "2000", "--warmup", "100",
                          "--out", str(tmp_path), "--json")
    assert status == 0
    summary = json.loads(out)
    assert summary["overflow_from"] == 1.0
    assert [round(p["offered"], 3) for p in summary["points"]] == [0.01, 0.02]
    for point in summary["points"]:
        assert point["packets_delivered"] == point["packets_injected"] > 0
        assert point["lost"] == point["duplicated"] == point["corrupted"] == point["reordered"] == 0
        assert point["error_flags"] == 0 and not point["wedged"]
    assert (tmp_path / "noc-2x2-uniform.csv").read_text().count("\n") == 3
