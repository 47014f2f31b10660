"""Model descriptions from Hugging Face-style ``config.json`` files: parameters, bytes and FLOPs.

:func:`load_model` takes a name under ``models/`` or a directory (or a ``config.json``) and returns a
:class:`ModelDesc` for the LLaMA, Mixtral, GPT-OSS and DeepSeek-V3 (MLA) families; anything else,
or a missing or malformed field, is a :class:`ModelError` with one line. Parameter counts count
every matrix (and the router); norms and biases are below 0.01 % and left out.
"""

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelError", "ModelDesc", "load_model", "MODELS_DIR"]

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


class ModelError(ValueError):
    """A model description that cannot be used (one line)."""


@dataclass(frozen=True)
class ModelDesc:
    """The shapes that set a transformer's bytes and FLOPs per token."""

    name: str
    layers: int
    hidden: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int                 # q/k head dimension (MLA: nope + rope)
    v_head_dim: int
    attention: str                # "gqa" or "mla"
    q_lora_rank: int              # MLA only (0: none)
    kv_lora_rank: int             # MLA: the compressed KV (512)
    rope_dim: int                 # MLA: the shared rope key (64)
    windows: tuple                # per layer: sliding window in tokens, 0 for full attention
    dense_layers: int             # layers with a dense MLP (the first ones)
    dense_ffn: int
    experts: int                  # routed experts per MoE layer (0: dense model)
    top_k: int
    shared_experts: int
    expert_ffn: int
    tie_embeddings: bool

    # -- parameters ------------------------------------------------------------------------------
    def attention_params(self) -> int:
        """Weights of one layer's attention."""
        h, d = self.hidden, self.head_dim
        if self.attention == "mla":
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * d) if self.q_lora_rank \
                else h * self.heads * d
            kv = h * (self.kv_lora_rank + self.rope_dim) + \
                self.kv_lora_rank * self.heads * (d - self.rope_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        return h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * self.v_head_dim * h

    def expert_params(self) -> int:
        """Weights of one routed (or shared) expert: gate, up and down."""
        return 3 * self.hidden * self.expert_ffn

    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    def dense_params(self) -> int:
        """Weights every token reads in every layer: attention, dense MLPs, shared experts, routers."""
        mlp = self.dense_layers * 3 * self.hidden * self.dense_ffn
        moe = self.moe_layers() * (self.shared_experts * self.expert_params() + self.hidden * self.experts)
        return self.layers * self.attention_params() + mlp + moe

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def total_params(self) -> int:
        """Every weight: embeddings, layers and the output head."""
        head = 0 if self.tie_embeddings else self.embedding_params()
        return self.embedding_params() + head + self.dense_params() + \
            self.moe_layers() * self.experts * self.expert_params()

    def active_params(self) -> int:
        """Weights one token multiplies by: everything but the embedding table (one row is looked
        up) and the routed experts it is not sent to."""
        return self.embedding_params() + self.dense_params() + \
            self.moe_layers() * self.top_k * self.expert_params()

    # -- per token -------------------------------------------------------------------------------
    def kv_elements_per_token(self) -> int:
        """KV-cache elements one position stores in one layer (MLA: the 512 + 64 latent)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.rope_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_positions_read(self, context: int) -> int:
        """Positions the attention of one new token reads, summed over the layers."""
        return sum(min(context, w) if w else context for w in self.windows)

    def kv_bytes_read(self, context: int, kv_bytes: float) -> float:
        """KV bytes one decode step of one sequence reads at ``context`` positions."""
        return self.kv_elements_per_token() * kv_bytes * self.kv_positions_read(context)

    def kv_bytes_stored(self, context: int, kv_bytes: float) -> float:
        """KV bytes one sequence of ``context`` positions keeps (a window keeps its last positions)."""
        return self.kv_bytes_read(context, kv_bytes)

    def attention_flops(self, context: int) -> float:
        """FLOPs of one token's attention over ``context`` positions, all layers (scores and values;
        MLA in the absorbed form: every head's scores over the 576-wide latent, values over 512)."""
        if self.attention == "mla":
            per = 2 * self.heads * (self.kv_lora_rank + self.rope_dim + self.kv_lora_rank)
        else:
            per = 2 * self.heads * (self.head_dim + self.v_head_dim)
        return per * self.kv_positions_read(context)

    def matmul_flops(self) -> float:
        """FLOPs of one token's weight multiplications (2 per active weight)."""
        return 2.0 * self.active_params()

    def flops_per_token(self, context: int) -> float:
        return self.matmul_flops() + self.attention_flops(context)

    def prefill_flops(self, tokens: int) -> float:
        """FLOPs of a prefill of ``tokens`` (causal: token ``i`` attends to ``i + 1`` positions)."""
        attn = sum(self.attention_flops(i + 1) for i in range(0, tokens, max(1, tokens // 256)))
        attn *= tokens / len(range(0, tokens, max(1, tokens // 256)))
        return tokens * self.matmul_flops() + attn

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct routed experts per MoE layer for ``tokens`` tokens routed uniformly."""
        if not self.experts:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.top_k / self.experts) ** tokens)


def _get(cfg, key, where, default=None, kind=int):
    value = cfg.get(key, default)
    if value is None:
        raise ModelError(f"{where}: missing field {key!r}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ModelError(f"{where}: field {key!r} must be a non-negative integer, got {value!r}")
    return value


def from_config(cfg: dict, name: str, where: str) -> ModelDesc:
    """A :class:`ModelDesc` from a parsed ``config.json``."""
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: not a JSON object")
    if isinstance(cfg.get("text_config"), dict):          # multimodal wrapper: its text model
        cfg = cfg["text_config"]
    kind = cfg.get("model_type")
    g = lambda key, default=None: _get(cfg, key, where, default)  # noqa: E731
    layers, hidden, heads = g("num_hidden_layers"), g("hidden_size"), g("num_attention_heads")
    if min(layers, hidden, heads) == 0:
        raise ModelError(f"{where}: num_hidden_layers, hidden_size and num_attention_heads must be positive")
    common = dict(name=name, layers=layers, hidden=hidden, vocab=g("vocab_size"), heads=heads,
                  tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))
    if kind in ("llama", "mixtral", "gpt_oss"):
        head_dim = g("head_dim", hidden // heads)
        kv_heads = g("num_key_value_heads", heads)
        if kv_heads == 0 or heads % kv_heads:
            raise ModelError(f"{where}: num_attention_heads ({heads}) must be a multiple of "
                             f"num_key_value_heads ({kv_heads})")
        window = cfg.get("sliding_window") or 0
        types = cfg.get("layer_types") or ["full_attention"] * layers
        if kind == "gpt_oss" and "layer_types" not in cfg:
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        if len(types) != layers:
            raise ModelError(f"{where}: layer_types has {len(types)} entries for {layers} layers")
        if kind == "mixtral" and window:
            types = ["sliding_attention"] * layers
        windows = tuple(window if t == "sliding_attention" else 0 for t in types)
        experts = g("num_local_experts", 0) if kind != "llama" else 0
        top_k = g("num_experts_per_tok", 0) if experts else 0
        if experts and not 0 < top_k <= experts:
            raise ModelError(f"{where}: num_experts_per_tok ({top_k}) must be 1..{experts}")
        ffn = g("intermediate_size")
        return ModelDesc(**common, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                         attention="gqa", q_lora_rank=0, kv_lora_rank=0, rope_dim=0, windows=windows,
                         dense_layers=0 if experts else layers, dense_ffn=ffn, experts=experts,
                         top_k=top_k, shared_experts=0, expert_ffn=ffn)
    if kind in ("deepseek_v3", "kimi_k2"):
        nope, rope = g("qk_nope_head_dim"), g("qk_rope_head_dim")
        experts, top_k = g("n_routed_experts"), g("num_experts_per_tok")
        if not 0 < top_k <= experts:
            raise ModelError(f"{where}: num_experts_per_tok ({top_k}) must be 1..{experts}")
        dense = g("first_k_dense_replace", 0)
        if dense > layers:
            raise ModelError(f"{where}: first_k_dense_replace ({dense}) exceeds the {layers} layers")
        return ModelDesc(**common, kv_heads=heads, head_dim=nope + rope, v_head_dim=g("v_head_dim"),
                         attention="mla", q_lora_rank=g("q_lora_rank", 0), kv_lora_rank=g("kv_lora_rank"),
                         rope_dim=rope, windows=(0,) * layers, dense_layers=dense,
                         dense_ffn=g("intermediate_size"), experts=experts, top_k=top_k,
                         shared_experts=g("n_shared_experts", 0), expert_ffn=g("moe_intermediate_size"))
    raise ModelError(f"{where}: unsupported model_type {kind!r} (llama, mixtral, gpt_oss, deepseek_v3)")


def load_model(name_or_path) -> ModelDesc:
    """A model by name under ``models/`` (``deepseek-r1``), a checkpoint directory or a config.json."""
    path = Path(name_or_path)
    if not path.exists():
        if (MODELS_DIR / str(name_or_path)).is_dir():
            path = MODELS_DIR / str(name_or_path)
        else:
            known = ", ".join(sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file()))
            raise ModelError(f"unknown model {str(name_or_path)!r} (in models/: {known}; or give a "
                             f"directory with a config.json)")
    config = path / "config.json" if path.is_dir() else path
    if not config.is_file():
        raise ModelError(f"{path}: no config.json")
    try:
        cfg = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{config}: not valid JSON ({exc})") from None
    name = path.name if path.is_dir() else path.parent.name
    return from_config(cfg, name, str(config))
