"""cocotb module behind ``benchmarks/kv_cache.py``: read bandwidth, command latencies, a long trace.

Every reply is checked against the golden model (:class:`verification.kv.env.KvEnv`), so the
figures are of a controller that is also right. Results go to ``POBLANO_KV_BENCH_OUT`` (JSON);
``POBLANO_KV_BENCH_TRACE`` sets the length of the long random trace (commands; 0 skips it).

Cycle conventions (the observer samples once per cycle, after the clock edge):

* latency: from the cycle a request is accepted (``valid & ready``) to the first cycle its reply
  (for reads, its first record) is valid;
* bandwidth: records delivered on ``rd_reply`` divided by the cycles from the first record of the
  first read to the last record of the last read, with ``rd_reply`` always ready.
"""

import json
import os

import cocotb

from sim_models.kv_cache import KvConfig
from verification import config
from verification.bench import numpy_rng
from verification.kv.env import reads_during_appends, start_env
from verification.kv.traffic import RandomTraffic

_RESULTS = {}


def _save():
    with open(os.environ["POBLANO_KV_BENCH_OUT"], "w") as f:
        json.dump(_RESULTS, f, indent=2)


async def _env(dut, **kwargs):
    return await start_env(dut, KvConfig(**config()), **kwargs)


async def _ok(env, op):
    reply = await env.run(op)
    assert reply["status"] == "ok", (op, reply)
    return reply


@cocotb.test()
async def read_bandwidth(dut):
    """Whole-sequence reads of one sequence back to back while three others are appended."""
    env = await _env(dut)
    c = env.config
    length = min(c.max_len, (c.pages // 4) * c.page_tokens)
    budget = min((min(c.seqs, 4) - 1) * c.max_len, (c.pages - c.pages // 4) * c.page_tokens)
    run = await reads_during_appends(env, length=length, reads=8, append_budget=budget)
    _RESULTS["bandwidth"] = {
        "reads": len(run.reads), "records": run.records, "cycles": run.cycles,
        "records_per_cycle": run.records_per_cycle,
        "appends_committed_meanwhile": run.appends_meanwhile,
        "append_rate": run.appends_meanwhile / run.cycles,
    }
    await env.finish()
    _save()


@cocotb.test()
async def command_latency(dut):
    """Latency of every operation and variant, one at a time, no stalls."""
    env = await _env(dut)
    c = env.config
    pt = c.page_tokens
    latency = {}

    async def measure(name, op):
        pending = env.submit(op)
        await env.drain()
        start = pending.accept_cycle
        end = pending.first_cycle if op["op"] == "read" else pending.reply_cycle
        latency[name] = end - start
        return pending.reply

    await measure("open", {"op": "open", "seq": 0})
    await measure("stat", {"op": "stat"})
    await measure("error reply (append, not_live)", {"op": "append", "seq": 5, "data": 0})
    await measure("append, first record of a page (allocate)", {"op": "append", "seq": 0, "data": 1})
    await measure("append, in place", {"op": "append", "seq": 0, "data": 2})
    for k in range(2 * pt - 2):
        await _ok(env, {"op": "append", "seq": 0, "data": k})
    # seq 0: two full pages.
    await measure("fork, 2 pages", {"op": "fork", "src": 0, "dst": 1})
    await measure("append, page boundary of a shared sequence", {"op": "append", "seq": 1, "data": 3})
    await _ok(env, {"op": "truncate", "seq": 1, "length": 2 * pt})
    await measure("truncate, 1 page released", {"op": "truncate", "seq": 1, "length": pt})
    await _ok(env, {"op": "close", "seq": 1})
    for f in sorted({pt - 1, pt // 2, 1}, reverse=True):     # truncate only shrinks
        await _ok(env, {"op": "truncate", "seq": 0, "length": pt + f})
        await _ok(env, {"op": "fork", "src": 0, "dst": 2})
        await measure(f"append, copy-on-write of {f} filled slots",
                      {"op": "append", "seq": 2, "data": 4})
        await _ok(env, {"op": "close", "seq": 2})
    await measure("inject", {"op": "inject", "seq": 0, "pos": 1, "bits": [3]})
    await measure("read, first record", {"op": "read", "seq": 0, "start": 0, "count": 4})
    await measure("read, error reply", {"op": "read", "seq": 0, "start": 0, "count": 10 * pt})
    await measure("close, 2 pages", {"op": "close", "seq": 0})
    _RESULTS["latency"] = latency
    await env.finish()
    _save()


@cocotb.test()
async def long_random_trace(dut):
    """A long random trace on both ports with random stalls, checked against the golden model."""
    commands = int(os.environ.get("POBLANO_KV_BENCH_TRACE", "0"))
    if not commands:
        return
    env = await _env(dut, cmd_idle=0.2, cmd_stall=0.3, rd_idle=0.2, rd_stall=0.3)
    traffic = RandomTraffic(env, numpy_rng(7), commands=commands, reads=commands // 3,
                            cmd_depth=3, read_depth=3)
    await traffic.run(max_cycles=20 * commands + 100_000)
    events = env.model.events
    _RESULTS["random_trace"] = {
        "seed": cocotb.RANDOM_SEED, "commands": len(env.commands_done), "reads": len(env.reads_done),
        "cycles": env.cycle, "phase_changes": traffic.phase_changes, "races": dict(env.races),
        "events": dict(sorted(events.items())),
    }
    _save()
