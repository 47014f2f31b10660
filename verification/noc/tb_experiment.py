"""cocotb traffic experiment on a mesh for ``poblano noc`` (settings in ``POBLANO_NOC_EXPERIMENT``).

Every node creates packets of ``packet_flits`` flits by a Bernoulli process with probability
``rate / packet_flits`` per cycle (so ``rate`` offered flits per node per cycle) for ``warmup +
cycles`` cycles; packets created in the last ``cycles`` are measured. Latency runs from creation
(source queueing counts) to the delivery of the tail. Every packet is checked by the reference model
(lost, duplicated, corrupted, reordered counted, not raised). Results go to ``POBLANO_NOC_RESULT``.
"""

import json
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from sim_models.noc import destination
from verification import config
from verification.bench import start_clock_and_reset
from verification.noc.env import MeshEnv, drain, params_from_config


@cocotb.test()
async def experiment(dut):
    cfg = config()
    exp = json.loads(os.environ["POBLANO_NOC_EXPERIMENT"])
    p = params_from_config(cfg)
    kx, ky = cfg["kx"], cfg["ky"]
    for y in range(ky):
        for x in range(kx):
            for c in range(p.classes):
                getattr(dut, f"tx_{x}_{y}__{c}__valid").value = 0
    await start_clock_and_reset(dut)
    rng = random.Random(exp["seed"])
    env = MeshEnv(dut, p, kx, ky, rng=rng)
    env.model.strict = False
    F, warm, n = exp["packet_flits"], exp["warmup"], exp["cycles"]
    prob = exp["rate"] / F
    start = env.cycles.now
    measured = set()
    for t in range(warm + n):
        await RisingEdge(dut.clk)
        for y in range(ky):
            for x in range(kx):
                if rng.random() < prob:
                    dst = destination(exp["traffic"], (x, y), kx, ky, rng, hotspot=(kx - 1, 0))
                    seq = env.send((x, y), dst, rng.randrange(p.classes), F)
                    if seq is not None and t >= warm:
                        measured.add(seq)
    end = env.cycles.now
    await drain(dut.clk, lambda: env.model.counts.delivered,
                lambda: env.model.outstanding() == 0 and not any(len(d) for d in env.drivers.values()),
                max_idle=5000, what="experiment delivery")
    counts = env.model.finish()
    lat = np.array([env.done_at[s] - env.created[s] for s in measured if s in env.done_at], dtype=float)
    window = (start + warm, end)
    per_node = {}
    for s, t in env.done_at.items():
        if window[0] <= t < window[1]:
            d = env.info[s][1]
            per_node[d] = per_node.get(d, 0) + env.info[s][2]
    nodes = kx * ky
    cycles = max(1, window[1] - window[0])
    accepted = [per_node.get((x, y), 0) / cycles for y in range(ky) for x in range(kx)]
    result = {
        "mesh": f"{kx}x{ky}", "traffic": exp["traffic"], "packet_flits": F, "cycles": n,
        "warmup": warm, "seed": exp["seed"],
        "offered": exp["rate"], "accepted": sum(accepted) / nodes,
        "accepted_min_node": min(accepted), "accepted_max_node": max(accepted),
        "latency_avg": float(lat.mean()) if lat.size else None,
        "latency_median": float(np.median(lat)) if lat.size else None,
        "latency_p99": float(np.percentile(lat, 99)) if lat.size else None,
        "packets_injected": counts.sent, "packets_delivered": counts.delivered,
        "lost": counts.lost, "duplicated": counts.duplicated, "corrupted": counts.corrupted,
        "reordered": counts.reordered + counts.misrouted,
    }
    with open(os.environ["POBLANO_NOC_RESULT"], "w") as fh:
        json.dump(result, fh)
