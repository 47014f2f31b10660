"""float64 reference of the LLaMA/Mixtral decoder, from the unquantized checkpoint weights.

:mod:`sim_models.transformer` fixes the tile's bits; this module says how far those bits are from the
model the checkpoint describes. It evaluates Hugging Face's semantics (``modeling_llama.py``,
``modeling_mixtral.py``) in float64 with no quantization anywhere: RMSNorm
``x / sqrt(mean(x**2) + eps) * weight``, rotate-half RoPE with ``inv_freq = theta**(-2j/head_dim)``,
grouped-query attention with query head ``h`` reading KV head ``h // (num_heads // num_kv_heads)``
(``repeat_kv``), causal softmax attention scaled by ``head_dim**-0.5``, SwiGLU ``silu(gate) * up``,
and for Mixtral a router softmax over all experts, top-k (ties to the lower index), the selected
probabilities renormalized to sum to one, and the weighted sum of the selected experts' outputs.

:func:`compare_logits` gives the accuracy figures of the golden model: per-row cosine similarity of
logits and top-1 agreement.
"""

import numpy as np

from sim_models.checkpoint import Checkpoint

__all__ = ["ReferenceModel", "compare_logits"]


class ReferenceModel:
    """The checkpoint evaluated in float64. :meth:`logits` runs a whole sequence at once."""

    def __init__(self, checkpoint: Checkpoint):
        self.config = checkpoint.config
        self.w = {name: t.astype(np.float64) for name, t in checkpoint.tensors.items()}
        self.lm_head = checkpoint.lm_head.astype(np.float64)

    def logits(self, token_ids) -> np.ndarray:
        """float64 logits ``(T, vocab)`` of every position of ``token_ids`` (causal)."""
        c = self.config
        ids = np.asarray(token_ids, dtype=np.int64)
        h = self.w["model.embed_tokens.weight"][ids]
        positions = np.arange(len(ids))
        for layer in range(c.num_hidden_layers):
            p = f"model.layers.{layer}."
            x = self._rmsnorm(h, p + "input_layernorm.weight")
            h = h + self._attention(p + "self_attn.", x, positions)
            x = self._rmsnorm(h, p + "post_attention_layernorm.weight")
            h = h + (self._moe(p + "block_sparse_moe.", x) if c.is_moe else
                     self._mlp(x, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj"))
        return self._rmsnorm(h, "model.norm.weight") @ self.lm_head.T

    def _rmsnorm(self, x, name):
        var = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(var + self.config.rms_norm_eps) * self.w[name]

    def _linear(self, name, x):
        return x @ self.w[name + ".weight"].T

    def _rope(self, x, positions):
        """Rotate-half RoPE of ``x`` ``(T, heads, head_dim)`` (Hugging Face's apply_rotary_pos_emb)."""
        d = self.config.head_dim
        inv_freq = self.config.rope_theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles = np.outer(positions, inv_freq)
        emb = np.concatenate([angles, angles], axis=-1)[:, None, :]
        half = d // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * np.cos(emb) + rotated * np.sin(emb)

    def _attention(self, prefix, x, positions):
        c = self.config
        t_count = x.shape[0]
        q = self._linear(prefix + "q_proj", x).reshape(t_count, c.num_attention_heads, c.head_dim)
        k = self._linear(prefix + "k_proj", x).reshape(t_count, c.num_key_value_heads, c.head_dim)
        v = self._linear(prefix + "v_proj", x).reshape(t_count, c.num_key_value_heads, c.head_dim)
        q, k = self._rope(q, positions), self._rope(k, positions)
        k = np.repeat(k, c.group_size, axis=1)                 # repeat_kv: head h <- KV head h // group
        v = np.repeat(v, c.group_size, axis=1)
        scores = np.einsum("ihd,thd->hit", q, k) * c.head_dim ** -0.5
        causal = np.tril(np.ones((t_count, t_count), dtype=bool))
        scores = np.where(causal[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.einsum("hit,thd->ihd", probs, v).reshape(t_count, -1)
        return self._linear(prefix + "o_proj", out)

    def _mlp(self, x, gate, up, down):
        g = self._linear(gate, x)
        return self._linear(down, g / (1.0 + np.exp(-g)) * self._linear(up, x))

    def _moe(self, prefix, x):
        c = self.config
        logits = self._linear(prefix + "gate", x)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :c.num_experts_per_tok]
        weights = np.take_along_axis(probs, chosen, axis=-1)
        weights /= weights.sum(axis=-1, keepdims=True)
        out = np.zeros_like(x)
        for i in range(x.shape[0]):
            for j, expert in enumerate(chosen[i]):
                e = f"{prefix}experts.{expert}."
                out[i] += weights[i, j] * self._mlp(x[i:i + 1], e + "w1", e + "w3", e + "w2")[0]
        return out


def compare_logits(golden, reference) -> dict:
    """Accuracy of ``golden`` logits ``(N, vocab)`` against ``reference`` logits of the same rows.

    Returns ``cosine_min`` and ``cosine_mean`` (cosine similarity of each row pair, in float64) and
    ``top1`` (fraction of rows whose largest logit has the same index; ties to the lower index).
    """
    a = np.asarray(golden, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"logits must be two (N, vocab) arrays of one shape, got {a.shape} and {b.shape}")
    cos = np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    top1 = np.argmax(a, axis=-1) == np.argmax(b, axis=-1)
    return {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
            "top1": float(top1.mean()), "rows": int(a.shape[0])}
