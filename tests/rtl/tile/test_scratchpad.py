"""Scratchpad: the row port's rotation, masks and wrap at the end, the word port, against a list of
words (a power-of-two bank depth and others)."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.tile.scratchpad import Scratchpad


@pytest.mark.parametrize(("words", "lanes"), [(64, 8), (48, 4), (16, 2)])
def test_rows_and_words_from_any_address(words, lanes):
    rng = random.Random(words * lanes)
    print(f"seed {words * lanes}")
    dut = Scratchpad(words, lanes)
    model = [0] * words

    async def tb(ctx):
        for _ in range(300):
            kind = rng.choice(["row_write", "row_read", "word_write", "word_read"])
            if kind == "row_write":
                addr = rng.randrange(words - lanes + 1)
                mask = rng.getrandbits(lanes)
                data = [rng.getrandbits(32) for _ in range(lanes)]
                ctx.set(dut.wide.wr_addr, addr)
                ctx.set(dut.wide.wr_mask, mask)
                for j, d in enumerate(data):
                    ctx.set(dut.wide.wr_data[j], d)
                ctx.set(dut.wide.wr_en, 1)
                await ctx.tick()
                ctx.set(dut.wide.wr_en, 0)
                for j in range(lanes):
                    if mask >> j & 1:
                        model[addr + j] = data[j]
            elif kind == "row_read":                   # near the end: wraps to the first words
                addr = rng.randrange(words)
                ctx.set(dut.wide.rd_addr, addr)
                ctx.set(dut.wide.rd_en, 1)
                await ctx.tick()
                ctx.set(dut.wide.rd_en, 0)
                await ctx.tick()                       # held while rd_en is low
                got = [ctx.get(dut.wide.rd_data[j]) for j in range(lanes)]
                assert got == [model[(addr + j) % words] for j in range(lanes)], (kind, addr)
            elif kind == "word_write":
                addr, value = rng.randrange(words), rng.getrandbits(32)
                ctx.set(dut.core.wr_addr, addr)
                ctx.set(dut.core.wr_data, value)
                ctx.set(dut.core.wr_en, 1)
                await ctx.tick()
                ctx.set(dut.core.wr_en, 0)
                model[addr] = value
            else:
                addr = rng.randrange(words)
                ctx.set(dut.core.rd_addr, addr)
                ctx.set(dut.core.rd_en, 1)
                await ctx.tick()
                ctx.set(dut.core.rd_en, 0)
                assert ctx.get(dut.core.rd_data) == model[addr], (kind, addr)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_bad_parameters():
    with pytest.raises(ValueError, match="dividing words"):
        Scratchpad(60, 8)
    with pytest.raises(ValueError, match="dividing words"):
        Scratchpad(60, 6)
