"""cocotb testbench of :class:`rtl.noc.mesh.Mesh` against :mod:`sim_models.noc`.

* ``zero_load_latency``: one message at a time between every ordered pair of nodes (both classes,
  1 and 4 words); every latency equals :func:`sim_models.noc.zero_load_latency` exactly.
* ``traffic_<pattern>``: random messages (1, 2 or 4 words, random class) under uniform, transpose,
  bit-complement, hotspot and neighbor traffic with random ejection stalls and injection gaps;
  the reference model checks exactly-once delivery, payloads and per-flow order, and the watchdog
  fails a run that stops delivering.
* ``out_of_mesh``: messages addressed outside the mesh are dropped and counted at the source and do
  not disturb the traffic around them.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from sim_models.noc import zero_load_latency
from verification import config
from verification.bench import start_clock_and_reset
from verification.noc.env import MeshEnv, params_from_config


async def _env(dut, **kwargs):
    cfg = config()
    p = params_from_config(cfg)
    for y in range(cfg["ky"]):
        for x in range(cfg["kx"]):
            for c in range(p.classes):
                getattr(dut, f"tx_{x}_{y}__{c}__valid").value = 0
    await start_clock_and_reset(dut)
    rng = random.Random(random.getrandbits(32))
    return MeshEnv(dut, p, cfg["kx"], cfg["ky"], rng=rng, **kwargs), cfg


def _check_no_error(dut, env):
    assert int(dut.error.value) == 0, f"error flags {int(dut.error.value):#x}"


@cocotb.test()
async def zero_load_latency_every_pair(dut):
    env, cfg = await _env(dut)
    nodes = [(x, y) for y in range(env.ky) for x in range(env.kx)]
    checked = 0
    for length in (1, 4):
        for cls in range(env.p.classes):
            for s in nodes:
                for d in nodes:
                    seq = env.send(s, d, cls, length)
                    await env.finish(max_idle=200)
                    await ClockCycles(dut.clk, 3)
                    src, dst, n, got = env.latency[seq]
                    want = zero_load_latency(s, d, length)
                    assert got == want, f"{s}->{d} class {cls}, {length} words: {got} cycles, model {want}"
                    checked += 1
    _check_no_error(dut, env)
    dut._log.info("zero-load latency of %d (pair, class, length) cases equals the model", checked)


def _traffic_test(pattern):
    async def test(dut):
        cfg = config()
        env, cfg = await _env(dut, stall_prob=0.3, idle_prob=0.1)
        cycles = cfg.get("cycles", 800)
        rate = cfg.get("rate", 0.15)
        await env.traffic(pattern, rate=rate, cycles=cycles, hotspot=(env.kx - 1, 0))
        counts = await env.finish(max_idle=3000)
        _check_no_error(dut, env)
        assert counts.delivered > cycles * rate * env.kx * env.ky * 0.5
        dut._log.info("%s: %s", pattern, counts)
    test.__name__ = test.__qualname__ = f"traffic_{pattern}"
    return cocotb.test()(test)


traffic_uniform = _traffic_test("uniform")
traffic_transpose = _traffic_test("transpose")
traffic_bitcomp = _traffic_test("bitcomp")
traffic_hotspot = _traffic_test("hotspot")
traffic_neighbor = _traffic_test("neighbor")


@cocotb.test()
async def out_of_mesh(dut):
    env, cfg = await _env(dut, stall_prob=0.2)
    side = env.p.max_side
    bad = 0
    for k in range(60):
        src = (env.rng.randrange(env.kx), env.rng.randrange(env.ky))
        if k % 3 == 0 and (env.kx < side or env.ky < side):
            dst = (env.kx, 0) if env.kx < side else (0, env.ky)
            assert env.send(src, dst, env.rng.randrange(env.p.classes), env.rng.choice((1, 3))) is None
            bad += 1
        else:
            dst = (env.rng.randrange(env.kx), env.rng.randrange(env.ky))
            env.send(src, dst, env.rng.randrange(env.p.classes), env.rng.choice((1, 3)))
        await RisingEdge(dut.clk)
    await env.finish(max_idle=2000)
    dropped = sum(int(getattr(dut, f"dropped_{x}_{y}").value) for y in range(env.ky) for x in range(env.kx))
    assert dropped == bad == env.model.counts.dropped, (dropped, bad)
    flagged = int(dut.error.value)
    for y in range(env.ky):
        for x in range(env.kx):
            assert bool(flagged >> (y * env.kx + x) & 1) == bool(int(getattr(dut, f"dropped_{x}_{y}").value))
