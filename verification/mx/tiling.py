"""GEMM tiling for :class:`rtl.mx.mac_array.MacArray`: operands to stream beats, result beats to C.

This module is the one statement of how an ``M x K`` by ``K x N`` MXFP4 GEMM maps onto the array's
streams; the cocotb testbench, ``poblano gemm``, ``poblano sim`` and the benchmark all use it.

* M is cut into tiles of ``rows`` rows and N into tiles of ``cols * interleave`` columns (output
  column ``s * cols + c`` of a tile belongs to processing-element column ``c``, slot ``s``); partial
  edge tiles are padded with code-0, scale-0 blocks, whose dot product is exactly 0 (they add +0)
  and whose outputs are dropped.
* K is cut into chunks of at most ``max_blocks`` blocks; every chunk after the first starts from the
  previous chunk's result (``has_c``), which is exactly the sequential accumulation of the contract.
* Tiles run in order: for each row tile, for each column tile, for each K chunk.

Every beat is an integer packed with :mod:`verification.packing` from the RTL's own layouts.
"""

from dataclasses import dataclass, field

import numpy as np

from rtl.mx.layouts import BLOCK_SIZE, TileCommand, a_beat, b_beat, c_beat, result_beat
from verification.packing import pack, unpack

__all__ = ["Tile", "TilePlan", "plan", "MAX_BLOCKS"]

MAX_BLOCKS = (1 << 16) - 1
"""Largest ``blocks`` of one tile command."""

_ZERO_BLOCK = {"codes": [0] * BLOCK_SIZE, "scale": 0}


@dataclass(frozen=True)
class Tile:
    row: int            # first output row
    col: int            # first output column
    k_block: int        # first block of K
    blocks: int         # blocks in this chunk
    has_c: bool         # start from a supplied C (the user's C or the previous K chunk)
    last_chunk: bool    # the final K chunk: its results are the GEMM output


@dataclass
class TilePlan:
    """Streams for one GEMM on a ``rows`` x ``cols`` array with ``interleave`` slots."""

    rows: int
    cols: int
    interleave: int
    m: int
    n: int
    k: int
    tiles: list = field(default_factory=list)

    @property
    def tile_cols(self):
        return self.cols * self.interleave

    @property
    def issue_cycles(self):
        """Beats the array issues: the ideal cycle count of this plan on the array."""
        return sum(t.blocks for t in self.tiles) * self.interleave

    @property
    def useful_macs(self):
        return self.m * self.n * self.k

    @property
    def peak_macs_per_cycle(self):
        return self.rows * self.cols * BLOCK_SIZE

    # ---- stream contents -----------------------------------------------------------------------
    def commands(self):
        return [pack(TileCommand, {"blocks": t.blocks, "has_c": int(t.has_c)}) for t in self.tiles]

    def a_beats(self, a_codes, a_scales):
        layout = a_beat(self.rows)
        beats = []
        for t in self.tiles:
            for kb in range(t.k_block, t.k_block + t.blocks):
                beats.append(pack(layout, [self._a_block(a_codes, a_scales, t.row + r, kb)
                                           for r in range(self.rows)]))
        return beats

    def b_beats(self, b_codes, b_scales):
        layout = b_beat(self.cols)
        beats = []
        for t in self.tiles:
            for kb in range(t.k_block, t.k_block + t.blocks):
                for s in range(self.interleave):
                    beats.append(pack(layout, [self._b_block(b_codes, b_scales, kb,
                                                             t.col + s * self.cols + c)
                                               for c in range(self.cols)]))
        return beats

    def c_beats_for(self, tile, c_bits):
        """C beats of one tile from a full ``M x N`` uint32 array (padding reads as +0)."""
        layout = c_beat(self.rows, self.cols)
        beats = []
        for s in range(self.interleave):
            rows = []
            for r in range(self.rows):
                i = tile.row + r
                row = []
                for c in range(self.cols):
                    j = tile.col + s * self.cols + c
                    row.append(int(c_bits[i, j]) if i < self.m and j < self.n else 0)
                rows.append(row)
            beats.append(pack(layout, rows))
        return beats

    def scatter(self, tile, result_beats, out_bits):
        """Write one tile's result beats (packed ints) into ``out_bits`` (``M x N`` uint32)."""
        layout = result_beat(self.rows, self.cols)
        if len(result_beats) != self.interleave:
            raise ValueError(f"tile at ({tile.row}, {tile.col}) has {len(result_beats)} result beats, "
                             f"expected {self.interleave}")
        for s, raw in enumerate(result_beats):
            beat = unpack(layout, raw)
            if beat["last"] != int(s == self.interleave - 1):
                raise ValueError(f"result beat {s} of tile ({tile.row}, {tile.col}) has last="
                                 f"{beat['last']}")
            for r in range(self.rows):
                for c in range(self.cols):
                    i, j = tile.row + r, tile.col + s * self.cols + c
                    if i < self.m and j < self.n:
                        out_bits[i, j] = beat["data"][r][c]

    def expected_beats(self, tile, out_bits):
        """The result beats of ``tile`` given its expected outputs (padding entries compare as-is)."""
        beats = []
        for s in range(self.interleave):
            rows = []
            for r in range(self.rows):
                row = []
                for c in range(self.cols):
                    i, j = tile.row + r, tile.col + s * self.cols + c
                    row.append(int(out_bits[i, j]) if i < self.m and j < self.n else None)
                rows.append(row)
            beats.append({"data": rows, "last": int(s == self.interleave - 1)})
        return beats

    # ---- helpers ---------------------------------------------------------------------------------
    def _a_block(self, codes, scales, i, kb):
        if i >= self.m:
            return _ZERO_BLOCK
        return {"codes": [int(x) for x in codes[i, kb * BLOCK_SIZE:(kb + 1) * BLOCK_SIZE]],
                "scale": int(scales[i, kb])}

    def _b_block(self, codes, scales, kb, j):
        if j >= self.n:
            return _ZERO_BLOCK
        return {"codes": [int(x) for x in codes[kb * BLOCK_SIZE:(kb + 1) * BLOCK_SIZE, j]],
                "scale": int(scales[kb, j])}


def plan(m, n, k, *, rows, cols, interleave, has_c=False, max_blocks=MAX_BLOCKS):
    """Tile an ``m x k`` by ``k x n`` GEMM; ``has_c``: the user supplies an initial C."""
    if k % BLOCK_SIZE or k <= 0:
        raise ValueError(f"K = {k} is not a positive multiple of {BLOCK_SIZE}")
    if not 1 <= max_blocks <= MAX_BLOCKS:
        raise ValueError(f"max_blocks must be in 1..{MAX_BLOCKS}")
    blocks = k // BLOCK_SIZE
    result = TilePlan(rows, cols, interleave, m, n, k)
    tile_cols = cols * interleave
    for row in range(0, m, rows):
        for col in range(0, n, tile_cols):
            for start in range(0, blocks, max_blocks):
                count = min(max_blocks, blocks - start)
                result.tiles.append(Tile(row, col, start, count, has_c or start > 0,
                                         start + count == blocks))
    return result


def as_bits(c, m, n):
    """A float32 ``c`` (broadcastable to ``m x n``) as a contiguous uint32 array; None gives zeros."""
    if c is None:
        return np.zeros((m, n), dtype=np.uint32)
    return np.ascontiguousarray(np.broadcast_to(np.asarray(c, dtype=np.float32), (m, n))).view(np.uint32)
