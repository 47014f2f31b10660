"""Golden forward pass of a LLaMA/Mixtral decoder with exactly the compute tile's numerics.

The tile (its RTL and its instruction-level model) must reproduce every bit computed here. The
contract, with the reasons behind each choice, is ``docs/transformer_numerics.md``; in short:

* every linear layer (q, k, v, o; gate, up, down; the Mixtral router; ``lm_head``) is an MX GEMM of
  :mod:`sim_models.mx`: weights quantized once, at construction, along their input (reduction)
  dimension (``weight_format``, default ``e2m1``, ``floor`` scales); activations quantized per row
  along the reduction dimension just before each GEMM (``act_format``, default ``e2m1``, ``floor``);
  binary32 output. Each output row depends only on its own input row;
* everything else is a vector-unit operation of :mod:`sim_models.vpu`: RMSNorm, RoPE (rotate-half,
  tables from :func:`sim_models.vpu.rope_tables`), attention scores, scaling, softmax and the
  ``P @ V`` accumulation, SwiGLU, residual adds, the MoE top-k, routing softmax and combination;
* K and V are stored in the :class:`KVCache` as bfloat16 and read back from it by attention, also
  during prefill, so a prompt of T tokens processed as one batch gives the same bits as T
  single-token steps.

:func:`generate` runs prefill then greedy decode and returns the chosen ids with the logits row that
chose each one. Bad input (a token outside the vocabulary, an unknown format, a context longer than
a sliding window) raises :class:`TransformerError` with a one-line message.
"""

import math

import numpy as np

from sim_models import mx, vpu
from sim_models.checkpoint import Checkpoint, ModelConfig, load_checkpoint

__all__ = ["TransformerError", "Transformer", "KVCache", "MXLinear",
           "attention", "attention_scale", "check_tokens", "greedy", "generate"]

_QUANTIZE_MODE = "floor"
_ORDER_NAN = -(np.int64(1) << 40)      # order key below every binary32 pattern: NaN never wins


class TransformerError(ValueError):
    """Bad input to the golden model (token ids, formats, context length); the message is one line."""


# ==================================================================================================
# MX GEMM layers
# ==================================================================================================

def _quantize(x: np.ndarray, fmt: str):
    """Per-row MX quantization along the last axis in element format ``fmt`` (``floor`` scales)."""
    return mx.quantize(x, _QUANTIZE_MODE, format=fmt)


def _matmul(a_codes, a_scales, a_format, b_codes, b_scales, b_format):
    return mx.matmul(a_codes, a_scales, b_codes, b_scales, a_format=a_format, b_format=b_format)


class MXLinear:
    """A linear layer ``y = x @ W.T`` run as an MX GEMM.

    ``weight`` has Hugging Face's layout ``(out_features, in_features)``; it is quantized once along
    ``in_features`` and kept as the GEMM's B operand: codes ``(K, N)`` and scales ``(K // 32, N)``
    with ``K = in_features`` and ``N = out_features``. Calling the layer on ``x`` of shape ``(M, K)``
    quantizes each row of ``x`` along ``K`` in ``act_format`` and returns the binary32 product
    ``(M, N)`` of :func:`sim_models.mx.matmul`.
    """

    def __init__(self, weight: np.ndarray, weight_format: str = "e2m1"):
        weight = np.asarray(weight, dtype=np.float32)
        codes, scales = _quantize(weight, weight_format)
        self.weight_format = weight_format
        self.codes = np.ascontiguousarray(codes.T)
        self.scales = np.ascontiguousarray(scales.T)

    @property
    def shape(self) -> tuple[int, int]:
        """``(in_features, out_features)``: the GEMM's ``(K, N)``."""
        return self.codes.shape

    def __call__(self, x: np.ndarray, act_format: str = "e2m1") -> np.ndarray:
        a_codes, a_scales = _quantize(x, act_format)
        return _matmul(a_codes, a_scales, act_format, self.codes, self.scales, self.weight_format)


# ==================================================================================================
# KV cache
# ==================================================================================================

class KVCache:
    """K and V of every layer, KV head and position, held as bfloat16 bit patterns (``uint16``).

    ``keys(layer)`` and ``values(layer)`` return float32 arrays ``(num_kv_heads, length, head_dim)``
    widened exactly from the stored bfloat16; :meth:`append` takes float32 rows and rounds them to
    bfloat16 (nearest even, :func:`sim_models.vpu.to_bfloat16`). Positions are appended in order; a
    forward pass appends the same positions to every layer.
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int):
        empty = np.zeros((num_kv_heads, 0, head_dim), dtype=np.uint16)
        self._k = [empty.copy() for _ in range(num_layers)]
        self._v = [empty.copy() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        """Positions held (those of the last layer: equal in every layer between forward passes)."""
        return self._k[-1].shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of K and V stored, all layers (2 bytes per element)."""
        return sum(k.nbytes + v.nbytes for k, v in zip(self._k, self._v, strict=True))

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        """Append float32 ``k`` and ``v`` of shape ``(num_kv_heads, T, head_dim)`` to ``layer``."""
        self._k[layer] = np.concatenate([self._k[layer], vpu.to_bfloat16(k)], axis=1)
        self._v[layer] = np.concatenate([self._v[layer], vpu.to_bfloat16(v)], axis=1)

    def key_bits(self, layer: int) -> np.ndarray:
        """The stored bfloat16 patterns of K, ``(num_kv_heads, length, head_dim)`` uint16."""
        return self._k[layer]

    def value_bits(self, layer: int) -> np.ndarray:
        """The stored bfloat16 patterns of V, ``(num_kv_heads, length, head_dim)`` uint16."""
        return self._v[layer]

    def keys(self, layer: int) -> np.ndarray:
        """K of ``layer`` as float32, ``(num_kv_heads, length, head_dim)``."""
        return vpu.from_bfloat16(self._k[layer])

    def values(self, layer: int) -> np.ndarray:
        """V of ``layer`` as float32, ``(num_kv_heads, length, head_dim)``."""
        return vpu.from_bfloat16(self._v[layer])


# ==================================================================================================
# Attention
# ==================================================================================================

def attention_scale(head_dim: int) -> np.float32:
    """The score scale ``1/sqrt(head_dim)``: evaluated in float64, rounded once to binary32."""
    return np.float32(1.0 / math.sqrt(head_dim))


def attention(q, keys, values, positions, scale, lanes: int = vpu.DEFAULT_LANES) -> np.ndarray:
    """Causal grouped-query attention in vector-unit operations.

    Parameters
    ----------
    q : float32 array ``(T, num_heads, head_dim)``
        Queries, RoPE applied.
    keys, values : float32 arrays ``(num_kv_heads, L, head_dim)``
        The KV cache of the layer (already holding the T new positions).
    positions : sequence of int, length T
        Absolute position of each query; query ``i`` attends to positions ``0..positions[i]``.
    scale : float32 scalar
        ``1/sqrt(head_dim)`` (:func:`attention_scale`).
    lanes : int
        Lanes of the vector unit; they fix the order of the score sums.

    Returns
    -------
    float32 array ``(T, num_heads, head_dim)``
        For query ``i`` and head ``h``, with KV head ``g = h // (num_heads // num_kv_heads)``:
        ``s_t = vpu.sum(vpu.mul(q[i, h], K[g, t]))``, ``s = vpu.scale(s, scale)``,
        ``p = vpu.softmax(s)``, then ``acc = vpu.fma(p_t, V[g, t], acc)`` for ``t = 0, 1, ...`` from
        ``acc = +0``.
    """
    q = np.asarray(q, dtype=np.float32)
    t_count, heads, head_dim = q.shape
    kv_heads = keys.shape[0]
    kv_of_head = np.arange(heads) // (heads // kv_heads)       # Hugging Face's repeat_kv
    out = np.empty_like(q)
    for i, pos in enumerate(positions):
        k = keys[kv_of_head, :pos + 1, :]                      # (heads, pos + 1, head_dim)
        v = values[kv_of_head, :pos + 1, :]
        qi = np.broadcast_to(q[i][:, None, :], k.shape)
        scores = vpu.scale(vpu.sum(vpu.mul(qi, k), lanes=lanes), scale)
        p = vpu.softmax(scores)                                # (heads, pos + 1)
        acc = np.zeros((heads, head_dim), dtype=np.float32)
        for t in range(pos + 1):
            acc = vpu.fma(np.broadcast_to(p[:, t, None], acc.shape), v[:, t, :], acc)
        out[i] = acc
    return out


# ==================================================================================================
# The model
# ==================================================================================================

class Transformer:
    """The golden model of a checkpoint: quantized weights plus the forward pass.

    Parameters
    ----------
    checkpoint : Checkpoint
        From :func:`sim_models.checkpoint.load_checkpoint` (or built in memory).
    act_format : str
        MX element format of the activations at every GEMM (default ``"e2m1"``, i.e. W4A4).
    weight_format : str
        MX element format of the weights (default ``"e2m1"``).
    lanes : int
        Lanes of the vector unit (the order of its sums); default :data:`sim_models.vpu.DEFAULT_LANES`.
    """

    def __init__(self, checkpoint: Checkpoint, act_format: str = "e2m1", weight_format: str = "e2m1",
                 lanes: int = vpu.DEFAULT_LANES):
        if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1:
            raise TransformerError(f"lanes must be a positive integer, got {lanes!r}")
        self.config: ModelConfig = checkpoint.config
        self.act_format = act_format
        self.weight_format = weight_format
        self.lanes = lanes
        self.scale = attention_scale(self.config.head_dim)
        self._eps = np.float32(self.config.rms_norm_eps)
        try:
            _quantize(np.zeros((1, mx.BLOCK_SIZE), dtype=np.float32), act_format)
            tensors = checkpoint.tensors
            self.embed = tensors["model.embed_tokens.weight"]
            self.norms = {name: w for name, w in tensors.items() if w.ndim == 1}
            self.linears = {name.removesuffix(".weight"): MXLinear(w, weight_format)
                            for name, w in tensors.items()
                            if w.ndim == 2 and name != "model.embed_tokens.weight"}
        except mx.MXFormatError as exc:
            raise TransformerError(str(exc)) from None
        if self.config.tie_word_embeddings:
            self.linears["lm_head"] = MXLinear(self.embed, weight_format)

    @classmethod
    def from_directory(cls, directory, **kwargs) -> "Transformer":
        """Load a checkpoint directory (:func:`sim_models.checkpoint.load_checkpoint`) and build it."""
        return cls(load_checkpoint(directory), **kwargs)

    def new_cache(self) -> KVCache:
        """An empty KV cache for this model."""
        c = self.config
        return KVCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim)

    def forward(self, token_ids, cache: KVCache, record: dict | None = None) -> np.ndarray:
        """Run ``token_ids`` (T >= 1) at positions ``cache.length ..``; return logits ``(T, vocab)``.

        Appends the T new positions' K and V to ``cache``. Row ``i`` of the result is the float32
        logits after token ``i``; it equals, bit for bit, what the same tokens give one at a time.
        If ``record`` is a dict, ``record["experts"]`` receives, for a Mixtral model, a list with one
        ``(T, k)`` array of selected expert indices per layer (top-k order).
        """
        ids = check_tokens(token_ids, self.config.vocab_size, "token")
        start = cache.length
        positions = np.arange(start, start + len(ids))
        window = self.config.sliding_window
        if window is not None and positions[-1] >= window:
            raise TransformerError(f"context of {positions[-1] + 1} tokens exceeds sliding_window "
                                   f"{window}; windowed attention is not implemented")
        experts = [] if self.config.is_moe else None
        h = self.embed[ids]
        for layer in range(self.config.num_hidden_layers):
            h = self._layer(layer, h, positions, cache, experts)
        x = self._rmsnorm(h, "model.norm")
        logits = self._linear("lm_head", x)
        if record is not None and experts is not None:
            record["experts"] = experts
        return logits

    # -- pieces ------------------------------------------------------------------------------------

    def _linear(self, name: str, x: np.ndarray) -> np.ndarray:
        return self.linears[name](x, self.act_format)

    def _rmsnorm(self, x: np.ndarray, name: str) -> np.ndarray:
        return vpu.rmsnorm(x, self.norms[name + ".weight"], self._eps, lanes=self.lanes)

    def _layer(self, layer, h, positions, cache, experts):
        c = self.config
        p = f"model.layers.{layer}."
        t_count = h.shape[0]
        x = self._rmsnorm(h, p + "input_layernorm")
        q = self._linear(p + "self_attn.q_proj", x).reshape(t_count, c.num_attention_heads, c.head_dim)
        k = self._linear(p + "self_attn.k_proj", x).reshape(t_count, c.num_key_value_heads, c.head_dim)
        v = self._linear(p + "self_attn.v_proj", x).reshape(t_count, c.num_key_value_heads, c.head_dim)
        cos, sin = vpu.rope_tables(positions, c.head_dim, c.rope_theta)
        q = vpu.rope(q, cos[:, None, :], sin[:, None, :])
        k = vpu.rope(k, cos[:, None, :], sin[:, None, :])
        cache.append(layer, k.transpose(1, 0, 2), v.transpose(1, 0, 2))
        attn = attention(q, cache.keys(layer), cache.values(layer), positions, self.scale, self.lanes)
        h = vpu.add(h, self._linear(p + "self_attn.o_proj", attn.reshape(t_count, -1)))
        x = self._rmsnorm(h, p + "post_attention_layernorm")
        if c.is_moe:
            y, chosen = self._moe(p + "block_sparse_moe.", x)
            experts.append(chosen)
        else:
            y = self._mlp(p + "mlp.", x)
        return vpu.add(h, y)

    def _mlp(self, prefix: str, x: np.ndarray, names=("gate_proj", "up_proj", "down_proj")):
        gate, up, down = (prefix + n for n in names)
        return self._linear(down, vpu.swiglu(self._linear(gate, x), self._linear(up, x)))

    def _moe(self, prefix: str, x: np.ndarray):
        """Top-k MoE: router GEMM, ``vpu.topk``, ``vpu.softmax`` over the k selected logits, each
        selected expert's SwiGLU MLP on its tokens only, ``acc = fma(w_j, y_j, acc)`` in top-k order."""
        logits = self._linear(prefix + "gate", x)
        top_logits, chosen = vpu.topk(logits, self.config.num_experts_per_tok)
        weights = vpu.softmax(top_logits)                       # (T, k)
        outputs = np.zeros(chosen.shape + (x.shape[1],), dtype=np.float32)
        for expert in np.unique(chosen):
            rows, slots = np.nonzero(chosen == expert)          # a token selects an expert once
            e = f"{prefix}experts.{int(expert)}."
            outputs[rows, slots] = self._mlp(e, x[rows], names=("w1", "w3", "w2"))
        acc = np.zeros(x.shape, dtype=np.float32)
        for j in range(chosen.shape[1]):
            acc = vpu.fma(np.broadcast_to(weights[:, j, None], acc.shape), outputs[:, j], acc)
        return acc, chosen


# ==================================================================================================
# Decoding
# ==================================================================================================

def check_tokens(token_ids, vocab_size: int, what: str = "token") -> np.ndarray:
    """``token_ids`` as a 1-D int64 array of at least one id in ``[0, vocab_size)``, or a
    :class:`TransformerError` naming the first bad one."""
    arr = np.asarray(token_ids)
    if arr.ndim != 1 or arr.size == 0:
        raise TransformerError(f"{what} ids must be a non-empty 1-D sequence, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TransformerError(f"{what} ids must be integers, got dtype {arr.dtype}")
    bad = np.nonzero((arr < 0) | (arr >= vocab_size))[0]
    if bad.size:
        i = int(bad[0])
        raise TransformerError(f"{what} id {int(arr[i])} at index {i} is outside the vocabulary "
                               f"[0, {vocab_size})")
    return arr.astype(np.int64)


def greedy(logits) -> int:
    """Index of the largest logit: binary32 order with ``+0 > -0``, ties to the lower index.

    NaN never wins; a row of NaNs only gives index 0.
    """
    bits = np.ascontiguousarray(np.asarray(logits, dtype=np.float32)).view(np.uint32).astype(np.int64)
    mag = bits & 0x7FFF_FFFF
    key = np.where(bits >> 31, -mag - 1, mag)
    key = np.where(mag > 0x7F80_0000, _ORDER_NAN, key)
    return int(np.argmax(key))                               # first maximum: the lower index


def generate(model: Transformer, prompt_ids, n_new: int) -> tuple[np.ndarray, np.ndarray]:
    """Prefill ``prompt_ids`` as one batch, then decode ``n_new`` tokens greedily, one per step.

    Returns ``(ids, logits)``: the generated ids ``(n_new,)`` int64 and, row ``j``, the float32 logits
    ``(n_new, vocab)`` that chose ``ids[j]`` (the prompt's last row for ``j = 0``, then the row of the
    step that consumed ``ids[j - 1]``). Prompt ids outside the vocabulary raise
    :class:`TransformerError`.
    """
    ids = check_tokens(prompt_ids, model.config.vocab_size, "prompt token")
    if isinstance(n_new, bool) or not isinstance(n_new, int | np.integer) or n_new < 0:
        raise TransformerError(f"n_new must be a non-negative integer, got {n_new!r}")
    vocab = model.config.vocab_size
    out_ids = np.zeros(n_new, dtype=np.int64)
    out_logits = np.zeros((n_new, vocab), dtype=np.float32)
    if n_new == 0:
        return out_ids, out_logits
    cache = model.new_cache()
    row = model.forward(ids, cache)[-1]
    for step in range(n_new):
        out_logits[step] = row
        out_ids[step] = greedy(row)
        if step + 1 < n_new:
            row = model.forward(out_ids[step:step + 1], cache)[-1]
    return out_ids, out_logits
