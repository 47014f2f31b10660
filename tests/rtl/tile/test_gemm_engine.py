"""GEMM engine (with a scratchpad and a model of the weight port) against the ISS: partial M- and
N-tiles, k of one and several blocks, special activations, overlapping operands, every GEMM fault in
order, bus errors, backpressure on the weight stream; the whole scratchpad and the status compared.

The bench is ``verification.tile.gemm_bench`` (the weight port modelled at its stream interface);
the quantizer and the MAC array are the RTL ones."""

from dataclasses import replace

import numpy as np
import pytest

from rtl.tile.gemm_engine import GemmEngine
from sim_models.tile_isa import FORMATS, STATUS, Instruction, TileConfig
from verification.tile.gemm_bench import gemm_command, random_gemm_case, run_gemm_engine
from verification.tile.sequencer_bench import STATUS_CODE, iss_run

SMALL = TileConfig(spad_words=1024, rows=2, cols=2, interleave=2, lanes=4)
MID = replace(SMALL, spad_words=448)            # less to load and read back
ODD = TileConfig(spad_words=320, rows=1, cols=3, interleave=2, lanes=2)    # 6-column tiles, 2 writes a row


def check(config, commands, image, spad, **kwargs):
    """The engine against ``TileIss`` running the same GEMMs: statuses and the whole scratchpad."""
    rtl = run_gemm_engine(config, commands, image, spad, **kwargs)
    program = [Instruction("GEMM", c) for c in commands] + [Instruction("HALT")]
    iss, status, pc, _ = iss_run(config, program, bytes(image), spad=dict(enumerate(spad)))
    expected = [0] * len(commands) if pc is None else [0] * pc + [status]
    if kwargs.get("bus_error_after") is None:
        assert rtl["status"] == expected, f"{[STATUS[s] for s in rtl['status']]} vs {expected}"
    diff = [a for a in range(config.spad_words) if rtl["spad"][a] != int(iss.spad[a])]
    assert not diff, (f"scratchpad words {diff[:8]} differ: RTL {[hex(rtl['spad'][a]) for a in diff[:4]]} "
                      f"ISS {[hex(int(iss.spad[a])) for a in diff[:4]]}")
    for addr, length in rtl["requests"]:
        assert addr % 4 == 0 and length % 4 == 0 and length > 0
    return rtl


def _requests(config, commands):
    """Weight requests the engine makes: one per GEMM whose N-tile fits the B buffer (the weight
    streamed once), else one per M-tile (its N-tiles follow one another in the image)."""
    def stationary(c):
        return c["k"] // 32 * config.interleave <= config.weight_buffer_beats
    return sum(1 if stationary(c) else -(-c["m"] // config.rows) for c in commands)


@pytest.mark.parametrize("buffer_beats", [1024, 4, 0])
def test_shapes_in_place_and_back_to_back(buffer_beats):
    """m not a multiple of rows, n not a multiple of the tile columns (partial last N-tile), k of
    one and three blocks, one after the other; then a GEMM whose destination is its source (the
    engine reads everything before it writes). With a B buffer every weight is streamed once
    (M-tiles replay it), with a smaller one the GEMMs of k = 96 re-stream it per M-tile, with none
    all do."""
    config = replace(SMALL, weight_buffer_beats=buffer_beats)
    shapes = [(1, 32, 4), (3, 64, 6), (2, 32, 3), (5, 96, 9), (4, 32, 1)]
    print("seed 1")
    image, spad, cmds = random_gemm_case(config, 1, shapes)
    cmds.append(dict(cmds[1], dst=cmds[1]["src"], n=5))
    rtl = check(config, cmds, image, spad, seed=1)
    assert len(rtl["requests"]) == _requests(config, cmds)


@pytest.mark.parametrize("buffer_beats, data_bytes", [(16, 32), (8, 32), (0, 32), (16, 8)])
def test_buffer_orders_and_port_widths(buffer_beats, data_bytes):
    """The three tile orders on GEMMs of 4 x 3 tiles (a partial M- and N-tile): every N-tile's
    weight in the B buffer at once (16 beats: M-tiles outer, all replaying after the first), one
    N-tile's (8: N-tiles outer), none (0: each M-tile re-streams); 32-byte weight beats (the
    unpacker takes two blocks a cycle, one where the partial N-tile ends) and 8-byte ones."""
    config = replace(SMALL, weight_buffer_beats=buffer_beats)
    print("seed 9")
    image, spad, cmds = random_gemm_case(config, 9, [(7, 64, 11), (3, 32, 2)])
    rtl = check(config, cmds, image, spad, seed=9, data_bytes=data_bytes, gaps=0.2)
    assert len(rtl["requests"]) == _requests(config, cmds)


def test_bus_error_leaves_nothing_behind():
    """A bus error in the middle of a GEMM whose A beats run ahead of its tiles: the beats of the
    tiles never started are dropped, so the next GEMM (the error cleared) computes what the ISS
    does. 32-byte beats, every N-tile's weight in the B buffer."""
    config = replace(SMALL, weight_buffer_beats=16)
    print("seed 13")
    image, spad, cmds = random_gemm_case(config, 13, [(7, 64, 11), (5, 64, 6)])
    rtl = run_gemm_engine(config, cmds, image, spad, seed=13, gaps=0.0, bus_error_after=4, data_bytes=32,
                     clear_error=True)
    assert rtl["status"] == [STATUS_CODE["bus_error"], STATUS_CODE["ok"]]
    iss, status, _, _ = iss_run(config, [Instruction("GEMM", cmds[1]), Instruction("HALT")], bytes(image),
                                spad=dict(enumerate(spad)))
    dst = range(cmds[1]["dst"], cmds[1]["dst"] + 5 * 6)
    assert [rtl["spad"][a] for a in dst] == [int(iss.spad[a]) for a in dst]


def test_specials_in_the_activations():
    print("seed 5")
    rng = np.random.default_rng(5)
    image, spad, cmds = random_gemm_case(MID, 5, [(4, 64, 5), (1, 32, 3)], specials=10, nan_scales=True)
    x = np.array(spad[0:4 * 64], dtype=np.uint32)
    x[0:32] = 0                                         # an all-zero block
    x[32:64] = rng.integers(1, 1 << 23, size=32)        # subnormals only
    x[64:96] = np.uint32(0x80000000)                    # negative zeros
    x[100] = 0x7F800000                                 # an infinity in a block
    x[200] = 0x7FC00000                                 # a NaN in another
    spad[0:4 * 64] = [int(v) for v in x]
    spad[cmds[1]["src"]:cmds[1]["src"] + 32] = [0x7F7FFFFF, 0xFF7FFFFF] + [0x00000001] * 30
    check(MID, cmds, image, spad, seed=5)


@pytest.mark.parametrize("data_bytes, buffer_beats", [(4, 1024), (8, 1024), (8, 0)])
def test_odd_tiles_and_beat_widths(data_bytes, buffer_beats):
    """Tiles of 6 columns (k/32 * 102 bytes: N-tiles start at unaligned bytes), 2 row-port writes
    per result row, 16 reads per block; weight beats of 4 and 8 bytes; the weight streamed once
    (M-tiles replay the B buffer) or once per M-tile (ODD has one row)."""
    config = replace(ODD, weight_buffer_beats=buffer_beats)
    print(f"seed {data_bytes}")
    image, spad, cmds = random_gemm_case(config, data_bytes, [(2, 64, 13), (3, 32, 7)])
    rtl = check(config, cmds, image, spad, seed=data_bytes, data_bytes=data_bytes)
    assert len(rtl["requests"]) == (2 if buffer_beats else 2 + 3)


def test_random_backpressure():
    """Random idle cycles on the weight stream (60 %): the unpacker and the MAC array wait."""
    print("seed 3")
    image, spad, cmds = random_gemm_case(MID, 3, [(3, 64, 7), (1, 32, 5)], specials=2)
    check(MID, cmds, image, spad, seed=3, gaps=0.6)


FAULT_TILE = replace(SMALL, spad_words=256)
_FAULTS = [
    (dict(m=0), "bad_field"),
    (dict(n=0), "bad_field"),
    (dict(k=0), "bad_field"),
    (dict(k=48), "bad_field"),
    (dict(af=5), "bad_field"),
    (dict(wf=7), "bad_field"),
    (dict(af=FORMATS.index("e4m3")), "bad_field"),               # not a format the array runs
    (dict(wf=FORMATS.index("e2m3")), "bad_field"),
    (dict(k=48, src=250), "bad_field"),                           # fields before ranges
    (dict(src=200), "spad_range"),                                # 200 + 64 > 256
    (dict(src=200, dst=250), "spad_range"),
    (dict(dst=250), "spad_range"),                                # 250 + 8 > 256
    (dict(dst=250, w=6), "spad_range"),                           # ranges before the weight
    (dict(w=6), "weight_range"),                                  # misaligned
    (dict(w=20), "weight_range"),                                 # 20 + 68 > the image
    ({}, "ok"),
]


def test_faults_in_order():
    """Every fault, answered at once without reading weights or touching the scratchpad; the
    engine takes the next command after each, and the last one computes what the ISS does."""
    image, spad, (cmd,) = random_gemm_case(FAULT_TILE, 3, [(2, 32, 4)])
    assert cmd["w"] + 68 <= len(image) < 20 + 68
    cmds = [cmd | fields for fields, _ in _FAULTS]
    rtl = run_gemm_engine(FAULT_TILE, cmds, image, spad, gaps=0.0)
    for command, (fields, status), got, cycles in zip(cmds, _FAULTS, rtl["status"], rtl["cycles"],
                                                      strict=True):
        _, iss_status, _, _ = iss_run(FAULT_TILE, [Instruction("GEMM", command), Instruction("HALT")], image)
        assert got == iss_status == STATUS_CODE[status], (fields, STATUS[got])
        assert cycles <= 4 or status == "ok", "faults are answered at once"
    assert len(rtl["requests"]) == 1, "only the last command reads weights"
    iss, _, _, _ = iss_run(FAULT_TILE, [Instruction("GEMM", cmd), Instruction("HALT")], image,
                           spad=dict(enumerate(spad)))
    assert rtl["spad"] == [int(x) for x in iss.spad]


def test_the_iss_refuses_formats_the_array_does_not_run():
    cmd = gemm_command(100, 0, 2, 32, 4, 8, af=FORMATS.index("e4m3"))
    program = [Instruction("GEMM", cmd), Instruction("HALT")]
    image = b"\0" * 128
    _, status, _, _ = iss_run(SMALL, program, image)
    assert status == STATUS_CODE["bad_field"]
    _, status, _, _ = iss_run(replace(SMALL, mac_formats=("e2m1", "e4m3")), program, image)
    assert status == STATUS_CODE["ok"]
    with pytest.raises(ValueError, match="E2M1 x E2M1 only"):
        GemmEngine(replace(SMALL, mac_formats=("e2m1", "e4m3")))


def test_bus_error():
    """An error response stops the engine at the next tile boundary with bus_error; it then takes
    the next command (which ends with bus_error too: the port's error is sticky). 16-byte beats."""
    image, spad, cmds = random_gemm_case(MID, 21, [(4, 32, 8), (1, 32, 4)])      # 2 x 2 tiles, then 1
    rtl = run_gemm_engine(MID, cmds, image, spad, seed=21, gaps=0.0, bus_error_after=3, data_bytes=16,
                     readback=False)
    assert rtl["status"] == [STATUS_CODE["bus_error"]] * 2
    assert len(rtl["requests"]) == 2, "no tile after the error"


def test_cycles():
    """The figures of the engine's docstring (weight data every cycle, 8-byte beats)."""
    image, _, cmds = random_gemm_case(MID, 1, [(3, 64, 6), (2, 96, 9)])
    got = run_gemm_engine(MID, cmds, image, [0] * MID.spad_words, gaps=0.0, readback=False)["cycles"]
    print(f"cycles {got}")
    assert got == [97, 113]


def test_default_tile_shape():
    """The default array (4 x 4, interleave 8: 32-column tiles) and 8 lanes: a partial M- and
    N-tile; the cycles of the docstring."""
    config = TileConfig(spad_words=384)
    print("seed 77")
    image, spad, cmds = random_gemm_case(config, 77, [(5, 32, 40)], specials=3)
    rtl = check(config, cmds, image, spad, seed=77, gaps=0.0)
    assert len(rtl["requests"]) == 1, "the weight streamed once: the second M-tile replays it"
    print(f"cycles {rtl['cycles']}")
    assert rtl["cycles"] == [197]
