"""The performance model's headline (``benchmarks/perf_headline.py``): the sensitivity search finds
the value at which a prediction meets the seed's figure; the recorded table is the model's, and the
README shows it."""

from pathlib import Path

import pytest

from benchmarks import perf_headline as bench

ROOT = Path(__file__).resolve().parents[2]


def test_the_matching_latency_meets_the_claim():
    from sim_models.perf.model_desc import load_model
    from sim_models.perf.system import load_system

    model, system = load_model("deepseek-r1"), load_system("jalapeno-b0-like")
    latency = bench._matching(model, system, "scale_up_latency_ns", 700, 1.0, 1e5)
    assert latency is not None and latency > system.links.scale_up_latency_ns
    rate = bench._user_rate(model, bench._with(system, scale_up_latency_ns=latency))
    assert rate == pytest.approx(700, rel=1e-3)
    assert bench._matching(model, system, "scale_up_latency_ns", 1e9, 1.0, 1e5) is None


def test_the_recorded_headline_is_the_models_and_the_readme_shows_it():
    """A change of the model or of a shipped system that is not re-recorded fails here."""
    recorded = (ROOT / "benchmarks/results/perf_headline.md").read_text()
    table = next(part for part in recorded.split("\n\n") if part.startswith("| model |"))
    _, rows = bench.rows()
    assert bench.table_text(rows) == table
    assert table in (ROOT / "README.md").read_text()
