"""Layout of MX weights in the tile's weight memory: the order the MAC array's B stream consumes.

A weight of ``K`` inputs and ``N`` outputs (the GEMM's B operand: codes ``(K, N)``, E8M0 scales
``(K / 32, N)``, as :class:`sim_models.transformer.MXLinear` holds it) is stored as MX blocks of 32
elements along ``K``. One block is ``4 * bits`` bytes of element codes followed by one scale byte
(``bits`` = 4, 6 or 8 by the element format: 17, 25 or 33 bytes); code ``i`` of the block occupies
bits ``i * bits .. i * bits + bits - 1`` of the code bytes read as one little-endian integer (so E2M1
holds element ``2j`` in the low nibble of byte ``j`` and element ``2j + 1`` in its high nibble).

Blocks are ordered per N-tile of ``tile_cols = cols * interleave`` output columns (the MAC array's
tile), then per k-block, then per column of the tile: exactly the sequence of B beats (``(k, s)``
beats of ``cols`` blocks, tile column ``s * cols + c``). The last N-tile holds only the remaining
``N mod tile_cols`` columns (no padding in memory; the weight port feeds zero blocks for the absent
columns, whose outputs are discarded). The tensor occupies ``(K / 32) * N * block_bytes`` bytes.
"""

import numpy as np

from sim_models import mx

__all__ = ["BLOCK", "element_bits", "block_bytes", "mx_bytes", "pack_mx", "unpack_mx"]

BLOCK = mx.BLOCK_SIZE


def element_bits(fmt: str) -> int:
    """Bits of one element code of MX format ``fmt``."""
    return mx.element_format(fmt).bits


def block_bytes(fmt: str) -> int:
    """Bytes of one stored block: the packed codes and the scale."""
    return BLOCK * element_bits(fmt) // 8 + 1


def mx_bytes(k: int, n: int, fmt: str) -> int:
    """Bytes of a ``(K, N)`` weight in format ``fmt``."""
    return (k // BLOCK) * n * block_bytes(fmt)


def _tiles(n: int, tile_cols: int):
    return [(n0, min(tile_cols, n - n0)) for n0 in range(0, n, tile_cols)]


def pack_mx(codes: np.ndarray, scales: np.ndarray, fmt: str, tile_cols: int) -> np.ndarray:
    """The ``uint8`` bytes of a weight given as B-operand ``codes (K, N)`` and ``scales (K/32, N)``."""
    k, n = codes.shape
    bits = element_bits(fmt)
    blocks = codes.reshape(k // BLOCK, BLOCK, n).transpose(0, 2, 1).astype(np.uint8)   # (kb, n, 32)
    planes = (blocks[..., None] >> np.arange(bits, dtype=np.uint8)) & 1                 # (kb, n, 32, b)
    packed = np.packbits(planes.reshape(k // BLOCK, n, BLOCK * bits), axis=-1, bitorder="little")
    stored = np.concatenate([packed, scales.astype(np.uint8)[..., None]], axis=-1)     # (kb, n, bb)
    return np.concatenate([stored[:, n0:n0 + w].ravel() for n0, w in _tiles(n, tile_cols)])


def unpack_mx(data: np.ndarray, k: int, n: int, fmt: str, tile_cols: int):
    """Inverse of :func:`pack_mx`: ``(codes (K, N), scales (K/32, N))`` from ``mx_bytes`` bytes."""
    bits = element_bits(fmt)
    bb = block_bytes(fmt)
    kb = k // BLOCK
    data = np.asarray(data, dtype=np.uint8)
    stored = np.empty((kb, n, bb), dtype=np.uint8)
    offset = 0
    for n0, w in _tiles(n, tile_cols):
        size = kb * w * bb
        stored[:, n0:n0 + w] = data[offset:offset + size].reshape(kb, w, bb)
        offset += size
    planes = np.unpackbits(stored[..., :bb - 1], axis=-1, bitorder="little")
    planes = planes.reshape(kb, n, BLOCK, bits)
    blocks = (planes << np.arange(bits, dtype=np.uint8)).sum(axis=-1, dtype=np.uint8)  # (kb, n, 32)
    codes = np.ascontiguousarray(blocks.transpose(0, 2, 1).reshape(k, n))
    return codes, np.ascontiguousarray(stored[..., bb - 1])
