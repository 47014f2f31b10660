"""The compiler's scratchpad plan: where each activation buffer of a forward pass lives.

Buffers are word ranges, each starting on a multiple of :data:`ALIGN` words (one vector-unit beat of
8 lanes). Resident buffers live for the whole program; the buffers of one phase (attention, dense
MLP, MoE, output) are dead outside it, so the phases share one region (a union) placed after the
resident ones. For ``T`` tokens, hidden size ``H``, ``heads``/``kv`` heads of ``d`` elements,
intermediate size ``I``, ``E`` experts and top-``k``:

=========  ====================  =====================================================
buffer     words                 holds
=========  ====================  =====================================================
zero       1                     +0.0 (written by the program: the ``c`` of the first MoE fma)
ids        T                     token ids (written by the host)
h          T * H                 the residual stream
x          T * H                 RMSNorm outputs (GEMM inputs)
gain       H                     the current RMSNorm gain (LOADed before each norm)
rope       T * 2d                cos and sin rows of the T positions (LOADed once)
q, attn    T * heads * d         queries (RoPE in place), attention outputs
k, v       T * kv * d            new keys (RoPE in place) and values, before KVAPPEND
o          T * H                 o_proj output
g, u, y    T * I, T * I, T * H   dense MLP: gate (then swiglu), up, down
rl, tk, w  T * E, T * 2k, T * k  MoE: router logits, top-k values|indices, routing weights
eg, eu     I, I                  MoE: one token's expert gate (then swiglu) and up
ey, acc    T * k * H, T * H      MoE: expert outputs per (token, slot), the weighted sum
logits     R * vocab             the output rows (R = 1, the last token, or T)
=========  ====================  =====================================================
"""

from dataclasses import dataclass, field

from poblano.compiler.errors import CompileError

__all__ = ["ALIGN", "ScratchpadPlan", "plan_scratchpad"]

ALIGN = 8


def _align(words: int) -> int:
    return -(-words // ALIGN) * ALIGN


@dataclass
class ScratchpadPlan:
    """Buffer name -> ``(address, words)``; ``words`` is the highest address used plus one."""
    buffers: dict = field(default_factory=dict)
    words: int = 0

    def __getitem__(self, name: str) -> int:
        return self.buffers[name][0]

    def symbols(self) -> dict:
        """The assembler's symbol table: ``"s:NAME" -> (address, words)``."""
        return {f"s:{name}": place for name, place in self.buffers.items()}


def plan_scratchpad(config, tokens: int, logits_rows: int, spad_words: int) -> ScratchpadPlan:
    """Place the buffers of a ``tokens``-token forward pass; :class:`CompileError` if they exceed
    ``spad_words``."""
    c, t = config, tokens
    hidden, d = c.hidden_size, c.head_dim
    plan = ScratchpadPlan()
    top = 0

    def place(name, words, at):
        plan.buffers[name] = (at, words)
        return at + _align(words)

    for name, words in (("zero", 1), ("ids", t), ("h", t * hidden), ("x", t * hidden),
                        ("gain", hidden), ("rope", t * 2 * d)):
        top = place(name, words, top)
    attention = (("q", t * c.num_attention_heads * d), ("k", t * c.num_key_value_heads * d),
                 ("v", t * c.num_key_value_heads * d), ("attn", t * c.num_attention_heads * d),
                 ("o", t * hidden))
    if c.is_moe:
        e, k, inter = c.num_local_experts, c.num_experts_per_tok, c.intermediate_size
        mlp = (("rl", t * e), ("tk", t * 2 * k), ("w", t * k), ("eg", inter), ("eu", inter),
               ("ey", t * k * hidden), ("acc", t * hidden))
    else:
        mlp = (("g", t * c.intermediate_size), ("u", t * c.intermediate_size), ("y", t * hidden))
    output = (("logits", logits_rows * c.vocab_size),)
    end = top
    for phase in (attention, mlp, output):
        at = top
        for name, words in phase:
            at = place(name, words, at)
        end = max(end, at)
    plan.words = end
    if end > spad_words:
        raise CompileError(f"a forward pass of {tokens} tokens needs {end:,} scratchpad words, the "
                           f"tile has {spad_words:,}")
    return plan
