"""SECDED encoder and decoder (Amaranth simulator) against :class:`sim_models.ecc.SecdedCode`."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from rtl.kv.secded_decoder import SecdedDecoder
from rtl.kv.secded_encoder import SecdedEncoder
from sim_models.ecc import CORRECTED, UNCORRECTABLE, SecdedCode


def _run(dut, bench, clocked=False):
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _patterns(k, count, seed):
    rng = random.Random(seed)
    code = SecdedCode(k)
    for _ in range(count):
        data = rng.getrandbits(k)
        flips = rng.choice([0, 1, 1, 2, 2, 3])
        mask = 0
        for bit in rng.sample(range(code.width), flips):
            mask |= 1 << bit
        yield data, mask


@pytest.mark.parametrize("k", [1, 8, 16, 64])
def test_encoder_and_decoder_match_the_model(k):
    code = SecdedCode(k)
    m = Module()
    m.submodules.enc = enc = SecdedEncoder(k)
    m.submodules.dec = dec = SecdedDecoder(k)
    seed = 1000 + k
    print(f"seed {seed}")

    async def bench(ctx):
        for data, mask in _patterns(k, 300, seed):
            ctx.set(enc.data, data)
            word = ctx.get(enc.codeword)
            assert word == code.encode(data)
            ctx.set(dec.codeword, word ^ mask)
            want, status = code.decode(word ^ mask)
            assert ctx.get(dec.data) == want
            assert ctx.get(dec.corrected) == (status == CORRECTED)
            assert ctx.get(dec.uncorrectable) == (status == UNCORRECTABLE)

    _run(m, bench)


def test_every_single_and_double_error_of_a_byte():
    k = 8
    code = SecdedCode(k)
    dec = SecdedDecoder(k)

    async def bench(ctx):
        for data in (0x00, 0xA5, 0xFF):
            word = code.encode(data)
            for i in range(code.width):
                ctx.set(dec.codeword, word ^ (1 << i))
                assert (ctx.get(dec.data), ctx.get(dec.corrected), ctx.get(dec.uncorrectable)) == (data, 1, 0)
                for j in range(i + 1, code.width):
                    ctx.set(dec.codeword, word ^ (1 << i) ^ (1 << j))
                    assert ctx.get(dec.uncorrectable) and not ctx.get(dec.corrected)

    _run(dec, bench)


def test_registered_decoder_has_one_cycle_of_latency():
    k = 64
    code = SecdedCode(k)
    dec = SecdedDecoder(k, registered=True)
    words = [code.encode(0x0123456789ABCDEF) ^ 1 << 70, code.encode(42), code.encode(7) ^ 0b11]

    async def bench(ctx):
        seen = []
        for word in words + [0]:
            ctx.set(dec.codeword, word)
            await ctx.tick()
            seen.append((ctx.get(dec.data), ctx.get(dec.corrected), ctx.get(dec.uncorrectable)))
        assert seen[:3] == [(0x0123456789ABCDEF, 1, 0), (42, 0, 0), (7 ^ 0b11, 0, 1)]

    _run(dec, bench, clocked=True)
