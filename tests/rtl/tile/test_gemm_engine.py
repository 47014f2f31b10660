"""GEMM engine (with a scratchpad and a model of the weight port) against the ISS: partial M- and
N-tiles, k of one and several blocks, special activations, overlapping operands, every GEMM fault in
order, bus errors, backpressure on the weight stream; the whole scratchpad and the status compared.

The weight port is modelled at its stream interface (``verification.tile.sequencer_bench``); the
quantizer and the MAC array are the RTL ones."""

from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from rtl.tile.gemm_engine import GemmEngine
from rtl.tile.scratchpad import Scratchpad
from sim_models import tile_weights
from sim_models.tile_isa import FORMATS, STATUS, Instruction, TileConfig
from verification.tile.sequencer_bench import STATUS_CODE, Bench, host_access, iss_run, wait_for

SMALL = TileConfig(spad_words=1024, rows=2, cols=2, interleave=2, lanes=4)
MID = replace(SMALL, spad_words=448)            # less to load and read back
ODD = TileConfig(spad_words=320, rows=1, cols=3, interleave=2, lanes=2)    # 6-column tiles, 2 writes a row
SPECIALS = [0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0, 0x00000001, 0x807FFFFF,
            0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000]


class _Harness(Elaboratable):
    """The engine on a scratchpad's row port; the host window always served (the test only uses
    it while the engine is idle)."""

    def __init__(self, config, data_bytes):
        self.engine = GemmEngine(config, data_bytes=data_bytes)
        self.spad = Scratchpad(config.spad_words, config.lanes)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine, m.submodules.spad = self.engine, self.spad
        wiring.connect(m, self.engine.spad, self.spad.wide)
        m.d.comb += self.spad.host_enable.eq(1)
        return m


def _gemm(dst, src, m, k, n, w, af=0, wf=0):
    return dict(dst=dst, src=src, m=m, k=k, n=n, w=w, af=af, wf=wf)


def run_engine(config, commands, image, spad, *, data_bytes=8, seed=0, gaps=0.3, bus_error_after=None,
               readback=True):
    """Run ``commands`` (dicts of ``GemmCommand`` fields) one after the other on the engine, with
    the scratchpad loaded from ``spad`` (a list of words); returns the statuses, the cycles from
    command to status, the whole scratchpad read back (with ``readback``) and the weight requests."""
    dut = _Harness(config, data_bytes)
    engine = dut.engine
    bench = Bench(config, bytes(image), data_bytes=data_bytes, seed=seed, gaps=gaps,
                  bus_error_after=bus_error_after)
    out = {"status": [], "cycles": []}

    async def host(ctx):
        ctx.set(engine.weight_base, 0)
        ctx.set(engine.weight_size, len(image))
        for addr, value in enumerate(spad):
            if value:
                await host_access(ctx, dut.spad.host, addr, int(value))
        for command in commands:
            for name, value in command.items():
                ctx.set(getattr(engine.ctl.cmd.payload, name), value)
            ctx.set(engine.ctl.cmd.valid, 1)
            await wait_for(ctx, engine.ctl.cmd.ready)
            ctx.set(engine.ctl.cmd.valid, 0)
            ctx.set(engine.ctl.resp.ready, 1)
            cycles = 1
            while not ctx.get(engine.ctl.resp.valid):
                await ctx.tick()
                cycles += 1
                assert cycles < 200_000, "no status"
            out["status"].append(int(ctx.get(engine.ctl.resp.payload.status)))
            out["cycles"].append(cycles)
            await ctx.tick()
            ctx.set(engine.ctl.resp.ready, 0)
        assert ctx.get(engine.ctl.cmd.ready), "idle again"
        if readback:
            out["spad"] = [await host_access(ctx, dut.spad.host, a) for a in range(config.spad_words)]

    async def weight_memory(ctx):
        await bench.serve_weights(ctx, engine)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_testbench(weight_memory, background=True)
    sim.run()
    out["requests"] = bench.requests
    return out


def check(config, commands, image, spad, **kwargs):
    """The engine against ``TileIss`` running the same GEMMs: statuses and the whole scratchpad."""
    rtl = run_engine(config, commands, image, spad, **kwargs)
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


def _weight(rng, k, n, tile_cols, nan_scales=False):
    codes = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    scales = rng.integers(118, 136, size=(k // 32, n), dtype=np.uint8)
    if nan_scales:
        scales[0, rng.integers(n)] = 0xFF
    return tile_weights.pack_mx(codes, scales, "e2m1", tile_cols).tobytes()


def _activations(rng, count, specials=0):
    words = (rng.normal(size=count) * rng.choice([1e-3, 1.0, 50.0], size=count)).astype(np.float32)
    words = words.view(np.uint32).copy()
    for _ in range(specials):
        words[rng.integers(count)] = rng.choice(SPECIALS)
    return words


def _case(config, seed, shapes, *, specials=0, nan_scales=False, spad_words=None):
    """Image, scratchpad and commands of random GEMMs of ``shapes`` ``(m, k, n)``, one after the
    other on regions of their own: the scratchpad is random garbage everywhere (so a stray write
    shows), each weight at a 4-byte aligned offset after a few garbage bytes."""
    rng = np.random.default_rng(seed)
    words = config.spad_words if spad_words is None else spad_words
    spad = rng.integers(0, 1 << 32, size=words, dtype=np.uint64).astype(np.uint32)
    image, commands, at = b"", [], 0
    for m, k, n in shapes:
        image += bytes(rng.integers(0, 256, size=4 * int(rng.integers(1, 4)), dtype=np.uint8))
        commands.append(_gemm(at + m * k, at, m, k, n, len(image)))
        image += _weight(rng, k, n, config.tile_cols, nan_scales)
        image += bytes(rng.integers(0, 256, size=(-len(image)) % 4, dtype=np.uint8))
        spad[at:at + m * k] = _activations(rng, m * k, specials)
        at += m * k + m * n + int(rng.integers(0, 4))
    assert at <= words
    return image + b"\x5a" * 6, [int(x) for x in spad], commands


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
    image, spad, cmds = _case(config, 1, shapes)
    cmds.append(dict(cmds[1], dst=cmds[1]["src"], n=5))
    rtl = check(config, cmds, image, spad, seed=1)
    assert len(rtl["requests"]) == _requests(config, cmds)


def test_specials_in_the_activations():
    print("seed 5")
    rng = np.random.default_rng(5)
    image, spad, cmds = _case(MID, 5, [(4, 64, 5), (1, 32, 3)], specials=10, nan_scales=True)
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
    image, spad, cmds = _case(config, data_bytes, [(2, 64, 13), (3, 32, 7)])
    rtl = check(config, cmds, image, spad, seed=data_bytes, data_bytes=data_bytes)
    assert len(rtl["requests"]) == (2 if buffer_beats else 2 + 3)


def test_random_backpressure():
    """Random idle cycles on the weight stream (60 %): the unpacker and the MAC array wait."""
    print("seed 3")
    image, spad, cmds = _case(MID, 3, [(3, 64, 7), (1, 32, 5)], specials=2)
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
    image, spad, (cmd,) = _case(FAULT_TILE, 3, [(2, 32, 4)])
    assert cmd["w"] + 68 <= len(image) < 20 + 68
    cmds = [cmd | fields for fields, _ in _FAULTS]
    rtl = run_engine(FAULT_TILE, cmds, image, spad, gaps=0.0)
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
    cmd = _gemm(100, 0, 2, 32, 4, 8, af=FORMATS.index("e4m3"))
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
    image, spad, cmds = _case(MID, 21, [(4, 32, 8), (1, 32, 4)])      # 2 x 2 tiles, then 1
    rtl = run_engine(MID, cmds, image, spad, seed=21, gaps=0.0, bus_error_after=3, data_bytes=16,
                     readback=False)
    assert rtl["status"] == [STATUS_CODE["bus_error"]] * 2
    assert len(rtl["requests"]) == 2, "no tile after the error"


def test_cycles():
    """The figures of the engine's docstring (weight data every cycle, 8-byte beats)."""
    image, _, cmds = _case(MID, 1, [(3, 64, 6), (2, 96, 9)])
    got = run_engine(MID, cmds, image, [0] * MID.spad_words, gaps=0.0, readback=False)["cycles"]
    print(f"cycles {got}")
    assert got == [146, 159]


def test_default_tile_shape():
    """The default array (4 x 4, interleave 8: 32-column tiles) and 8 lanes: a partial M- and
    N-tile; the cycles of the docstring."""
    config = TileConfig(spad_words=384)
    print("seed 77")
    image, spad, cmds = _case(config, 77, [(5, 32, 40)], specials=3)
    rtl = check(config, cmds, image, spad, seed=77, gaps=0.0)
    assert len(rtl["requests"]) == 1, "the weight streamed once: the second M-tile replays it"
    print(f"cycles {rtl['cycles']}")
    assert rtl["cycles"] == [242]
