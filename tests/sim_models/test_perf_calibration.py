"""The tile cost model against every RTL-measured tile run recorded in benchmarks/results/tile.json
and tile_long_context.json (no RTL simulation: the programs run on the instruction-level model, the
cycles come from the JSON)."""

import json
from pathlib import Path

import pytest

from benchmarks import perf_model
from sim_models.perf import tile_costs
from sim_models.perf.estimate import decode_step, prefill
from sim_models.perf.mapping import Mapping
from sim_models.perf.model_desc import load_model
from sim_models.perf.system import load_system

ROOT = Path(__file__).resolve().parents[2]


RUNS = json.loads((ROOT / "benchmarks/results/tile.json").read_text())["runs"]
LONG_RUNS = json.loads((ROOT / "benchmarks/results/tile_long_context.json").read_text())["runs"]


@pytest.fixture(scope="module")
def traced():
    return perf_model.trace_recorded()


@pytest.fixture(scope="module")
def rows(traced):
    return perf_model.predict_recorded(traced)


def test_every_recorded_run_within_10_percent(rows):
    assert len(rows) == len(RUNS) + len(LONG_RUNS) >= 10
    assert max(r["context"] for r in rows) >= 1024
    for r in rows:
        assert abs(r["predicted"]["cycles"] / r["measured"]["cycles"] - 1) <= 0.10, r
        # the attention, which dominates, on its own
        assert abs(r["predicted"]["attn_cycles"] / r["measured"]["attn_cycles"] - 1) <= 0.10, r


def test_the_costs_are_not_free(traced):
    """A cost model without the attention engine's per-record set costs misses by far: the
    calibration test can fail."""
    cheap = tile_costs.TileCosts(fma_chain=0, vop_row=0, vop_command=0, lat_softmax=0)
    rows = perf_model.predict_recorded(traced, cheap)
    worst = max(abs(r["predicted"]["cycles"] / r["measured"]["cycles"] - 1) for r in rows)
    assert worst > 0.10


@pytest.mark.parametrize("kind", ["tiny-llama", "tiny-mixtral"])
def test_system_estimate_of_the_tile_matches_its_measured_runs(kind):
    """The system-level estimate on poblano-tile (the layer structure, not the compiled program)
    within 10 % of the measured 64-token prefill and the decode step at context 65."""
    system, model = load_system("poblano-tile"), load_model(kind)
    clock = system.die.clock_hz
    measured = {(r["phase"], r["context"]): r["cycles"] for r in RUNS if r["model"] == kind}
    split, _ = decode_step(model, system, Mapping(1, 1, "heads"), 1, 65)
    step = max(split["compute"], split["hbm"]) + split["fabric"]
    assert step * clock == pytest.approx(measured[("decode", 65)], rel=0.10)
    seconds, _ = prefill(model, system, Mapping(1, 1, "heads"), 64)
    assert seconds * clock == pytest.approx(measured[("prefill", 64)], rel=0.10)
