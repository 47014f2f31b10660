"""The weight-memory image of a model: every constant the tile reads through its AXI4 read port.

Contents, in this order, each tensor starting on a :data:`ALIGN`-byte boundary (symbol names in
brackets):

* the embedding table, ``vocab x hidden`` binary32, row-major [``model.embed_tokens``];
* the RoPE table, ``max_context`` rows of ``[cos(head_dim) | sin(head_dim)]`` binary32, row ``p`` for
  position ``p`` (:func:`sim_models.vpu.rope_tables`, rounded once) [``rope``];
* per layer ``L`` (prefix ``model.layers.L.``): the ``input_layernorm`` gain (binary32), the MX weights
  ``self_attn.{q,k,v,o}_proj``, the ``post_attention_layernorm`` gain, then either ``mlp.{gate,up,
  down}_proj`` or the router ``block_sparse_moe.gate`` followed by every expert ``e``'s
  ``block_sparse_moe.experts.e.{w1,w3,w2}`` (all experts of a layer at one fixed stride, so an
  expert's weights are at ``experts.0.wX + e * stride``);
* the final norm gain [``model.norm``] and ``lm_head`` (the quantized embedding when tied).

MX weights are in the B-stream order of :mod:`sim_models.tile_weights` (per N-tile of
``cols * interleave`` columns, per 32-element k-block, per column: packed codes then the E8M0 scale).
"""

from dataclasses import dataclass

import numpy as np

from poblano.compiler.errors import CompileError
from sim_models import tile_weights, vpu
from sim_models.tile_isa import TileConfig

__all__ = ["ALIGN", "Symbol", "WeightImage", "build_weight_image"]

ALIGN = 64
"""Byte alignment of every tensor in the image (an AXI4 burst of a 512-bit port)."""


@dataclass(frozen=True)
class Symbol:
    """One tensor of the image: byte address and size; ``kind`` is ``"f32"`` or ``"mx"``.

    ``shape`` is the binary32 array's shape, or ``(K, N)`` of an MX weight (``fmt`` its format).
    """
    name: str
    addr: int
    nbytes: int
    kind: str
    shape: tuple
    fmt: str = ""


@dataclass
class WeightImage:
    """The bytes of the weight memory and the symbol table naming every tensor in it."""
    data: bytes
    symbols: dict
    max_context: int

    def addr(self, name: str) -> int:
        return self.symbols[name].addr

    def expert_stride(self, layer: int) -> int:
        """Bytes from one expert's weights to the next's in ``layer`` (0 for a single expert)."""
        p = f"model.layers.{layer}.block_sparse_moe.experts."
        if p + "1.w1" not in self.symbols:
            return 0
        return self.addr(p + "1.w1") - self.addr(p + "0.w1")


def _pad(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def build_weight_image(model, tile: TileConfig, max_context: int) -> WeightImage:
    """The image of a :class:`sim_models.transformer.Transformer` for ``tile``, RoPE rows for
    positions ``0 .. max_context - 1``. Raises :class:`CompileError` if it exceeds the weight memory."""
    c = model.config
    chunks, symbols = [], {}
    offset = 0

    def put(name, data, kind, shape, fmt=""):
        nonlocal offset
        start = _pad(offset)
        if start > offset:
            chunks.append(np.zeros(start - offset, dtype=np.uint8))
        raw = np.ascontiguousarray(data).view(np.uint8).ravel()
        chunks.append(raw)
        symbols[name] = Symbol(name, start, raw.size, kind, tuple(shape), fmt)
        offset = start + raw.size

    def f32(name, array):
        array = np.ascontiguousarray(array, dtype=np.float32)
        put(name, array.astype("<f4"), "f32", array.shape)

    def linear(name):
        layer = model.linears[name]
        k, n = layer.shape
        put(name, tile_weights.pack_mx(layer.codes, layer.scales, layer.weight_format, tile.tile_cols),
            "mx", (k, n), layer.weight_format)

    f32("model.embed_tokens", model.embed)
    cos, sin = vpu.rope_tables(np.arange(max_context), c.head_dim, c.rope_theta)
    f32("rope", np.concatenate([cos, sin], axis=1))
    for layer in range(c.num_hidden_layers):
        p = f"model.layers.{layer}."
        f32(p + "input_layernorm", model.norms[p + "input_layernorm.weight"])
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            linear(p + "self_attn." + proj)
        f32(p + "post_attention_layernorm", model.norms[p + "post_attention_layernorm.weight"])
        if c.is_moe:
            linear(p + "block_sparse_moe.gate")
            for e in range(c.num_local_experts):
                for w in ("w1", "w3", "w2"):
                    linear(f"{p}block_sparse_moe.experts.{e}.{w}")
        else:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                linear(p + "mlp." + proj)
    f32("model.norm", model.norms["model.norm.weight"])
    linear("lm_head")
    data = np.concatenate(chunks).tobytes()
    if len(data) > tile.weight_bytes:
        raise CompileError(f"the weight image takes {len(data):,} bytes, the tile's weight memory holds "
                           f"{tile.weight_bytes:,}")
    image = WeightImage(data, symbols, max_context)
    for layer in range(c.num_hidden_layers if c.is_moe else 0):
        stride = image.expert_stride(layer)
        p = f"model.layers.{layer}.block_sparse_moe.experts."
        for e in range(c.num_local_experts):
            for w in ("w1", "w3", "w2"):
                assert image.addr(f"{p}{e}.{w}") == image.addr(f"{p}0.{w}") + e * stride
    return image
