"""cocotb traffic experiment on a :class:`rtl.noc.traffic_mesh.TrafficMesh` for ``poblano noc``.

Settings come in ``POBLANO_NOC_EXPERIMENT`` (as for ``tb_experiment``; ``rate`` in flits per node per
cycle becomes the generators' packet probability, rounded to 1/65536); the result, or ``{"error":
...}`` when the run cannot be measured, goes to ``POBLANO_NOC_RESULT``.

``POBLANO_NOC_EXPERIMENT`` may also hold a list of settings (a rate sweep): they run one after the
other in the same simulation, with a reset between them, and the result is the list of results,
ending at the first that cannot be measured (higher rates would not be either).
"""

import json
import os

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from sim_models.noc_traffic import TrafficConfig
from verification import config
from verification.bench import start_clock_and_reset
from verification.noc.env import params_from_config
from verification.noc.traffic_run import TrafficRunError, run_traffic, summarize


@cocotb.test()
async def experiment(dut):
    cfg_json = config()
    settings = json.loads(os.environ["POBLANO_NOC_EXPERIMENT"])
    batch = isinstance(settings, list)
    p = params_from_config(cfg_json)
    kx, ky = cfg_json["kx"], cfg_json["ky"]
    await start_clock_and_reset(dut)
    results = []
    for exp in settings if batch else [settings]:
        cfg = TrafficConfig.from_rate(exp["rate"], exp["packet_flits"], pattern=exp["traffic"],
                                      hot_x=kx - 1, hot_y=0, stall=round(exp.get("stall", 0.0) * 65536),
                                      seed=exp["seed"], warmup=exp["warmup"], measure=exp["cycles"])
        if results:
            dut.rst.value = 1
            await ClockCycles(dut.clk, 2)
            dut.rst.value = 0
            await RisingEdge(dut.clk)
        raw = await run_traffic(dut, p, cfg, kx, ky)
        try:
            result = summarize(raw, cfg, kx, ky, p.classes)
            result["vcs"] = p.vcs
        except TrafficRunError as exc:
            result = {"error": str(exc), "offered": cfg.offered}
        results.append(result)
        cocotb.log.info("rate %.3f: %s", cfg.offered, result.get("error") or
                        f"accepted {result['accepted']:.3f}, latency {result['latency_avg']}")
        if "error" in result:
            break
    with open(os.environ["POBLANO_NOC_RESULT"], "w") as fh:
        json.dump(results if batch else results[0], fh)
