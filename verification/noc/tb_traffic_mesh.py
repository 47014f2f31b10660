"""cocotb tests of a :class:`rtl.noc.traffic_mesh.TrafficMesh`: generated traffic, checked in hardware.

* ``zero_load_histogram_exact``: packets far apart in time (a seed the model shows to give such
  traffic); the summed latency histogram must equal, bin for bin, the zero-load latencies
  :func:`sim_models.noc.zero_load_latency` predicts for the packets the model says are created (plus the
  cycle from creation to the ``tx`` stream).
* ``patterns_checked``: every traffic pattern at a high load with random ejection stalls; every node's
  packet count and signature must equal the model's, with no error counted or flagged.
"""

from collections import Counter

import cocotb

from sim_models.noc import PATTERNS, zero_load_latency
from sim_models.noc_traffic import TrafficConfig, generate
from verification import config
from verification.bench import start_clock_and_reset
from verification.noc.env import params_from_config
from verification.noc.traffic_run import run_traffic, summarize

#: Cycles from creation to the header on ``tx``, on top of the zero-load latency of the fabric.
CREATE_TO_TX = 1


def _isolated_config(kx, ky, classes, length):
    """A low-rate config whose packets (all nodes together) are created at least 4x the longest
    zero-load latency apart, found by trying seeds in order."""
    gap = 4 * zero_load_latency((0, 0), (kx - 1, ky - 1), length)
    for seed in range(1, 500):
        cfg = TrafficConfig.from_rate(length / (gap * 6 * kx * ky), length, seed=seed, warmup=100,
                                      measure=3000)
        packets = sorted((p.t, p) for y in range(ky) for x in range(kx)
                         for p in generate(cfg, (x, y), kx, ky, classes))
        times = [t for t, _ in packets]
        if len(times) >= 5 and all(b - a >= gap for a, b in zip(times, times[1:], strict=False)):
            return cfg, [p for _, p in packets]
    raise AssertionError("no seed gives isolated packets")


@cocotb.test()
async def zero_load_histogram_exact(dut):
    cfg_json = config()
    p = params_from_config(cfg_json)
    kx, ky = cfg_json["kx"], cfg_json["ky"]
    await start_clock_and_reset(dut)
    cfg, packets = _isolated_config(kx, ky, p.classes, 4)
    cocotb.log.info("seed %d: %d isolated packets", cfg.seed, len(packets))
    raw = await run_traffic(dut, p, cfg, kx, ky)
    result = summarize(raw, cfg, kx, ky, p.classes)
    want = Counter(CREATE_TO_TX + zero_load_latency(pk.src, pk.dst, cfg.length)
                   for pk in packets if pk.measured)
    got = {b: n for b, n in enumerate(raw["hist"]) if n}
    assert got == dict(want), f"latency histogram {got}, model {dict(want)}"
    assert result["lost"] == result["duplicated"] == result["corrupted"] == result["reordered"] == 0, result
    assert result["packets_delivered"] == len(packets) and raw["error"] == 0


@cocotb.test()
async def patterns_checked(dut):
    cfg_json = config()
    p = params_from_config(cfg_json)
    kx, ky = cfg_json["kx"], cfg_json["ky"]
    await start_clock_and_reset(dut)
    seed = cocotb.RANDOM_SEED & 0xFFFF
    cocotb.log.info("traffic seed %d (from the test's seed)", seed)
    for k, pattern in enumerate(PATTERNS):
        if pattern == "transpose" and kx != ky:
            continue
        cfg = TrafficConfig.from_rate(0.7, 1 + k % 4, pattern=pattern, hot_x=kx - 1, hot_y=0,
                                      stall=20000, seed=seed + k, warmup=50, measure=600, hist_shift=k % 2)
        raw = await run_traffic(dut, p, cfg, kx, ky)
        result = summarize(raw, cfg, kx, ky, p.classes)
        cocotb.log.info("%s: %s", pattern, result)
        assert not raw["wedged"], f"{pattern}: the network stopped delivering"
        assert result["packets_delivered"] == result["packets_injected"] > 50, result
        bad = result["lost"] + result["duplicated"] + result["corrupted"] + result["reordered"]
        assert bad == 0, result
        assert raw["error"] == 0 and not result["histogram_clipped"], result
        assert result["accepted"] > 0.2, result
