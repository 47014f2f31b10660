"""Hugging Face checkpoints (``sim_models.checkpoint``): round trips, widening, names, validation."""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from sim_models import checkpoint as ck

MODELS = Path(__file__).resolve().parents[2] / "models"
TINY = {"llama": MODELS / "tiny-llama" / "config.json", "mixtral": MODELS / "tiny-mixtral" / "config.json"}
_DROP = object()


def _raw(kind="llama", **changes):
    raw = json.loads(TINY[kind].read_text())
    for key, value in changes.items():
        if value is _DROP:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def _write(directory, raw, tensors):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw))
    save_file(tensors, directory / "model.safetensors")
    return directory


def _bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("kind", ["llama", "mixtral"])
def test_round_trip(tmp_path, kind):
    config = ck.load_config(TINY[kind])
    tensors = ck.random_weights(config, seed=7)
    ck.save_checkpoint(tmp_path, config, tensors)
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded.config == config
    assert list(loaded.tensors) == list(config.tensor_shapes())
    for name, t in tensors.items():
        assert loaded.tensors[name].dtype == np.float32
        assert np.array_equal(_bits(loaded.tensors[name]), _bits(t)), name
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [config.architecture]


def test_random_weights_follow_the_reference_initialization():
    config = ck.load_config(TINY["mixtral"])
    a, b = ck.random_weights(config, 1), ck.random_weights(config, 1)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert not np.array_equal(a["lm_head.weight"], ck.random_weights(config, 2)["lm_head.weight"])
    assert np.all(a["model.norm.weight"] == 1.0)
    weights = np.concatenate([t.ravel() for t in a.values() if t.ndim == 2])
    assert abs(weights.std() - 0.02) < 0.001 and abs(weights.mean()) < 0.001


def test_hugging_face_tensor_names():
    llama = ck.load_config(TINY["llama"]).tensor_shapes()
    assert llama["model.embed_tokens.weight"] == (256, 64)
    assert llama["model.layers.1.self_attn.q_proj.weight"] == (128, 64)     # 4 heads of 32
    assert llama["model.layers.1.self_attn.k_proj.weight"] == (64, 64)      # 2 KV heads of 32
    assert llama["model.layers.1.self_attn.o_proj.weight"] == (64, 128)
    assert llama["model.layers.0.mlp.gate_proj.weight"] == (128, 64)
    assert llama["model.layers.0.mlp.down_proj.weight"] == (64, 128)
    assert llama["lm_head.weight"] == (256, 64)
    assert len(llama) == 1 + 2 * 9 + 2
    mixtral = ck.load_config(TINY["mixtral"]).tensor_shapes()
    assert mixtral["model.layers.0.block_sparse_moe.gate.weight"] == (4, 64)
    assert mixtral["model.layers.1.block_sparse_moe.experts.3.w1.weight"] == (128, 64)
    assert mixtral["model.layers.1.block_sparse_moe.experts.3.w3.weight"] == (128, 64)
    assert mixtral["model.layers.1.block_sparse_moe.experts.3.w2.weight"] == (64, 128)
    assert not any(".mlp." in name for name in mixtral)


def test_tied_embeddings(tmp_path):
    config = ck.ModelConfig.from_dict(_raw(tie_word_embeddings=True))
    assert "lm_head.weight" not in config.tensor_shapes()
    tensors = ck.random_weights(config, 0)
    ck.save_checkpoint(tmp_path, config, tensors)
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded.lm_head is loaded.tensors["model.embed_tokens.weight"]


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_narrow_weights_widen_exactly(tmp_path, dtype):
    config = ck.load_config(TINY["llama"])
    narrow = {n: t.astype(dtype) for n, t in ck.random_weights(config, 3).items()}
    _write(tmp_path, config.raw, narrow)
    loaded = ck.load_checkpoint(tmp_path)
    for name, t in narrow.items():
        assert np.array_equal(_bits(loaded.tensors[name]), _bits(t.astype(np.float32))), name


def test_defaults_and_rope_parameters():
    config = ck.ModelConfig.from_dict(_raw(num_key_value_heads=_DROP, head_dim=_DROP, rms_norm_eps=_DROP,
                                           rope_theta=_DROP, hidden_size=128))
    assert (config.num_key_value_heads, config.head_dim) == (4, 32)
    assert (config.rms_norm_eps, config.rope_theta) == (1e-6, 10000.0)
    moe = ck.ModelConfig.from_dict(_raw("mixtral", rope_theta=_DROP, rms_norm_eps=_DROP))
    assert (moe.rms_norm_eps, moe.rope_theta) == (1e-5, 1e6)
    newer = ck.ModelConfig.from_dict(_raw(rope_theta=_DROP,
                                          rope_parameters={"rope_type": "default", "rope_theta": 5e5}))
    assert newer.rope_theta == 5e5


CONFIG_ERRORS = [
    (dict(architectures=["GPT2LMHeadModel"]), "unsupported architecture 'GPT2LMHeadModel'"),
    (dict(architectures=_DROP), "'architectures'"),
    (dict(hidden_size=48, head_dim=32), "hidden_size is 48, not a multiple of 32"),
    (dict(head_dim=16), "head_dim is 16, not a multiple of 32"),
    (dict(head_dim=_DROP), "head_dim is 16, not a multiple of 32"),
    (dict(intermediate_size=100), "intermediate_size is 100, not a multiple of 32"),
    (dict(vocab_size=_DROP), "missing the field 'vocab_size'"),
    (dict(num_hidden_layers="2"), "num_hidden_layers must be an integer"),
    (dict(num_key_value_heads=3), "not a multiple of num_key_value_heads"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling of type 'yarn'"),
    (dict(rms_norm_eps=-1.0), "rms_norm_eps"),
    (dict(rope_theta=0), "rope_theta"),
    (dict(tie_word_embeddings="yes"), "tie_word_embeddings"),
]


@pytest.mark.parametrize(("changes", "message"), CONFIG_ERRORS, ids=[m for _, m in CONFIG_ERRORS])
def test_config_errors(changes, message):
    with pytest.raises(ck.CheckpointError) as info:
        ck.ModelConfig.from_dict(_raw(**changes))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_moe_config_errors():
    with pytest.raises(ck.CheckpointError, match="num_experts_per_tok \\(5\\) exceeds num_local_experts"):
        ck.ModelConfig.from_dict(_raw("mixtral", num_experts_per_tok=5))


def _tensors(kind="llama"):
    return ck.random_weights(ck.load_config(TINY[kind]), 0)


def _broken(name):
    t = _tensors()
    if name == "missing":
        del t["model.layers.1.mlp.up_proj.weight"]
    elif name == "shape":
        t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((128, 64), np.float32)
    elif name == "dtype":
        t["model.norm.weight"] = np.ones(64, np.float64)
    elif name == "int":
        t["model.norm.weight"] = np.ones(64, np.int64)
    elif name == "fp8":
        t["model.norm.weight"] = np.ones(64, ml_dtypes.float8_e4m3fn)
    elif name == "bias":
        t["model.layers.0.self_attn.q_proj.bias"] = np.zeros(128, np.float32)
    return t


TENSOR_ERRORS = [
    ("missing", "tensor 'model.layers.1.mlp.up_proj.weight' missing from model.safetensors"),
    ("shape", "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (128, 64), expected (64, 64)"),
    ("dtype", "tensor 'model.norm.weight' has dtype F64; expected float32 (F32), bfloat16 (BF16) or "
              "float16 (F16)"),
    ("int", "has dtype I64"),
    ("fp8", "has dtype F8_E4M3"),
    ("bias", "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"),
]


@pytest.mark.parametrize(("case", "message"), TENSOR_ERRORS, ids=[c for c, _ in TENSOR_ERRORS])
def test_tensor_errors(tmp_path, case, message):
    _write(tmp_path, _raw(), _broken(case))
    with pytest.raises(ck.CheckpointError) as info:
        ck.load_checkpoint(tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(ck.CheckpointError, match="checkpoint directory .* not found"):
        ck.load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(ck.CheckpointError, match="config.json' not found"):
        ck.load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ck.CheckpointError, match="is not valid JSON"):
        ck.load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ck.CheckpointError, match="must hold a JSON object"):
        ck.load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(_raw()))
    with pytest.raises(ck.CheckpointError, match="model.safetensors' not found"):
        ck.load_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00garbage!")
    with pytest.raises(ck.CheckpointError, match="cannot read .* as safetensors") as info:
        ck.load_checkpoint(tmp_path)
    assert "\n" not in str(info.value)


def test_ignored_extras(tmp_path):
    t = _tensors()
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(16, np.float32)
    _write(tmp_path, _raw(), t)
    assert "model.layers.0.self_attn.rotary_emb.inv_freq" not in ck.load_checkpoint(tmp_path).tensors
