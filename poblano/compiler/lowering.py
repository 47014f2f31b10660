"""Lowering of a LLaMA/Mixtral model to tile programs (``docs/tile_compiler.md``).

:func:`compile_model` takes a :class:`sim_models.transformer.Transformer` (its quantized weights and
numerics are the contract) and a :class:`sim_models.tile_isa.TileConfig`, builds the weight image
and returns a :class:`CompiledModel`, whose :meth:`CompiledModel.forward` emits the assembly of a
forward pass over ``T`` tokens and assembles it. One lowering serves both phases:

* prefill: ``forward(T, open_kv=True)``: opens the request's KV sequences, then runs the T prompt
  tokens as one batch through every GEMM, with causal attention;
* decode: ``forward(1)``: one token, compiled once and run at every step.

Host contract: before a run the host writes the token ids to scratchpad buffer ``ids``, the position
of the first token to ``r1`` and the request's first KV sequence to ``r2`` (0 for one request);
after HALT it reads the logits from buffer ``logits`` (the last token's row, or all T rows with
``all_logits``). Registers ``r3`` .. ``r8`` are the MoE loop's.
"""

from dataclasses import dataclass

import numpy as np

from poblano.compiler.assembler import Program, assemble
from poblano.compiler.errors import CompileError
from poblano.compiler.scratchpad import plan_scratchpad
from poblano.compiler.weight_image import WeightImage, build_weight_image
from sim_models import vpu
from sim_models.tile_isa import FORMATS, TileConfig

__all__ = ["CompiledModel", "compile_model", "R_POS", "R_SEQ"]

R_POS = 1                # position of the first token of the run (host)
R_SEQ = 2                # first KV sequence of the request (host)
_R_T, _R_TEND, _R_X, _R_TK, _R_Y, _R_E = 3, 4, 5, 6, 7, 8


def _bits(value) -> str:
    """A binary32 constant as assembly text: the shortest decimal that rounds back to it."""
    value = np.float32(value)
    text = str(value)
    assert np.float32(float(text)) == value
    return text


@dataclass
class CompiledModel:
    """A model lowered for one tile: the weight image and the program generator."""
    model: object
    tile: TileConfig
    image: WeightImage

    @property
    def config(self):
        return self.model.config

    @property
    def max_context(self) -> int:
        """Positions the KV cache (and the RoPE table) can hold for one request."""
        return self.image.max_context

    def symbols(self, tokens: int, all_logits: bool = False) -> dict:
        """Scratchpad and weight symbols of a ``tokens``-token program (for listings)."""
        plan = plan_scratchpad(self.config, tokens, tokens if all_logits else 1, self.tile.spad_words)
        weights = {f"w:{name}": (s.addr, s.nbytes) for name, s in self.image.symbols.items()}
        return plan.symbols() | weights

    def forward(self, tokens: int, open_kv: bool = False, all_logits: bool = False,
                attention: bool = True) -> Program:
        """The program of a forward pass over ``tokens`` tokens (prefill: ``open_kv=True``).

        ``attention=False`` gives a *KV fill*: every layer appends its K and V but runs no
        ``ATTN`` (its output projection reads whatever the attention rows hold), so a long
        context is built at the cost of the GEMMs. Its logits are not the model's: it is for
        benchmarks that measure a decode step at a long context (``benchmarks/tile.py``)."""
        if not 1 <= tokens <= 4095:
            raise CompileError(f"a forward pass takes 1 to 4095 tokens, got {tokens}")
        if tokens > self.max_context:
            raise CompileError(f"{tokens} tokens exceed the tile's KV capacity of {self.max_context} "
                               f"positions per sequence")
        plan = plan_scratchpad(self.config, tokens, tokens if all_logits else 1, self.tile.spad_words)
        text = _Lowering(self, plan, tokens, open_kv, all_logits, attention).text()
        kind = ("prefill" if open_kv else "forward") if attention else "kv fill"
        return assemble(text, self.symbols(tokens, all_logits), name=f"{kind} T={tokens}")


def kv_capacity(config, tile: TileConfig) -> int:
    """Positions per sequence the tile's KV controller guarantees when every (layer, KV head) of one
    request holds a sequence; :class:`CompileError` if the sequences do not fit at all."""
    seqs = config.num_hidden_layers * config.num_key_value_heads
    if seqs > tile.kv_seqs:
        raise CompileError(f"the model needs {seqs} KV sequences (layers x KV heads), the tile's KV "
                           f"controller has {tile.kv_seqs}")
    pages = min(tile.kv_max_pages_per_seq, tile.kv_pages // seqs)
    if pages == 0:
        raise CompileError(f"{seqs} KV sequences need at least {seqs} pages, the tile has {tile.kv_pages}")
    return pages * tile.kv_page_tokens


def compile_model(model, tile: TileConfig | None = None, max_context: int | None = None) -> CompiledModel:
    """Lower ``model`` for ``tile`` (default :class:`TileConfig`): the weight image with a RoPE table
    for ``max_context`` positions (default: the KV capacity). Raises :class:`CompileError`."""
    tile = tile or TileConfig()
    c = model.config
    if model.lanes != tile.lanes:
        raise CompileError(f"the model's vector-unit lanes ({model.lanes}) differ from the tile's "
                           f"({tile.lanes}): the order of sums would differ")
    for name, value in (("hidden_size", c.hidden_size), ("intermediate_size", c.intermediate_size)):
        if value > vpu.MAX_LENGTH:
            raise CompileError(f"{name} {value} exceeds the vector unit's longest row ({vpu.MAX_LENGTH})")
    if c.is_moe and c.num_experts_per_tok > 8:
        raise CompileError(f"top-{c.num_experts_per_tok} exceeds the vector unit's top-k (8)")
    capacity = kv_capacity(c, tile)
    max_context = capacity if max_context is None else min(max_context, capacity)
    image = build_weight_image(model, tile, max_context)
    return CompiledModel(model, tile, image)


class _Lowering:
    """Emits the assembly of one forward pass."""

    def __init__(self, compiled: CompiledModel, plan, tokens: int, open_kv: bool, all_logits: bool,
                 attention: bool = True):
        self.m = compiled
        self.attention = attention
        self.c = compiled.config
        self.plan = plan
        self.t = tokens
        self.open_kv = open_kv
        self.all_logits = all_logits
        self.lines = []
        self.af = self.m.model.act_format
        self.wf = self.m.model.weight_format
        if self.af not in FORMATS or self.wf not in FORMATS:
            raise CompileError(f"element formats {self.af!r}/{self.wf!r}: the tile takes {FORMATS}")
        self.eps = _bits(self.c.rms_norm_eps)

    def emit(self, line: str, comment: str = "") -> None:
        self.lines.append(f"    {line}" + (f"  ; {comment}" if comment else ""))

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def text(self) -> str:
        c, t = self.c, self.t
        hd2 = 2 * c.head_dim
        if self.open_kv:
            self.emit(f"KVOPEN seq_r=r{R_SEQ} count={c.num_hidden_layers * c.num_key_value_heads}",
                      "one KV sequence per (layer, KV head)")
        self.emit("STW addr=s:zero", "+0.0 constant")
        self.emit(f"EMBED dst=s:h ids=s:ids count={t} w=w:model.embed_tokens row={c.hidden_size} "
                  f"vocab={c.vocab_size}", "h = embedding rows of the token ids")
        self.emit(f"LOAD dst=s:rope words={t * hd2} w=w:rope+r{R_POS}*{4 * hd2}",
                  "cos|sin rows of the positions")
        for layer in range(c.num_hidden_layers):
            self.layer(layer)
        rows = t if self.all_logits else 1
        off = "" if self.all_logits or t == 1 else f"+{(t - 1) * c.hidden_size}"
        self.rmsnorm("model.norm", f"s:h{off}", f"s:x{off}", rows, "final norm")
        self.gemm("s:logits", f"s:x{off}", rows, c.hidden_size, c.vocab_size, "lm_head", "logits")
        self.emit("HALT")
        return "\n".join(self.lines) + "\n"

    # -- pieces -------------------------------------------------------------------------------------
    def gemm(self, dst, src, m, k, n, weight, comment="", w_extra=""):
        self.emit(f"GEMM dst={dst} src={src} m={m} k={k} n={n} w=w:{weight}{w_extra} "
                  f"af={self.af} wf={self.wf}", comment)

    def vop(self, op, length, rows, comment="", **operands):
        parts = [f"VOP op={op} len={length} rows={rows}"]
        parts += [f"{key}={value}" for key, value in operands.items()]
        self.emit(" ".join(parts), comment)

    def rmsnorm(self, gain, src, dst, rows, comment):
        h = self.c.hidden_size
        self.emit(f"LOAD dst=s:gain words={h} w=w:{gain}", f"{gain} gain")
        self.vop("rmsnorm", h, rows, comment, dst=dst, dst_s=h, a=src, a_s=h, b="s:gain", imm=self.eps)

    def rope(self, buf, heads):
        """RoPE in place on ``buf`` (T rows of ``heads`` heads): one command per token (rows = heads,
        the position's cos/sin broadcast) or per head (rows = T), whichever takes fewer."""
        d, t = self.c.head_dim, self.t
        width = heads * d
        if t <= heads:
            for i in range(t):
                at, cs = f"s:{buf}+{i * width}" if i else f"s:{buf}", f"s:rope+{i * 2 * d}" if i else "s:rope"
                self.vop("rope", d, heads, f"rope {buf}, token {i}", dst=at, dst_s=d, a=at, a_s=d,
                         b=cs, c=f"s:rope+{i * 2 * d + d}")
        else:
            for h in range(heads):
                at = f"s:{buf}+{h * d}" if h else f"s:{buf}"
                self.vop("rope", d, t, f"rope {buf}, head {h}", dst=at, dst_s=width, a=at, a_s=width,
                         b="s:rope", b_s=2 * d, c=f"s:rope+{d}", c_s=2 * d)

    def layer(self, layer):
        c, t = self.c, self.t
        h, d = c.hidden_size, c.head_dim
        p = f"model.layers.{layer}."
        qw, kvw = c.num_attention_heads * d, c.num_key_value_heads * d
        self.lines.append(f"; ---- layer {layer} ----")
        self.rmsnorm(p + "input_layernorm", "s:h", "s:x", t, "x = rmsnorm(h)")
        self.gemm("s:q", "s:x", t, h, qw, p + "self_attn.q_proj", "q")
        self.gemm("s:k", "s:x", t, h, kvw, p + "self_attn.k_proj", "k")
        self.gemm("s:v", "s:x", t, h, kvw, p + "self_attn.v_proj", "v")
        self.rope("q", c.num_attention_heads)
        self.rope("k", c.num_key_value_heads)
        self.emit(f"KVAPPEND layer={layer} kvh={c.num_key_value_heads} hd={d} count={t} k=s:k v=s:v "
                  f"pos_r=r{R_POS} seq_r=r{R_SEQ}", "K, V -> bf16 records at positions r1..")
        if self.attention:
            self.emit(f"ATTN layer={layer} heads={c.num_attention_heads} kvh={c.num_key_value_heads} "
                      f"hd={d} count={t} dst=s:attn q=s:q pos_r=r{R_POS} seq_r=r{R_SEQ} "
                      f"scale={_bits(self.m.model.scale)}", "causal GQA over positions 0..r1+i")
        else:
            self.lines.append("; (KV fill: no ATTN)")
        self.gemm("s:o", "s:attn", t, qw, h, p + "self_attn.o_proj", "o")
        self.vop("add", h, t, "h += o", dst="s:h", dst_s=h, a="s:h", a_s=h, b="s:o", b_s=h)
        self.rmsnorm(p + "post_attention_layernorm", "s:h", "s:x", t, "x = rmsnorm(h)")
        if c.is_moe:
            self.moe(layer)
        else:
            inter = c.intermediate_size
            self.gemm("s:g", "s:x", t, h, inter, p + "mlp.gate_proj", "gate")
            self.gemm("s:u", "s:x", t, h, inter, p + "mlp.up_proj", "up")
            self.vop("swiglu", inter, t, "g = silu(g) * u", dst="s:g", dst_s=inter, a="s:g", a_s=inter,
                     b="s:u", b_s=inter)
            self.gemm("s:y", "s:g", t, inter, h, p + "mlp.down_proj", "down")
            self.vop("add", h, t, "h += y", dst="s:h", dst_s=h, a="s:h", a_s=h, b="s:y", b_s=h)

    def moe(self, layer):
        """Router GEMM, top-k, softmax over the k logits; then a loop over the T tokens running each
        selected expert's MLP on its token (the expert index loaded from the top-k result into a
        register selects the weights); then the weighted sum over the k slots for all tokens."""
        c, t = self.c, self.t
        h, inter = c.hidden_size, c.intermediate_size
        e, k = c.num_local_experts, c.num_experts_per_tok
        p = f"model.layers.{layer}.block_sparse_moe."
        stride = self.m.image.expert_stride(layer)
        self.gemm("s:rl", "s:x", t, h, e, p + "gate", "router logits")
        self.vop("topk", e, t, "values | indices", dst="s:tk", dst_s=2 * k, a="s:rl", a_s=e, imm=k)
        self.vop("softmax", k, t, "routing weights", dst="s:w", dst_s=k, a="s:tk", a_s=2 * k)
        for reg, value in ((_R_T, 0), (_R_TEND, t), (_R_X, 0), (_R_TK, 0), (_R_Y, 0)):
            self.emit(f"LI rd=r{reg} imm={value}")
        self.label(f"moe{layer}")
        w_extra = f"+r{_R_E}*{stride}"
        for j in range(k):
            self.emit(f"LDW rd=r{_R_E} addr=s:tk+{k + j}+r{_R_TK}", f"expert of slot {j}")
            self.gemm("s:eg", f"s:x+r{_R_X}", 1, h, inter, p + "experts.0.w1", "expert gate",
                      w_extra)
            self.gemm("s:eu", f"s:x+r{_R_X}", 1, h, inter, p + "experts.0.w3", "expert up", w_extra)
            self.vop("swiglu", inter, 1, "", dst="s:eg", a="s:eg", b="s:eu")
            ey = f"s:ey+{j * h}+r{_R_Y}" if j else f"s:ey+r{_R_Y}"
            self.gemm(ey, "s:eg", 1, inter, h, p + "experts.0.w2", "expert down", w_extra)
        for reg, step in ((_R_T, 1), (_R_X, h), (_R_TK, 2 * k), (_R_Y, k * h)):
            self.emit(f"ADDI rd=r{reg} rs=r{reg} imm={step}")
        self.emit(f"BLT rs=r{_R_T} rt=r{_R_TEND} target=moe{layer}", "next token")
        for j in range(k):
            c_operand = {"c": "s:zero", "bcast": "ac"} if j == 0 else {"c": "s:acc", "c_s": h,
                                                                        "bcast": "a"}
            self.vop("fma", h, t, f"acc = w[{j}] * y[{j}] + acc", dst="s:acc", dst_s=h,
                     a=f"s:w+{j}" if j else "s:w", a_s=k, b=f"s:ey+{j * h}" if j else "s:ey",
                     b_s=k * h, **c_operand)
        self.vop("add", h, t, "h += moe", dst="s:h", dst_s=h, a="s:h", a_s=h, b="s:acc", b_s=h)

