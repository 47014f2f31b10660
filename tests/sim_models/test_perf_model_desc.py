"""Model descriptions: published parameter totals, KV per token, windows, loading errors."""

import json

import pytest

from sim_models.perf.model_desc import ModelError, from_config, load_model


@pytest.mark.parametrize("name, total, active", [
    ("gpt-oss-120b", 116.8e9, 5.1e9),       # OpenAI model card: 116.8B total, 5.1B active
    ("deepseek-r1", 671e9, 37e9),           # DeepSeek-V3 report: 671B total, 37B active
    ("kimi-k2.5", 1.04e12, 32e9),           # Moonshot: 1T total, 32B active (1.04T in the K2 report)
])
def test_parameter_counts_match_the_published_totals(name, total, active):
    m = load_model(name)
    assert m.total_params() == pytest.approx(total, rel=0.03)
    assert m.active_params() == pytest.approx(active, rel=0.03)


def test_kv_per_token():
    assert load_model("deepseek-r1").kv_elements_per_token() == 512 + 64
    assert load_model("kimi-k2.5").kv_elements_per_token() == 576
    gpt = load_model("gpt-oss-120b")
    assert gpt.kv_elements_per_token() == 2 * 8 * 64
    assert gpt.windows[:4] == (128, 0, 128, 0) and len(gpt.windows) == 36
    # half the layers read at most 128 positions
    assert gpt.kv_positions_read(8192) == 18 * 8192 + 18 * 128
    assert gpt.kv_positions_read(100) == 36 * 100


def test_moe_shapes():
    ds = load_model("deepseek-r1")
    assert (ds.layers, ds.hidden, ds.experts, ds.top_k, ds.shared_experts, ds.dense_layers) == \
        (61, 7168, 256, 8, 1, 3)
    kimi = load_model("kimi-k2.5")
    assert (kimi.experts, kimi.top_k, kimi.heads, kimi.attention) == (384, 8, 64, "mla")
    assert ds.experts_touched(1) == pytest.approx(8)
    assert ds.experts_touched(10_000) == pytest.approx(256)


def test_the_tile_checkpoints_load():
    llama, mixtral = load_model("tiny-llama"), load_model("tiny-mixtral")
    assert llama.experts == 0 and llama.dense_layers == 2
    assert (mixtral.experts, mixtral.top_k) == (4, 2)
    assert llama.total_params() == 2 * 256 * 64 + 2 * (64 * 128 + 2 * 64 * 64 + 128 * 64 + 3 * 64 * 128)


def test_errors(tmp_path):
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        load_model("nope")
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_model(tmp_path)
    cfg = json.loads(load_model.__globals__["MODELS_DIR"].joinpath("tiny-llama/config.json").read_text())
    with pytest.raises(ModelError, match="unsupported model_type 'bert'"):
        from_config({**cfg, "model_type": "bert"}, "x", "x")
    with pytest.raises(ModelError, match="missing field 'hidden_size'"):
        from_config({k: v for k, v in cfg.items() if k != "hidden_size"}, "x", "x")
    with pytest.raises(ModelError, match="multiple of num_key_value_heads"):
        from_config({**cfg, "num_key_value_heads": 3}, "x", "x")
