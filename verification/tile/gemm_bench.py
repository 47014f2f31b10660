"""Amaranth-simulator bench of the tile's GEMM engine (:class:`rtl.tile.gemm_engine.GemmEngine`) on a
scratchpad, with the weight port modelled at its stream interface (:class:`~verification.tile.
sequencer_bench.Bench`), and random GEMM cases laid out as a compiler would (each operand on
regions of its own, weights at 4-byte aligned offsets after a few garbage bytes).

Used by ``tests/rtl/tile/test_gemm_engine.py`` (against the ISS) and ``benchmarks/gemm_engine.py``
(cycles and MAC-array utilization).
"""

import numpy as np
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from rtl.tile.gemm_engine import GemmEngine
from rtl.tile.scratchpad import Scratchpad
from sim_models import tile_weights
from verification.tile.sequencer_bench import Bench, host_access, wait_for

__all__ = ["GemmHarness", "run_gemm_engine", "gemm_command", "random_weight", "random_activations",
           "random_gemm_case", "SPECIALS"]

SPECIALS = [0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0, 0x00000001, 0x807FFFFF,
            0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000]
"""binary32 patterns ``random_activations`` sprinkles in: NaNs, infinities, zeros, subnormals,
the largest finite values and 1.0."""


class GemmHarness(Elaboratable):
    """The engine on a scratchpad's row port; the host window always served (the bench only uses
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


def gemm_command(dst, src, m, k, n, w, af=0, wf=0):
    """The fields of one ``GemmCommand``, as a dict."""
    return dict(dst=dst, src=src, m=m, k=k, n=n, w=w, af=af, wf=wf)


def run_gemm_engine(config, commands, image, spad, *, data_bytes=8, seed=0, gaps=0.3, bus_error_after=None,
                    readback=True, clear_error=False, max_cycles=200_000):
    """Run ``commands`` (dicts of ``GemmCommand`` fields) one after the other on the engine, with
    the scratchpad loaded from ``spad`` (a list of words, zeros skipped); returns the statuses, the
    cycles from command to status, the whole scratchpad read back (with ``readback``) and the
    weight requests ``(addr, length)``. The weight port answers from ``image`` with idle cycles at
    random (probability ``gaps``, ``seed``) and an error response after ``bus_error_after`` beats;
    with ``clear_error`` the port's error is cleared after each command (as a new run of the tile
    does) and no further error is injected."""
    dut = GemmHarness(config, data_bytes)
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
                assert cycles < max_cycles, "no status"
            out["status"].append(int(ctx.get(engine.ctl.resp.payload.status)))
            out["cycles"].append(cycles)
            await ctx.tick()
            ctx.set(engine.ctl.resp.ready, 0)
            if clear_error:
                bench.bus_error_after = None
                ctx.set(engine.werror, 0)
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


def random_weight(rng, k, n, tile_cols, nan_scales=False):
    """The image bytes of a random E2M1 weight ``(k, n)`` (scales near 2**0; with ``nan_scales``
    one 0xFF scale)."""
    codes = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    scales = rng.integers(118, 136, size=(k // 32, n), dtype=np.uint8)
    if nan_scales:
        scales[0, rng.integers(n)] = 0xFF
    return tile_weights.pack_mx(codes, scales, "e2m1", tile_cols).tobytes()


def random_activations(rng, count, specials=0):
    """``count`` binary32 patterns of three magnitudes, ``specials`` of them from :data:`SPECIALS`."""
    words = (rng.normal(size=count) * rng.choice([1e-3, 1.0, 50.0], size=count)).astype(np.float32)
    words = words.view(np.uint32).copy()
    for _ in range(specials):
        words[rng.integers(count)] = rng.choice(SPECIALS)
    return words


def random_gemm_case(config, seed, shapes, *, specials=0, nan_scales=False, spad_words=None):
    """Image, scratchpad and commands of random GEMMs of ``shapes`` ``(m, k, n)``, one after the
    other on regions of their own: the scratchpad is random garbage everywhere (so a stray write
    shows), each weight at a 4-byte aligned offset after a few garbage bytes."""
    rng = np.random.default_rng(seed)
    words = config.spad_words if spad_words is None else spad_words
    spad = rng.integers(0, 1 << 32, size=words, dtype=np.uint64).astype(np.uint32)
    image, commands, at = b"", [], 0
    for m, k, n in shapes:
        image += bytes(rng.integers(0, 256, size=4 * int(rng.integers(1, 4)), dtype=np.uint8))
        commands.append(gemm_command(at + m * k, at, m, k, n, len(image)))
        image += random_weight(rng, k, n, config.tile_cols, nan_scales)
        image += bytes(rng.integers(0, 256, size=(-len(image)) % 4, dtype=np.uint8))
        spad[at:at + m * k] = random_activations(rng, m * k, specials)
        at += m * k + m * n + int(rng.integers(0, 4))
    if at > words:
        raise ValueError(f"the GEMMs need {at} scratchpad words, the tile has {words}")
    return image + b"\x5a" * 6, [int(x) for x in spad], commands
