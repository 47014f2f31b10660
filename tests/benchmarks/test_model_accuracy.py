"""The model-accuracy benchmark's quick path: its figures are sane and can fail.

The recorded run (``benchmarks/results/model_accuracy.md``) takes about a minute; here one model,
one format pair and a few decode steps, plus a reference fed the wrong tokens to show that the
comparison does catch a mismatch.
"""

import json

import numpy as np
import pytest

from benchmarks import model_accuracy as bench
from sim_models import transformer_reference as tr


@pytest.fixture(scope="module")
def decoded():
    """The tiny LLaMA at seed 0, e2m1 x e2m1: checkpoint, prompt, golden ids and logits."""
    point = bench.checkpoint("tiny-llama", 0)
    prompt = bench.prompt(point.config, 0)
    ids, logits = bench.golden_decode(point, prompt, bench.QUICK_STEPS, "e2m1", "e2m1")
    return point, prompt, ids, logits


def test_golden_model_is_close_to_float64(decoded):
    point, prompt, ids, logits = decoded
    figures = tr.compare_logits(logits, bench.reference_rows(point, prompt, ids))
    assert figures["rows"] == bench.QUICK_STEPS
    assert figures["cosine_min"] > 0.9 and figures["cosine_mean"] > 0.94, figures
    assert figures["top1"] >= 0.5, figures


def test_a_reference_on_other_tokens_is_caught(decoded):
    """The same comparison against the reference fed a different prompt (every id + 1), or read one
    row late, falls far below the bounds above (measured: cosine mean about 0.5)."""
    point, prompt, ids, logits = decoded
    vocab = point.config.vocab_size
    other_prompt = tr.compare_logits(logits, bench.reference_rows(point, (prompt + 1) % vocab, ids))
    tokens = np.concatenate([prompt, ids])
    one_row_late = tr.compare_logits(logits, tr.ReferenceModel(point).logits(tokens)[len(prompt):])
    for figures in (other_prompt, one_row_late):
        assert figures["cosine_mean"] < 0.75, figures


def test_sharpened_attention_changes_the_checkpoint():
    plain = bench.checkpoint("tiny-mixtral", 0)
    sharp = bench.checkpoint("tiny-mixtral", 0, bench.SHARPEN)
    for name, tensor in plain.tensors.items():
        factor = bench.SHARPEN if ".q_proj." in name or ".k_proj." in name else 1.0
        assert np.array_equal(sharp.tensors[name], tensor * np.float32(factor)), name


def test_rtl_column_follows_the_mac_formats():
    assert bench.on_rtl("e2m1", "e2m1")
    assert not bench.on_rtl("e4m3", "e2m1") and not bench.on_rtl("e2m1", "e4m3")


def test_quick_run_prints_and_records_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "| tiny-llama | e2m1 | e2m1 | yes |" in out
    assert list(tmp_path.iterdir()) == []


def test_recorded_results_cover_every_pair():
    """The recorded file has every model x attention x format pair of the protocol, sane figures,
    and its markdown shows the same numbers."""
    record = json.loads((bench.RESULTS / "model_accuracy.json").read_text())
    markdown = (bench.RESULTS / "model_accuracy.md").read_text()
    keys = {(r["model"], r["attention"], r["weight_format"], r["act_format"]) for r in record["rows"]}
    assert keys == {(k, v, w, a) for k in bench.KINDS for v in bench.VARIANTS
                    for w in bench.WEIGHT_FORMATS for a in bench.ACT_FORMATS}
    for r in record["rows"]:
        assert r["rows"] == bench.DECODE_STEPS * len(record["protocol"]["seeds"])
        assert 0.8 < r["cosine_min"] <= r["cosine_mean"] < 1.0, r
        assert r["rtl"] == bench.on_rtl(r["weight_format"], r["act_format"])
        assert f"| {r['cosine_min']:.4f} | {r['cosine_mean']:.4f} | {r['top1']:.3f} |" in markdown
