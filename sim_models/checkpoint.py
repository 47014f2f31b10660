"""Hugging Face checkpoints of LLaMA and Mixtral decoders: read, validate, write, randomly initialize.

A checkpoint is a directory holding ``config.json`` (the model's Hugging Face configuration) and
``model.safetensors`` (every tensor, read with the ``safetensors`` library's NumPy API). Two
architectures are supported, with Hugging Face's tensor names exactly (``docs/models.md``):

* ``LlamaForCausalLM``: RMSNorm, grouped-query attention, RoPE (``rope_theta``), SwiGLU MLP
  (``mlp.gate_proj``, ``mlp.up_proj``, ``mlp.down_proj``), optionally tied embeddings;
* ``MixtralForCausalLM``: the same attention with a top-k mixture-of-experts MLP: router
  ``block_sparse_moe.gate`` and experts ``block_sparse_moe.experts.{j}.w1`` (gate), ``w3`` (up) and
  ``w2`` (down).

Every linear weight is stored as Hugging Face stores it, ``(out_features, in_features)``. Tensors in
float32, bfloat16 or float16 are widened exactly to float32; any other dtype is refused.

Every problem (a missing or malformed file, an unsupported architecture or option, a missing,
unexpected or wrong-shaped tensor, a hidden size, head dimension or intermediate size that is not a
multiple of 32) raises :class:`CheckpointError` with a one-line message naming the file, field or
tensor.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

__all__ = [
    "ARCHITECTURES", "CONFIG_FILE", "WEIGHTS_FILE", "MULTIPLE",
    "CheckpointError", "ModelConfig", "Checkpoint",
    "load_config", "load_checkpoint", "save_checkpoint", "random_weights",
    "sharpened_checkpoint",
]

ARCHITECTURES = ("LlamaForCausalLM", "MixtralForCausalLM")
"""The Hugging Face ``architectures`` entries this module reads."""
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
MULTIPLE = 32
"""Hidden size, head dimension and intermediate size must be multiples of this (the MX block size)."""

_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral"}
# Hugging Face's defaults for the optional fields, per architecture (configuration_llama.py and
# configuration_mixtral.py).
_DEFAULTS = {
    "LlamaForCausalLM": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0},
    "MixtralForCausalLM": {"rms_norm_eps": 1e-5, "rope_theta": 1e6,
                           "num_local_experts": 8, "num_experts_per_tok": 2},
}
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads")
_STORED_DTYPES = ("F32", "BF16", "F16")   # safetensors dtype names read (and widened exactly)
_WIDEN = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
# Tensors some exporters add that carry nothing the model needs (RoPE tables are recomputed).
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_NO_DEFAULT = object()


class CheckpointError(ValueError):
    """A checkpoint or configuration the model cannot run; the message is one line."""


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a Hugging Face configuration that fix the computation.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and ``num_key_value_heads`` to
    ``num_attention_heads``, as in Hugging Face. ``num_local_experts`` and ``num_experts_per_tok`` are
    0 for a dense model. ``sliding_window`` (Mixtral) is kept so that a longer context is refused
    rather than computed without the window. ``raw`` is the parsed ``config.json`` as given.
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool = False
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    sliding_window: int | None = None
    initializer_range: float = 0.02
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts (Mixtral) model."""
        return self.num_local_experts > 0

    @property
    def group_size(self) -> int:
        """Query heads per KV head: query head ``h`` reads KV head ``h // group_size``."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_dict(cls, raw: dict) -> "ModelConfig":
        """Validate a parsed ``config.json``; raise :class:`CheckpointError` naming the bad field."""
        if not isinstance(raw, dict):
            raise CheckpointError(f"{CONFIG_FILE} must hold a JSON object, got {type(raw).__name__}")
        arch = _architecture(raw)
        defaults = _DEFAULTS[arch]
        ints = {name: _int_field(raw, name, minimum=1) for name in _REQUIRED}
        heads = ints["num_attention_heads"]
        kv_heads = _int_field(raw, "num_key_value_heads", minimum=1, default=heads)
        if heads % kv_heads:
            raise CheckpointError(f"num_attention_heads ({heads}) is not a multiple of "
                                  f"num_key_value_heads ({kv_heads})")
        head_dim = _int_field(raw, "head_dim", minimum=1, default=None)
        if head_dim is None:
            if ints["hidden_size"] % heads:
                raise CheckpointError(f"hidden_size ({ints['hidden_size']}) is not a multiple of "
                                      f"num_attention_heads ({heads}) and head_dim is not given")
            head_dim = ints["hidden_size"] // heads
        for name, value in (("hidden_size", ints["hidden_size"]), ("head_dim", head_dim),
                            ("intermediate_size", ints["intermediate_size"])):
            if value % MULTIPLE:
                raise CheckpointError(f"{name} is {value}, not a multiple of {MULTIPLE} (the MX block "
                                      f"size)")
        _unsupported_options(raw)
        eps = _float_field(raw, "rms_norm_eps", defaults["rms_norm_eps"], positive=False)
        theta = _rope_theta(raw, defaults["rope_theta"])
        tie = raw.get("tie_word_embeddings", False)
        if not isinstance(tie, bool):
            raise CheckpointError(f"tie_word_embeddings must be true or false, got {tie!r}")
        experts = top_k = 0
        window = None
        if arch == "MixtralForCausalLM":
            experts = _int_field(raw, "num_local_experts", minimum=1,
                                 default=defaults["num_local_experts"])
            top_k = _int_field(raw, "num_experts_per_tok", minimum=1,
                               default=defaults["num_experts_per_tok"])
            if top_k > experts:
                raise CheckpointError(f"num_experts_per_tok ({top_k}) exceeds num_local_experts "
                                      f"({experts})")
            window = _int_field(raw, "sliding_window", minimum=1, default=None)
        init_range = _float_field(raw, "initializer_range", 0.02, positive=False)
        return cls(architecture=arch, num_key_value_heads=kv_heads, head_dim=head_dim,
                   rms_norm_eps=eps, rope_theta=theta, tie_word_embeddings=tie,
                   num_local_experts=experts, num_experts_per_tok=top_k, sliding_window=window,
                   initializer_range=init_range, raw=dict(raw), **ints)

    def to_dict(self) -> dict:
        """``config.json`` contents: the given fields, plus ``model_type`` if it was missing."""
        out = dict(self.raw)
        out.setdefault("model_type", _MODEL_TYPES[self.architecture])
        return out

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the checkpoint must hold, by Hugging Face name, with its shape, in a fixed
        order (embedding, then layer by layer, then the final norm and ``lm_head`` unless tied)."""
        h, inter, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q_out, kv_out = self.num_attention_heads * hd, self.num_key_value_heads * hd
        shapes = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for i in range(self.num_hidden_layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (q_out, h)
            shapes[p + "self_attn.k_proj.weight"] = (kv_out, h)
            shapes[p + "self_attn.v_proj.weight"] = (kv_out, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            if self.is_moe:
                shapes[p + "block_sparse_moe.gate.weight"] = (self.num_local_experts, h)
                for j in range(self.num_local_experts):
                    e = f"{p}block_sparse_moe.experts.{j}."
                    shapes[e + "w1.weight"] = (inter, h)
                    shapes[e + "w2.weight"] = (h, inter)
                    shapes[e + "w3.weight"] = (inter, h)
            else:
                shapes[p + "mlp.gate_proj.weight"] = (inter, h)
                shapes[p + "mlp.up_proj.weight"] = (inter, h)
                shapes[p + "mlp.down_proj.weight"] = (h, inter)
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes


@dataclass
class Checkpoint:
    """A validated configuration and its float32 tensors (Hugging Face names and layouts)."""

    config: ModelConfig
    tensors: dict[str, np.ndarray]

    @property
    def lm_head(self) -> np.ndarray:
        """The output projection ``(vocab_size, hidden_size)``: the embedding matrix when tied."""
        name = "model.embed_tokens.weight" if self.config.tie_word_embeddings else "lm_head.weight"
        return self.tensors[name]


def load_config(path) -> ModelConfig:
    """Read and validate a ``config.json`` file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"configuration file {str(path)!r} not found")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON ({str(exc).splitlines()[0]})") from None
    return ModelConfig.from_dict(raw)


def load_checkpoint(directory) -> Checkpoint:
    """Read a checkpoint directory; every tensor is checked against the configuration.

    Returns float32 arrays (widened exactly from bfloat16 or float16). Raises
    :class:`CheckpointError` for a missing directory or file, malformed JSON or safetensors data, an
    unsupported architecture or option, and a missing, unexpected, wrong-dtype or wrong-shaped tensor.
    """
    from safetensors import SafetensorError, safe_open

    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {str(directory)!r} not found")
    config = load_config(directory / CONFIG_FILE)
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{str(weights)!r} not found (a checkpoint holds {CONFIG_FILE} and "
                              f"{WEIGHTS_FILE})")
    expected = config.tensor_shapes()
    tensors = {}
    try:
        with safe_open(weights, framework="np") as f:
            names = list(f.keys())
            for name in names:
                if name in expected:
                    kind = f.get_slice(name).get_dtype()        # checked before NumPy sees the data
                    if kind not in _STORED_DTYPES:
                        raise CheckpointError(f"tensor {name!r} has dtype {kind}; expected float32 (F32), "
                                              f"bfloat16 (BF16) or float16 (F16)")
                    tensors[name] = _widen(name, f.get_tensor(name), expected[name])
                elif not _ignorable(name, config):
                    raise CheckpointError(f"unexpected tensor {name!r} in {WEIGHTS_FILE} (biases and "
                                          f"other extras are not supported by {config.architecture})")
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"cannot read {str(weights)!r} as safetensors "
                              f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") \
            from None
    missing = [name for name in expected if name not in tensors]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CheckpointError(f"tensor {missing[0]!r}{more} missing from {WEIGHTS_FILE}")
    return Checkpoint(config, {name: tensors[name] for name in expected})


def save_checkpoint(directory, config: ModelConfig, tensors: dict[str, np.ndarray]) -> None:
    """Write ``config.json`` and ``model.safetensors`` (float32 tensors) into ``directory``.

    ``tensors`` must hold exactly the tensors of ``config.tensor_shapes()`` with those shapes.
    """
    from safetensors.numpy import save

    expected = config.tensor_shapes()
    if set(tensors) != set(expected):
        extra = sorted(set(tensors) - set(expected)) + sorted(set(expected) - set(tensors))
        raise CheckpointError(f"tensor set does not match the configuration (e.g. {extra[0]!r})")
    out = {}
    for name, shape in expected.items():
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if arr.shape != shape:
            raise CheckpointError(f"tensor {name!r} has shape {arr.shape}, expected {shape}")
        out[name] = arr
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    # Written through bytes so that the file gets the usual permissions (the umask's).
    (directory / WEIGHTS_FILE).write_bytes(save(out, metadata={"format": "pt"}))


def random_weights(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A random initialization like Hugging Face's ``_init_weights``, in float32.

    Every linear and embedding weight is drawn from a normal distribution with mean 0 and standard
    deviation ``config.initializer_range`` (0.02 unless the configuration says otherwise); RMSNorm
    gains are 1. Tensors are drawn in the order of :meth:`ModelConfig.tensor_shapes` from
    ``numpy.random.default_rng(seed)``, so a seed fixes every bit.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in config.tensor_shapes().items():
        if len(shape) == 1:
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * config.initializer_range).astype(np.float32)
    return out



def sharpened_checkpoint(config: ModelConfig, seed: int = 0, qk_factor: float = 1.0) -> Checkpoint:
    """The :func:`random_weights` checkpoint of ``config`` with the q and k projections scaled by
    ``qk_factor``.

    At the reference initialization attention is almost uniform, so the position-dependent parts
    (RoPE, the causal mask, the GQA mapping) barely move the logits; scaling q and k by a factor
    such as 8 sharpens every score by its square and makes them matter.
    """
    tensors = random_weights(config, seed)
    for name in tensors:
        if ".q_proj." in name or ".k_proj." in name:
            tensors[name] = tensors[name] * np.float32(qk_factor)
    return Checkpoint(config, tensors)

# ==================================================================================================
# Field checks
# ==================================================================================================

def _architecture(raw: dict) -> str:
    archs = raw.get("architectures")
    if archs is None:
        raise CheckpointError(f"{CONFIG_FILE} has no 'architectures' field (expected one of "
                              f"{', '.join(ARCHITECTURES)})")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise CheckpointError(f"'architectures' must be a list of one name, got {archs!r}")
    if archs[0] not in ARCHITECTURES:
        raise CheckpointError(f"unsupported architecture {archs[0]!r}; supported: {', '.join(ARCHITECTURES)}")
    return archs[0]


def _int_field(raw: dict, name: str, minimum: int, default=_NO_DEFAULT):
    if name not in raw or (raw[name] is None and default is not _NO_DEFAULT):
        if default is _NO_DEFAULT:
            raise CheckpointError(f"{CONFIG_FILE} is missing the field {name!r}")
        return default
    value = raw[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise CheckpointError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float_field(raw: dict, name: str, default: float, positive: bool) -> float:
    value = raw.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        kind = "a positive" if positive else "a finite, non-negative"
        raise CheckpointError(f"{name} must be {kind} number, got {value!r}")
    return float(value)


def _rope_theta(raw: dict, default: float) -> float:
    """``rope_theta`` from the top level or from ``rope_parameters`` (newer Hugging Face configs);
    only the default rotary embedding is supported."""
    for name in ("rope_scaling", "rope_parameters"):
        params = raw.get(name)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise CheckpointError(f"{name} must be an object or null, got {params!r}")
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise CheckpointError(f"{name} of type {kind!r} is not supported (only the default RoPE)")
        factor = params.get("partial_rotary_factor", 1.0)
        if factor != 1.0:
            raise CheckpointError(f"{name}.partial_rotary_factor {factor!r} is not supported (only 1.0)")
        if "rope_theta" in params and "rope_theta" not in raw:
            return _float_field(params, "rope_theta", default, positive=True)
    return _float_field(raw, "rope_theta", default, positive=True)


def _unsupported_options(raw: dict) -> None:
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"hidden_act {act!r} is not supported (only 'silu', the SwiGLU MLP)")
    for name in ("attention_bias", "mlp_bias"):
        if raw.get(name, False) not in (False, None):
            raise CheckpointError(f"{name} is set; linear layers with biases are not supported")
    factor = raw.get("partial_rotary_factor", 1.0)
    if factor not in (1.0, None):
        raise CheckpointError(f"partial_rotary_factor {factor!r} is not supported (only 1.0)")


def _ignorable(name: str, config: ModelConfig) -> bool:
    if name.endswith(_IGNORED_SUFFIXES):
        return True
    # A tied checkpoint may still carry a copy of the output projection; Hugging Face ignores it.
    return config.tie_word_embeddings and name == "lm_head.weight"


def _widen(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if arr.dtype not in _WIDEN:
        raise CheckpointError(f"tensor {name!r} has dtype {arr.dtype}; expected float32, bfloat16 or "
                              f"float16")
    if arr.shape != shape:
        raise CheckpointError(f"tensor {name!r} has shape {arr.shape}, expected {shape}")
    return np.array(arr, dtype=np.float32)              # exact widening; a writable copy
