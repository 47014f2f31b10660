"""The golden forward pass (``sim_models.transformer``): prefill equals decode bit for bit, greedy
decoding, the KV cache, grouped-query attention, MoE routing, the MX layers and bad input."""

from pathlib import Path

import numpy as np
import pytest

from sim_models import checkpoint as ck
from sim_models import mx, vpu
from sim_models import transformer as tf

MODELS = Path(__file__).resolve().parents[2] / "models"
KINDS = ("tiny-llama", "tiny-mixtral")


def _checkpoint(kind, seed=0):
    config = ck.load_config(MODELS / kind / "config.json")
    return ck.Checkpoint(config, ck.random_weights(config, seed))


@pytest.fixture(scope="module", params=KINDS)
def model(request):
    return tf.Transformer(_checkpoint(request.param))


@pytest.fixture(scope="module")
def moe_checkpoint():
    return _checkpoint("tiny-mixtral", seed=4)


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_prefill_equals_token_by_token_decode(model):
    tokens = np.random.default_rng(1).integers(0, model.config.vocab_size, 9)
    batch_cache, step_cache = model.new_cache(), model.new_cache()
    batch = model.forward(tokens, batch_cache)
    steps = np.concatenate([model.forward(tokens[i:i + 1], step_cache) for i in range(len(tokens))])
    assert batch.shape == (9, model.config.vocab_size) and batch.dtype == np.float32
    assert np.array_equal(_bits(batch), _bits(steps))
    chunk_cache = model.new_cache()
    chunks = np.concatenate([model.forward(tokens[:4], chunk_cache), model.forward(tokens[4:], chunk_cache)])
    assert np.array_equal(_bits(batch), _bits(chunks))
    for layer in range(model.config.num_hidden_layers):
        for cache in (step_cache, chunk_cache):
            assert np.array_equal(batch_cache.key_bits(layer), cache.key_bits(layer))
            assert np.array_equal(batch_cache.value_bits(layer), cache.value_bits(layer))


def test_kv_cache_holds_bfloat16(model):
    cache = model.new_cache()
    model.forward([5, 6, 7], cache)
    c = model.config
    assert cache.length == 3
    assert cache.key_bits(0).shape == (c.num_key_value_heads, 3, c.head_dim)
    assert cache.key_bits(0).dtype == np.uint16
    assert cache.nbytes == 2 * c.num_hidden_layers * c.num_key_value_heads * 3 * c.head_dim * 2
    assert np.array_equal(_bits(cache.keys(1)), _bits(vpu.from_bfloat16(cache.key_bits(1))))


def test_greedy_generation_is_deterministic(model):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    ids, logits = tf.generate(model, prompt, 6)
    again, logits_again = tf.generate(model, prompt, 6)
    assert ids.dtype == np.int64 and logits.shape == (6, model.config.vocab_size)
    assert np.array_equal(ids, again) and np.array_equal(_bits(logits), _bits(logits_again))
    assert [tf.greedy(row) for row in logits] == list(ids)
    # Row j is the row that chose ids[j]: the prompt's last row, then each decode step's row.
    full = model.forward(np.concatenate([prompt, ids[:-1]]), model.new_cache())
    assert np.array_equal(_bits(logits), _bits(full[len(prompt) - 1:]))
    assert tf.generate(model, prompt, 0)[0].shape == (0,)


def test_greedy_order():
    nan, inf = np.float32("nan"), np.float32("inf")
    assert tf.greedy(np.array([1, 3, 2, 3], np.float32)) == 1
    assert tf.greedy(np.array([nan, -inf, nan], np.float32)) == 1
    assert tf.greedy(np.array([nan, nan], np.float32)) == 0
    assert tf.greedy(np.array([-0.0, 0.0], np.float32)) == 1
    assert tf.greedy(np.array([-2, nan, inf, -inf], np.float32)) == 2


@pytest.mark.parametrize(("prompt", "message"), [
    ([1, 256, 2], "prompt token id 256 at index 1 is outside the vocabulary [0, 256)"),
    ([-1], "prompt token id -1 at index 0 is outside the vocabulary"),
    ([], "non-empty"),
    ([1.0, 2.0], "must be integers"),
])
def test_bad_prompts(model, prompt, message):
    with pytest.raises(tf.TransformerError) as info:
        tf.generate(model, prompt, 2)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_arguments():
    checkpoint = _checkpoint("tiny-llama")
    with pytest.raises(tf.TransformerError, match="n_new"):
        tf.generate(tf.Transformer(checkpoint), [1], -1)
    with pytest.raises(tf.TransformerError, match="lanes"):
        tf.Transformer(checkpoint, lanes=0)
    with pytest.raises(tf.TransformerError):
        tf.Transformer(checkpoint, act_format="e9m9")


def test_sliding_window_is_not_exceeded():
    checkpoint = _checkpoint("tiny-mixtral")
    raw = dict(checkpoint.config.raw, sliding_window=4)
    model = tf.Transformer(ck.Checkpoint(ck.ModelConfig.from_dict(raw), checkpoint.tensors))
    model.forward([1, 2, 3, 4], model.new_cache())
    with pytest.raises(tf.TransformerError, match="exceeds sliding_window 4"):
        model.forward([1, 2, 3, 4, 5], model.new_cache())


def test_wider_activations():
    checkpoint = _checkpoint("tiny-llama")
    with pytest.raises(tf.TransformerError, match="e9m9"):
        tf.Transformer(checkpoint, act_format="e9m9")
    model = tf.Transformer(checkpoint, act_format="e4m3")          # W4A8
    tokens = [7, 8, 9]
    cache = model.new_cache()
    steps = np.concatenate([model.forward([t], cache) for t in tokens])
    assert np.array_equal(_bits(model.forward(tokens, model.new_cache())), _bits(steps))


def test_mx_linear_layout():
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((96, 64)).astype(np.float32)       # (out, in), Hugging Face layout
    x = rng.standard_normal((3, 64)).astype(np.float32)
    layer = tf.MXLinear(weight)
    assert layer.shape == (64, 96)
    w_codes, w_scales = mx.quantize(weight)
    x_codes, x_scales = mx.quantize(x)
    expected = mx.matmul(x_codes, x_scales, np.ascontiguousarray(w_codes.T), np.ascontiguousarray(w_scales.T))
    assert np.array_equal(_bits(layer(x)), _bits(expected))
    exact = mx.dequantize(x_codes, x_scales).astype(np.float64) @ mx.dequantize(w_codes, w_scales).T
    assert np.allclose(layer(x), exact, rtol=1e-6, atol=1e-6)


def test_attention_scale():
    assert tf.attention_scale(32) == np.float32(0.17677669529663687)
    assert tf.attention_scale(64) == np.float32(0.125)


def test_grouped_query_head_mapping():
    """Query head h reads KV head h // (heads / kv_heads), as Hugging Face's repeat_kv."""
    rng = np.random.default_rng(3)
    heads, kv_heads, head_dim, length = 4, 2, 32, 3
    q = rng.standard_normal((1, heads, head_dim)).astype(np.float32)
    keys = rng.standard_normal((kv_heads, length, head_dim)).astype(np.float32)
    values = np.empty((kv_heads, length, head_dim), dtype=np.float32)
    values[0], values[1] = 2.0, -8.0                                 # a constant per KV head
    out = tf.attention(q, keys, values, [length - 1], tf.attention_scale(head_dim))
    assert np.allclose(out[0, :2], 2.0, rtol=1e-6) and np.allclose(out[0, 2:], -8.0, rtol=1e-6)


def test_attention_is_causal_and_matches_its_formula():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 2, 32)).astype(np.float32)
    keys = rng.standard_normal((1, 4, 32)).astype(np.float32)
    values = rng.standard_normal((1, 4, 32)).astype(np.float32)
    scale = tf.attention_scale(32)
    out = tf.attention(q, keys, values, [1, 2], scale, lanes=4)
    later = keys.copy(), values.copy()
    later[0][0, 3], later[1][0, 3] = 100.0, 100.0                    # position 3 is seen by nobody
    assert np.array_equal(_bits(out), _bits(tf.attention(q, *later, [1, 2], scale, lanes=4)))
    s = vpu.scale(vpu.sum(vpu.mul(np.broadcast_to(q[1, 0], (3, 32)), keys[0, :3]), lanes=4), scale)
    p = vpu.softmax(s)
    acc = np.zeros(32, np.float32)
    for t in range(3):
        acc = vpu.fma(np.full(32, p[t], np.float32), values[0, t], acc)
    assert np.array_equal(_bits(out[1, 0]), _bits(acc))


def _moe_prefill(checkpoint, tokens, tensors=None):
    model = tf.Transformer(ck.Checkpoint(checkpoint.config, tensors or checkpoint.tensors))
    record = {}
    logits = model.forward(tokens, model.new_cache(), record=record)
    return logits, record["experts"]


def test_moe_uses_only_the_selected_experts(moe_checkpoint):
    tokens = [11, 12, 13]
    logits, experts = _moe_prefill(moe_checkpoint, tokens)
    assert len(experts) == 2 and experts[0].shape == (3, 2)
    last = moe_checkpoint.config.num_hidden_layers - 1
    used = set(experts[last].ravel().tolist())
    unused = sorted(set(range(moe_checkpoint.config.num_local_experts)) - used)
    assert unused, "pick tokens that leave an expert of the last layer unselected"

    def zeroed(expert):
        t = dict(moe_checkpoint.tensors)
        for w in ("w1", "w2", "w3"):
            name = f"model.layers.{last}.block_sparse_moe.experts.{expert}.{w}.weight"
            t[name] = np.zeros_like(t[name])
        return t

    same, _ = _moe_prefill(moe_checkpoint, tokens, zeroed(unused[0]))
    assert np.array_equal(_bits(same), _bits(logits))
    changed, _ = _moe_prefill(moe_checkpoint, tokens, zeroed(int(experts[last][-1, 0])))
    assert not np.array_equal(_bits(changed[-1]), _bits(logits[-1]))


def test_moe_combination_follows_the_contract(moe_checkpoint):
    """Routing weights are the softmax of the k selected router logits, combined in top-k order."""
    model = tf.Transformer(moe_checkpoint)
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    prefix = "model.layers.0.block_sparse_moe."
    out, chosen = model._moe(prefix, x)
    logits = model.linears[prefix + "gate"](x)
    top, idx = vpu.topk(logits, 2)
    assert np.array_equal(chosen, idx)
    w = vpu.softmax(top)
    for i in range(2):
        acc = np.zeros(64, np.float32)
        for j in range(2):
            y = model._mlp(f"{prefix}experts.{idx[i, j]}.", x[i:i + 1], names=("w1", "w3", "w2"))[0]
            acc = vpu.fma(np.full(64, w[i, j], np.float32), y, acc)
        assert np.array_equal(_bits(out[i]), _bits(acc))


def test_tied_embeddings_use_the_embedding_as_lm_head():
    checkpoint = _checkpoint("tiny-llama")
    config = ck.ModelConfig.from_dict(dict(checkpoint.config.raw, tie_word_embeddings=True))
    tensors = {k: v for k, v in checkpoint.tensors.items() if k != "lm_head.weight"}
    model = tf.Transformer(ck.Checkpoint(config, tensors))
    embedding = tf.MXLinear(tensors["model.embed_tokens.weight"])
    assert np.array_equal(model.linears["lm_head"].codes, embedding.codes)
    ids, _ = tf.generate(model, [1, 2], 2)
    assert ids.shape == (2,)
