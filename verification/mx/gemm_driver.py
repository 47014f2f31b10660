"""Drive a whole MXFP4 GEMM through a :class:`rtl.mx.mac_array.MacArray` under cocotb.

Used by the array's testbench, by ``poblano gemm`` (``verification.mx.gemm_job``) and by the
benchmark, so every caller feeds the hardware the same way: the streams of
:mod:`verification.mx.tiling`, through :mod:`verification.stream` drivers and a sink, with optional
random idle cycles on every input stream and random stalls on the output.

K chunks after the first start from the previous chunk's result; their C beats are queued as soon
as that result has arrived, so the C stream stays in tile order.
"""

import time
from dataclasses import dataclass

from cocotb.triggers import RisingEdge

from verification.bench import TransferSpan, wait_until
from verification.stream import StreamDriver, StreamSink

__all__ = ["GemmRun", "GemmHarness"]


@dataclass
class GemmRun:
    out_bits: object          # M x N uint32 result patterns
    cycles: int               # first operand accepted .. last result delivered, inclusive
    issue_cycles: int         # ideal: beats the array must issue
    wall_seconds: float
    total_cycles: int         # simulated cycles while the GEMM ran (for cycles per second)

    @property
    def utilization(self):
        return self.issue_cycles / self.cycles if self.cycles else 0.0


class GemmHarness:
    """Stream drivers and a sink on a :class:`MacArray`'s ports, for any number of GEMMs in turn."""

    def __init__(self, dut, *, idle_prob=0.0, stall_prob=0.0, rng=None):
        import random

        rng = rng or random.Random(0)
        sub = [random.Random(rng.getrandbits(32)) for _ in range(5)]
        self.dut = dut
        self.idle_prob, self.stall_prob = idle_prob, stall_prob
        self.cmd = StreamDriver(dut, "cmd", dut.clk, idle_prob=idle_prob, rng=sub[0])
        self.a = StreamDriver(dut, "a", dut.clk, idle_prob=idle_prob, rng=sub[1])
        self.b = StreamDriver(dut, "b", dut.clk, idle_prob=idle_prob, rng=sub[2])
        self.c = StreamDriver(dut, "c", dut.clk, idle_prob=idle_prob, rng=sub[3])
        self.results = []
        self.sink = StreamSink(dut, "o", dut.clk, stall_prob=stall_prob, rng=sub[4],
                               callback=self.results.append)
        self.clock = TransferSpan(dut, dut.clk, inputs=("a", "b"), output="o")

    async def run(self, plan, a_codes, a_scales, b_codes, b_scales, c_bits, *, max_cycles=None,
                  on_result=None):
        """Run ``plan``; return a :class:`GemmRun`.

        ``c_bits`` is the ``M x N`` uint32 initial C (zeros when the GEMM has none);
        ``on_result(tile, beats)`` is called with each finished tile's raw result beats.
        """
        import numpy as np

        slots = plan.interleave
        results = self.results
        results.clear()
        self.clock.restart()
        for beat in plan.commands():
            self.cmd.append(beat)
        for beat in plan.a_beats(a_codes, a_scales):
            self.a.append(beat)
        for beat in plan.b_beats(b_codes, b_scales):
            self.b.append(beat)

        out = np.zeros((plan.m, plan.n), dtype=np.uint32)
        partial = np.array(c_bits, dtype=np.uint32, copy=True)   # C of the next chunk
        tiles = plan.tiles
        next_c = 0            # next tile whose C beats are still to be queued
        done = 0              # tiles whose results have arrived

        def queue_c():
            nonlocal next_c
            while next_c < len(tiles):
                tile = tiles[next_c]
                if tile.has_c and tile.k_block > 0 and done < next_c:
                    return    # needs the previous chunk's result, which is not back yet
                if tile.has_c:
                    for beat in plan.c_beats_for(tile, partial):
                        self.c.append(beat)
                next_c += 1

        queue_c()
        start_wall = time.monotonic()
        start_cycle = self.clock.cycle
        # Watchdog: an idle input cycle can cost a full slot rotation, an output stall a cycle.
        slowdown = (1 + self.idle_prob * slots / (1 - self.idle_prob)) / (1 - self.stall_prob)
        budget = max_cycles or int(4 * slowdown * (plan.issue_cycles + 10 * slots * len(tiles)) + 500)
        while done < len(tiles):
            need = (done + 1) * slots
            await wait_until(self.dut.clk, lambda need=need: len(results) >= need, max_cycles=budget,
                             what=f"result beats of tile {done} of {len(tiles)}")
            tile = tiles[done]
            beats = results[done * slots:(done + 1) * slots]
            plan.scatter(tile, beats, out if tile.last_chunk else partial)
            if on_result is not None:
                on_result(tile, beats)
            done += 1
            queue_c()
        wall = time.monotonic() - start_wall
        cycles = self.clock.cycles
        total = self.clock.cycle - start_cycle
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        for driver in (self.cmd, self.a, self.b, self.c):
            assert len(driver) == 0, f"stream {driver.name}: {len(driver)} beats never taken"
        assert len(results) == len(tiles) * slots, "the array produced more result beats than expected"
        return GemmRun(out, cycles, plan.issue_cycles, wall, total)
