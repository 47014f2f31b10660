"""DotProduct against sim_models.mx.block_dot_quarters, in the Amaranth simulator, for each mapping.

Every one of the 256 code pairs appears at an element of every kind (LUT table, packed multiplier
pair, block-RAM table), with random codes elsewhere; plus extreme blocks and the scale exponent and
NaN flag.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from rtl.mx.dot_product import DotProduct, ProductMapping, condition_operand
from rtl.mx.layouts import MXBlock, ScaledDot
from sim_models import mx
from verification.packing import pack

MAPPINGS = [ProductMapping(), ProductMapping(9, 7), ProductMapping(16, 0), ProductMapping(0, 16),
            ProductMapping(3, 0)]


class _Conditioned(wiring.Component):
    """DotProduct behind the operand conditioning the array's edge does."""

    def __init__(self, mapping):
        self._mapping = mapping
        super().__init__({"a": In(MXBlock), "b": In(MXBlock), "en": In(1, init=1), "term": Out(ScaledDot)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dot = dot = DotProduct(self._mapping)
        m.d.comb += [
            dot.a.eq(condition_operand(m, self.a, self._mapping, "a", "a_op")),
            dot.b.eq(condition_operand(m, self.b, self._mapping, "b", "b_op")),
            dot.en.eq(self.en),
            self.term.eq(dot.term),
        ]
        return m


def _vectors(seed):
    rng = random.Random(seed)
    vectors = []
    for pair in range(256):                     # code pair `pair` at element pair % 32, then others
        for offset in (0, 13):
            a = [rng.randrange(16) for _ in range(32)]
            b = [rng.randrange(16) for _ in range(32)]
            i = (pair + offset) % 32
            a[i], b[i] = pair & 15, pair >> 4
            vectors.append((a, rng.choice([0, 1, 127, 254, 255]), b, rng.choice([0, 127, 200, 254])))
    vectors.append(([7] * 32, 127, [7] * 32, 127))         # +4608
    vectors.append(([15] * 32, 127, [7] * 32, 127))        # -4608
    vectors.append(([0] * 32, 0, [8] * 32, 0))             # zero, smallest exponent
    vectors.append(([1] * 32, 254, [9] * 32, 254))         # largest exponent
    return vectors


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda m: f"dsp{m.dsp_pairs}-rom{m.rom_pairs}")
def test_dot_product_matches_golden(mapping):
    dut = _Conditioned(mapping)
    vectors = _vectors(mapping.dsp_pairs * 31 + mapping.rom_pairs)
    latency = DotProduct.latency_for(mapping)
    got = []

    async def tb(ctx):
        for n in range(len(vectors) + latency):
            if n < len(vectors):
                a, sa, b, sb = vectors[n]
                ctx.set(dut.a.as_value(), pack(MXBlock, {"codes": a, "scale": sa}))
                ctx.set(dut.b.as_value(), pack(MXBlock, {"codes": b, "scale": sb}))
            await ctx.tick()
            if n + 1 >= latency:
                got.append((ctx.get(dut.term.dot), ctx.get(dut.term.exp), ctx.get(dut.term.nan)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for (a, sa, b, sb), (dot, exp, nan) in zip(vectors, got, strict=False):
        want = mx.block_dot_quarters(np.array(a), np.array(b))
        assert dot == want, f"a={a} b={b}: dot {dot}, expected {want}"
        assert nan == int(sa == 0xFF or sb == 0xFF)
        if not nan:
            assert exp == sa + sb - 254


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda m: f"dsp{m.dsp_pairs}-rom{m.rom_pairs}")
def test_clock_enable_holds_the_pipeline(mapping):
    """With ``en`` low on random cycles the whole pipeline holds, the product RAMs' read ports
    included: an input is taken only in an enabled cycle, whatever the inputs do in between, and
    each term leaves ``latency`` enabled cycles after its input. (A block-RAM port left enabled,
    ``port.en.eq(self.en)`` dropped, reads the inputs of a held cycle into the pipeline.)"""
    seed = 50 + mapping.dsp_pairs * 31 + mapping.rom_pairs
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = _Conditioned(mapping)
    latency = DotProduct.latency_for(mapping)
    count = 200
    vectors = [([rng.randrange(16) for _ in range(32)], rng.choice([0, 127, 200, 255]),
                [rng.randrange(16) for _ in range(32)], rng.choice([1, 127, 254])) for _ in range(count)]
    got = []

    async def tb(ctx):
        issued, ages = 0, []
        while len(got) < count:
            en = int(rng.random() < 0.6)
            if en and issued < count:
                a, sa, b, sb = vectors[issued]
            else:                                   # a held cycle: the inputs change anyway
                a, b = [rng.randrange(16) for _ in range(32)], [rng.randrange(16) for _ in range(32)]
                sa, sb = rng.randrange(256), rng.randrange(256)
            ctx.set(dut.a.as_value(), pack(MXBlock, {"codes": a, "scale": sa}))
            ctx.set(dut.b.as_value(), pack(MXBlock, {"codes": b, "scale": sb}))
            ctx.set(dut.en, en)
            await ctx.tick()
            if en:
                ages = [age + 1 for age in ages]
                if issued < count:
                    ages.append(1)
                    issued += 1
                if ages and ages[0] == latency:
                    ages.pop(0)
                    got.append((ctx.get(dut.term.dot), ctx.get(dut.term.exp), ctx.get(dut.term.nan)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for (a, sa, b, sb), (dot, exp, nan) in zip(vectors, got, strict=True):
        assert dot == mx.block_dot_quarters(np.array(a), np.array(b)), f"seed {seed}: a={a} b={b}"
        assert nan == int(sa == 0xFF or sb == 0xFF)
        if not nan:
            assert exp == sa + sb - 254
