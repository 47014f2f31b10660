"""``rtl.common.xorshift`` against ``sim_models.noc_traffic``: the next-state function and the start
state, including the seed that cancels a node's key (the state must then be the key, not zero)."""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from rtl.common.xorshift import start_state, xorshift64_next
from sim_models.noc_traffic import MASK64, node_key, xorshift64

KEYS = [node_key(9, 0), node_key(4, 1), 0x8000_0000_0000_0001, 1]


def _evaluate(build, inputs):
    """``build(signal)`` (a 64-bit expression) for each of ``inputs``, through the simulator."""
    m = Module()
    x, y = Signal(64), Signal(64)
    m.d.comb += y.eq(build(x))
    out = []

    async def tb(ctx):
        for value in inputs:
            ctx.set(x, value)
            out.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    return out


def test_next_state_is_the_model_generator():
    rng = random.Random(11)
    states = [1, MASK64, 0x8000_0000_0000_0000] + [rng.getrandbits(64) | 1 for _ in range(200)]
    print("seed 11")
    assert _evaluate(xorshift64_next, states) == [xorshift64(s) for s in states]


@pytest.mark.parametrize("key", KEYS)
def test_start_state_is_the_model_start(key):
    """``mixed_seed ^ key``, or ``key`` where that is zero: ``mixed_seed == key`` (the state would be
    stuck at zero), one bit off it (state 1), and random seeds; keys with bit 63 set and clear."""
    rng = random.Random(key & 0xFFFF)
    seeds = [key, key ^ 1, key ^ (1 << 63), 0, MASK64] + [rng.getrandbits(64) for _ in range(50)]
    assert any(k >> 63 for k in KEYS) and any(not k >> 63 for k in KEYS)
    got = _evaluate(lambda seed: start_state(seed, key), seeds)
    assert got == [(seed ^ key) or key for seed in seeds]
    assert got[0] == key and got[1] == 1
