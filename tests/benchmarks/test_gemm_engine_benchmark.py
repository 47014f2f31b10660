"""The GEMM-engine benchmark's measurement: its bounds are the right ones and hold.

The recorded run (``benchmarks/results/gemm_engine.md``) takes minutes; here one small GEMM on a
small tile, whose bounds are worked out by hand.
"""


from benchmarks import gemm_engine as bench
from sim_models.tile_isa import TileConfig


def test_bounds_of_a_small_gemm():
    config = TileConfig(spad_words=2048, rows=2, cols=2, interleave=2, lanes=4)
    row = bench.measure(config, "prefill", 6, 64, 9, data_bytes=8)
    # 3 M-tiles x 3 N-tiles (4 columns each) x 2 k-blocks x interleave 2
    assert row["mac_beats"] == 3 * 3 * 2 * 2
    # one request: the weight's 2 x 9 blocks of 17 bytes from an aligned address, rounded up to words
    assert 2 * 9 * 17 // 8 <= row["weight_cycles"] <= -(-(2 * 9 * 17 + 6) // 8)
    assert row["quantize_cycles"] == 6 * 64 // 4
    assert row["bound"] == max(row["mac_beats"], row["weight_cycles"], row["quantize_cycles"])
    assert row["bound"] < row["cycles"] < 4 * row["bound"]
    assert row["mac_utilization"] == row["mac_beats"] / row["cycles"]
