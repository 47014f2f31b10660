"""cocotb module behind ``poblano kv-trace``: replay a trace on :class:`rtl.kv.kv_cache.KvCache`.

Reads the operations (golden-model format, one JSON list) from ``POBLANO_KV_TRACE_IN``, runs them
on the RTL one at a time (each operation waits for the previous reply; no random stalls), and
writes the replies (golden-model format) and the cycle count to ``POBLANO_KV_TRACE_OUT`` as JSON.
No golden model runs here: the replies are the hardware's alone.
"""

import json
import os

import cocotb

from sim_models.kv_cache import KvConfig
from verification import config
from verification.bench import start_clock_and_reset
from verification.kv.env import KvEnv


@cocotb.test()
async def replay_trace(dut):
    """Every operation of the trace, in order, one at a time."""
    with open(os.environ["POBLANO_KV_TRACE_IN"]) as f:
        ops = json.load(f)
    await start_clock_and_reset(dut)
    env = KvEnv(dut, KvConfig(**config()), check=False)
    replies = []
    for op in ops:
        replies.append(await env.run(op))
    await env.drain()
    with open(os.environ["POBLANO_KV_TRACE_OUT"], "w") as f:
        json.dump({"replies": replies, "cycles": env.cycle}, f)
