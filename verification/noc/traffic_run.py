"""Run a :class:`rtl.noc.traffic_mesh.TrafficMesh` from cocotb and turn its counters into results.

The testbench only touches the top level (it works on a ``ports_only`` Verilator build): it writes
``config``, pulses ``start``, waits for ``done`` with a watchdog on the received-packet count, then
reads every node's status and the summed latency histogram. :func:`summarize` checks the counters
against :func:`sim_models.noc_traffic.expected_deliveries` (the generators' packets are known from the
seed) and computes the figures ``poblano noc`` reports.
"""

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from rtl.noc.layouts import traffic_config_layout
from rtl.noc.traffic_checker import traffic_status_layout
from sim_models.noc_traffic import HIST_BINS, expected_deliveries
from verification.packing import pack, unpack

__all__ = ["run_traffic", "summarize", "TrafficRunError"]


class TrafficRunError(AssertionError):
    """A run could not be measured (a source queue overflowed)."""


async def run_traffic(dut, params, cfg, kx, ky, *, max_idle=5000, poll=64):
    """Run one experiment on ``dut`` (reset, clock running); returns ``{"status": {...}, "hist": [...]}``.

    If no packet is received for ``max_idle`` cycles after creation ended while the run is not done
    (lost packets or a wedged network), the watchdog stops waiting and the result has ``"wedged":
    True``; :func:`summarize` then counts the missing packets as lost.
    """
    dut.config.value = pack(traffic_config_layout(params), cfg.as_fields())
    dut.hist_addr.value = 0
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    await ClockCycles(dut.clk, HIST_BINS + 1)
    layout = traffic_status_layout()
    nodes = [(x, y) for y in range(ky) for x in range(kx)]

    def received():
        return sum(unpack(layout, getattr(dut, f"status_{x}_{y}").value)["packets"] for x, y in nodes)

    last, idle, wedged = -1, 0, False
    while True:
        await ClockCycles(dut.clk, poll)
        await ReadOnly()
        if int(dut.done.value):
            break
        now = received()
        idle = 0 if now != last else idle + poll
        last = now
        if idle >= max_idle and int(dut.now.value) > cfg.warmup + cfg.measure:
            cocotb.log.error("watchdog: no packet received for %d cycles at run cycle %d; %d received",
                             idle, int(dut.now.value), now)
            wedged = True
            break
    status = {node: unpack(layout, getattr(dut, f"status_{node[0]}_{node[1]}").value) for node in nodes}
    errors = int(dut.error.value)
    cycles = int(dut.now.value)
    await RisingEdge(dut.clk)
    hist = []
    for a in range(HIST_BINS):
        dut.hist_addr.value = a
        await ReadOnly()
        hist.append(int(dut.hist_total.value))
        await RisingEdge(dut.clk)
    return {"status": status, "hist": hist, "error": errors, "cycles": cycles, "wedged": wedged}


def _percentile(hist, fraction, shift):
    total = sum(hist)
    if not total:
        return None
    need = fraction * total
    seen = 0
    for b, count in enumerate(hist):
        seen += count
        if seen >= need:
            return float(b << shift)
    return float((len(hist) - 1) << shift)


def summarize(raw, cfg, kx, ky, classes):
    """The result dict of an experiment (the keys of ``poblano noc --json``) from :func:`run_traffic`'s."""
    status = raw["status"]
    expected = expected_deliveries(cfg, kx, ky, classes)
    overflow = {node: s["overflow"] for node, s in status.items() if s["overflow"]}
    if overflow:
        node, count = next(iter(overflow.items()))
        raise TrafficRunError(f"source queue overflow at {len(overflow)} node(s), first {node} ({count} "
                              "packets refused): the offered load is far beyond saturation for this many "
                              "cycles; shorten the run or lower the rate")
    lost = mismatched = 0
    for node, s in status.items():
        want, signature = expected[node]
        lost += max(0, want - s["packets"])
        if s["packets"] == want and s["signature"] != signature:
            mismatched += 1
    measured = sum(s["measured"] for s in status.values())
    accepted = [status[(x, y)]["window_words"] / cfg.measure for y in range(ky) for x in range(kx)]
    hist = raw["hist"]
    clipped = hist[-1] > 0
    return {
        "mesh": f"{kx}x{ky}", "traffic": cfg.pattern, "packet_flits": cfg.length, "cycles": cfg.measure,
        "warmup": cfg.warmup, "seed": cfg.seed, "generator": "hardware",
        "offered": cfg.offered, "accepted": sum(accepted) / len(accepted),
        "accepted_min_node": min(accepted), "accepted_max_node": max(accepted),
        "latency_avg": sum(s["latency_sum"] for s in status.values()) / measured if measured else None,
        "latency_median": _percentile(hist, 0.5, cfg.hist_shift),
        "latency_p99": _percentile(hist, 0.99, cfg.hist_shift),
        "latency_max": max(s["latency_max"] for s in status.values()),
        "histogram_clipped": clipped,
        "packets_injected": sum(s["created"] for s in status.values()),
        "packets_delivered": sum(s["packets"] for s in status.values()),
        "lost": lost,
        "duplicated": sum(s["duplicated"] for s in status.values()),
        "corrupted": sum(s["corrupted"] for s in status.values()) + mismatched,
        "reordered": sum(s["reordered"] for s in status.values()),
        "error_flags": raw["error"], "wedged": raw["wedged"],
        "run_cycles": raw["cycles"],
    }
