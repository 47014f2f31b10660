"""TopK against sim_models.vpu.topk, in the Amaranth simulator: rows full of ties, NaN, infinities and
signed zeros, every k from 1 to max_k, partial last beats, rows back to back."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.vpu.topk import TopK, merge_cycles
from sim_models import vpu

SPECIALS = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0001, 0x7F80_0001,
            0x0000_0001, 0x8000_0001, 0x3F80_0000, 0xBF80_0000, 0x7F7F_FFFF, 0xFF7F_FFFF]


def random_row(rng, n):
    if rng.random() < 0.5:                           # ties: a few distinct values
        pool = rng.sample(SPECIALS, rng.randrange(1, 5)) + [rng.getrandbits(32) for _ in range(2)]
        return [rng.choice(pool) for _ in range(n)]
    return [rng.getrandbits(32) for _ in range(n)]


def expected_beats(row, k, lanes):
    values, indices = vpu.topk(np.array(row, np.uint32).view(np.float32), k)
    per = -(-k // lanes)
    beats = []
    for seq in (values.view(np.uint32), indices.astype(np.uint32)):
        padded = list(int(v) for v in seq) + [0] * (per * lanes - k)
        beats += [padded[b * lanes:(b + 1) * lanes] for b in range(per)]
    return beats


def run(rows, lanes, max_k):
    """Stream ``rows`` ((row, k) pairs) back to back, junk in the masked lanes; return the result beats
    of each row and the cycles from each row's last beat to its first result beat."""
    dut = TopK(lanes, max_k)
    got, gaps = [], []

    async def tb(ctx):
        rng = random.Random(7)
        for row, k in rows:
            ctx.set(dut.k, k)
            beats = -(-len(row) // lanes)
            for b in range(beats):
                chunk = row[b * lanes:(b + 1) * lanes]
                ctx.set(dut.data, chunk + [rng.getrandbits(32) for _ in range(lanes - len(chunk))])
                ctx.set(dut.mask, (1 << len(chunk)) - 1)
                ctx.set(dut.index0, b * lanes)
                ctx.set(dut.first, b == 0)
                ctx.set(dut.last, b == beats - 1)
                ctx.set(dut.valid, 1)
                await ctx.tick()
            ctx.set(dut.valid, 0)
            out, waited = [], 0
            while True:
                assert ctx.get(dut.busy), "not busy while merging or writing the result"
                if ctx.get(dut.out_valid):
                    out.append([ctx.get(dut.out_data[j]) for j in range(lanes)])
                    assert len(out) <= 2 * -(-k // lanes), "more result beats than 2 * ceil(k / lanes)"
                    if ctx.get(dut.out_last):
                        await ctx.tick()
                        break
                else:
                    waited += 1
                    assert waited < 2 * merge_cycles(lanes, max_k), "no result"
                await ctx.tick()
            assert not ctx.get(dut.busy), "busy after the row's last result beat"
            got.append(out)
            gaps.append(waited)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return got, gaps


@pytest.mark.parametrize("lanes,max_k", [(4, 8), (2, 3), (1, 8), (1, 5), (1, 1)])
def test_topk_matches_model(lanes, max_k):
    seed = 21 + lanes
    print(f"seed {seed}")
    rng = random.Random(seed)
    rows = []
    for _ in range(40):
        n = rng.choice([1, lanes, lanes + 1, rng.randrange(1, 12 * lanes)])
        rows.append((random_row(rng, n), rng.randrange(1, min(n, max_k) + 1)))
    rows.append(([0x7FC0_0000] * (3 * lanes), min(max_k, 3 * lanes)))     # all NaN: the first indices
    rows.append(([0x8000_0000, 0x0000_0000] * (2 * lanes), min(max_k, 4 * lanes)))   # +0 above -0
    rows.append((random_row(rng, 2 * max_k + lanes), max_k))                       # the largest k
    got, gaps = run(rows, lanes, max_k)
    for (row, k), out, gap in zip(rows, got, gaps, strict=True):
        want = expected_beats(row, k, lanes)
        assert out == want, f"seed {seed}: k={k} row={[hex(v) for v in row]}:\n got {out}\n want {want}"
        documented = merge_cycles(lanes, max_k)
        assert gap == documented, f"seed {seed}: merge took {gap} cycles, documented {documented}"
