"""cocotb testbench of :class:`rtl.kv.kv_cache.KvCache` against :mod:`sim_models.kv_cache`.

Every reply on both ports is checked by :class:`verification.kv.env.KvEnv` against the golden model
applied in the controller's exact cycle order, the model checks its own invariant after every
command, and every ``stat`` checks the RTL's free-page and live-sequence counts against it.

* ``directed_semantics``: each error of each operation, copy-on-write after fork, fork chains,
  truncate into a shared page, ``seq_full``, ``no_space`` at full occupancy, reuse of closed slots.
* ``random_trace``: random operations on both ports at once with random idle and stall cycles.
* ``ecc_errors``: injected single (data and check bit), double and triple errors; poison survives a
  copy-on-write; counters saturate.
* ``read_throughput``: reads stream one record per cycle while another sequence is appended.
"""


import cocotb

from sim_models.kv_cache import KvConfig
from verification import config
from verification.bench import numpy_rng
from verification.kv.env import reads_during_appends, start_env
from verification.kv.traffic import RandomTraffic


def _config():
    return KvConfig(**config())


async def _env(dut, **kwargs):
    return await start_env(dut, _config(), **kwargs)


async def _expect(env, op, status="ok", **fields):
    reply = await env.run(op)
    assert reply["status"] == status, f"{op}: got {reply}, expected status {status}"
    for key, value in fields.items():
        assert reply[key] == value, f"{op}: got {reply}, expected {key}={value}"
    return reply


async def _fill(env, seq, count, base):
    for k in range(count):
        await _expect(env, {"op": "append", "seq": seq, "data": (base + k) % (1 << env.config.token_bits)})


@cocotb.test()
async def directed_semantics(dut):
    """Every error path and the sharing rules, one operation at a time (the model checks data)."""
    env = await _env(dut, cmd_stall=0.2, rd_stall=0.2)
    c = env.config
    pt, bad = c.page_tokens, c.seqs
    run = env.run

    # Errors on a fresh controller, in the documented order.
    await _expect(env, {"op": "open", "seq": bad}, "bad_seq")
    await _expect(env, {"op": "append", "seq": 0, "data": 1}, "not_live")
    await _expect(env, {"op": "append", "seq": bad, "data": 1}, "bad_seq")
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": 0}, "not_live")
    await _expect(env, {"op": "read", "seq": bad, "start": 0, "count": 1}, "bad_seq")
    await _expect(env, {"op": "fork", "src": 0, "dst": 1}, "not_live")
    await _expect(env, {"op": "fork", "src": bad, "dst": 1}, "bad_seq")
    await _expect(env, {"op": "fork", "src": 0, "dst": bad}, "bad_seq")
    await _expect(env, {"op": "truncate", "seq": 0, "length": 0}, "not_live")
    await _expect(env, {"op": "truncate", "seq": bad, "length": 0}, "bad_seq")
    await _expect(env, {"op": "close", "seq": 0}, "not_live")
    await _expect(env, {"op": "close", "seq": bad}, "bad_seq")
    await _expect(env, {"op": "inject", "seq": 0, "pos": 0, "bits": [0]}, "not_live")
    await _expect(env, {"op": "bad_op"}, "bad_op")
    await _expect(env, {"op": "stat"}, free_pages=c.pages, live_seqs=0)

    # One live sequence: empty reads, range errors.
    await _expect(env, {"op": "open", "seq": 0})
    await _expect(env, {"op": "open", "seq": 0}, "live")
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": 0}, data=[])
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": 1}, "out_of_range")
    await _expect(env, {"op": "truncate", "seq": 0, "length": 1}, "out_of_range")
    await _expect(env, {"op": "inject", "seq": 0, "pos": 0, "bits": [0]}, "out_of_range")
    await _expect(env, {"op": "fork", "src": 0, "dst": 0}, "live")
    await _expect(env, {"op": "fork", "src": 0, "dst": bad}, "bad_seq")
    await _expect(env, {"op": "truncate", "seq": 0, "length": 0})
    await _expect(env, {"op": "read", "seq": 0, "start": 10**6, "count": 1}, "out_of_range")

    # Copy-on-write after fork: 0 has a page and a half; 1 shares both.
    await _fill(env, 0, pt + pt // 2 + 1, 0x100)
    await _expect(env, {"op": "fork", "src": 0, "dst": 1})
    await _expect(env, {"op": "read", "seq": 1, "start": 0, "count": pt + pt // 2 + 1})
    cow = env.model.events["copy_on_write"]
    await _expect(env, {"op": "append", "seq": 1, "data": 0xAA}, pos=pt + pt // 2 + 1)
    assert env.model.events["copy_on_write"] == cow + (1 if (pt + pt // 2 + 1) % pt else 0)
    await _expect(env, {"op": "append", "seq": 0, "data": 0xBB})        # now its own tail: in place
    await run({"op": "read", "seq": 0, "start": 0, "count": pt + pt // 2 + 2})
    await run({"op": "read", "seq": 1, "start": 0, "count": pt + pt // 2 + 2})

    # Fork chain 1 -> 2 -> 3 (as far as slots allow); each appends (copy-on-write), then closes.
    chain = list(range(2, min(c.seqs, 5)))
    src = 1
    for dst in chain:
        await _expect(env, {"op": "fork", "src": src, "dst": dst})
        src = dst
    for k, seq in enumerate(chain):
        await _expect(env, {"op": "append", "seq": seq, "data": 0xC0 + k})
        await run({"op": "read", "seq": seq, "start": 0, "count": env.model.length[seq]})
    for seq in reversed(chain):
        await _expect(env, {"op": "close", "seq": seq})
    await _expect(env, {"op": "stat"}, live_seqs=2)

    # Truncate into a shared page, then append: copy-on-write of the partial page.
    await _expect(env, {"op": "close", "seq": 1})
    await _expect(env, {"op": "fork", "src": 0, "dst": 1})
    await _expect(env, {"op": "truncate", "seq": 1, "length": pt // 2 + 1})
    cow = env.model.events["copy_on_write"]
    await _expect(env, {"op": "append", "seq": 1, "data": 0xDD}, pos=pt // 2 + 1)
    assert env.model.events["copy_on_write"] == cow + (1 if (pt // 2 + 1) % pt else 0)
    await run({"op": "read", "seq": 0, "start": 0, "count": env.model.length[0]})
    await run({"op": "read", "seq": 1, "start": 0, "count": env.model.length[1]})
    # Truncate to zero: the old records are unreachable; new ones go to a fresh page.
    await _expect(env, {"op": "truncate", "seq": 1, "length": 0})
    await _expect(env, {"op": "read", "seq": 1, "start": 0, "count": 1}, "out_of_range")
    await _expect(env, {"op": "append", "seq": 1, "data": 0xEE}, pos=0)
    await _expect(env, {"op": "read", "seq": 1, "start": 0, "count": 1}, data=[0xEE])

    # Reuse of a closed slot: it comes back empty.
    await _expect(env, {"op": "close", "seq": 0})
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": 1}, "not_live")
    await _expect(env, {"op": "open", "seq": 0})
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": 1}, "out_of_range")
    await _expect(env, {"op": "close", "seq": 1})

    # seq_full: one sequence filled to max_len (the pool always has max_pages_per_seq pages).
    await _fill(env, 0, c.max_len, 0x1000)
    await _expect(env, {"op": "append", "seq": 0, "data": 1}, "seq_full")
    await _expect(env, {"op": "truncate", "seq": 0, "length": c.max_len - 1})
    await _expect(env, {"op": "append", "seq": 0, "data": 2}, pos=c.max_len - 1)
    await run({"op": "read", "seq": 0, "start": 0, "count": c.max_len})

    # no_space at full occupancy: fill every page, then check nothing stored was disturbed.
    model = env.model
    seq = 1
    while model.free_pages and seq < c.seqs:
        await _expect(env, {"op": "open", "seq": seq})
        while (model.free_pages or model.length[seq] % pt) and model.length[seq] < c.max_len:
            await run({"op": "append", "seq": seq, "data": seq})
        seq += 1
    if model.free_pages == 0:
        await _expect(env, {"op": "stat"}, free_pages=0)
        fresh = [s for s in range(c.seqs) if not model.live[s]]
        target = next((s for s in range(c.seqs) if model.live[s] and model.length[s] % pt == 0
                       and model.length[s] < c.max_len), None)
        if target is None and fresh:
            target = fresh.pop(0)
            await _expect(env, {"op": "open", "seq": target})
        if target is not None:
            await _expect(env, {"op": "append", "seq": target, "data": 3}, "no_space")
        if pt > 1 and fresh:
            # A fork needs no page; the copy-on-write of its shared tail does: no_space for both.
            spare = fresh[0]
            await _expect(env, {"op": "truncate", "seq": 0, "length": c.max_len - 1})
            await _expect(env, {"op": "fork", "src": 0, "dst": spare})
            await _expect(env, {"op": "append", "seq": spare, "data": 4}, "no_space")
            await _expect(env, {"op": "append", "seq": 0, "data": 4}, "no_space")
            await _expect(env, {"op": "close", "seq": spare})
        for s in range(c.seqs):
            if model.live[s]:
                await run({"op": "read", "seq": s, "start": 0, "count": model.length[s]})
        await _expect(env, {"op": "close", "seq": 0})
        if target is not None:
            await _expect(env, {"op": "append", "seq": target, "data": 5})
    for s in range(c.seqs):
        if model.live[s]:
            await _expect(env, {"op": "close", "seq": s})
    await _expect(env, {"op": "stat"}, free_pages=c.pages, live_seqs=0)
    await env.finish()


@cocotb.test()
async def random_trace(dut):
    """Random operations on both ports at once, random idle and stall cycles on all four streams."""
    env = await _env(dut, cmd_idle=0.2, cmd_stall=0.3, rd_idle=0.2, rd_stall=0.3)
    c = env.config
    # A pool this size fills (and empties) many times in the trace; a larger one is filled by the
    # directed test here and by the long traces of benchmarks/kv_cache.py, and its trace switches
    # to shrinking every 200 commands so that truncates and closes (and reads racing them) come often.
    small_pool = c.pages * c.page_tokens <= 256
    rng = numpy_rng(1)
    traffic = RandomTraffic(env, rng, commands=1500 if small_pool else 800,
                            reads=600, cmd_depth=3, read_depth=3,
                            active_seqs=4, grow_commands=None if small_pool else 200)
    await traffic.run()
    events = env.model.events
    dut._log.info("random_trace: %d commands, %d reads, %d cycles, %d phase changes; reads racing "
                  "a command on their sequence: %s; coverage %s",
                  len(env.commands_done), len(env.reads_done), env.cycle, traffic.phase_changes,
                  dict(env.races), dict(sorted(events.items())))
    required = ["copy_on_write", "page_freed", "status:append:not_live",
                "status:read:out_of_range", "status:read:not_live", "status:read:ok",
                "status:fork:ok", "status:fork:live", "status:truncate:ok", "status:truncate:out_of_range",
                "status:close:ok", "status:open:live", "status:open:ok", "status:inject:ok"]
    if small_pool:
        required += ["status:append:no_space", "status:append:seq_full"]
    missing = [name for name in required if not events[name]]
    missing += [f"read racing {op}" for op in ("append", "truncate", "close") if not env.races[op]]
    assert not missing, f"random trace never reached {missing}"


@cocotb.test()
async def ecc_errors(dut):
    """Injected errors: singles corrected, doubles poisoned, triples exactly as the model decodes."""
    env = await _env(dut, rd_stall=0.2)
    c = env.config
    rng = numpy_rng(2)
    width = c.token_bits + c.check_bits
    records = 2 * c.page_tokens
    await _expect(env, {"op": "open", "seq": 0})
    for _ in range(records):
        data = int.from_bytes(rng.bytes((c.token_bits + 7) // 8), "little") & ((1 << c.token_bits) - 1)
        await _expect(env, {"op": "append", "seq": 0, "data": data})

    # Every codeword bit, one at a time: corrected, data intact (the model checks the data).
    for bit in range(width):
        pos = bit % records
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": [bit]})
        reply = await _expect(env, {"op": "read", "seq": 0, "start": pos, "count": 1})
        assert reply["corrected"] == [0] and reply["poisoned"] == [], reply
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": [bit]})    # repair
    await _expect(env, {"op": "read", "seq": 0, "start": 0, "count": records}, corrected=[], poisoned=[])

    # Random double errors: poisoned, never corrected.
    for _ in range(24):
        pos = int(rng.integers(records))
        bits = sorted(int(b) for b in rng.choice(width, size=2, replace=False))
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": bits})
        await _expect(env, {"op": "read", "seq": 0, "start": pos, "count": 1}, poisoned=[0], corrected=[])
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": bits})
    # Triple errors: whatever the code does, the RTL does the same as the model.
    for _ in range(12):
        pos = int(rng.integers(records))
        bits = sorted(int(b) for b in rng.choice(width, size=3, replace=False))
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": bits})
        await env.run({"op": "read", "seq": 0, "start": pos, "count": 1})
        await _expect(env, {"op": "inject", "seq": 0, "pos": pos, "bits": bits})

    # Poison survives copy-on-write (raw codewords are copied); shared by both sequences.
    await _expect(env, {"op": "truncate", "seq": 0, "length": c.page_tokens + c.page_tokens // 2 + 1})
    await _expect(env, {"op": "fork", "src": 0, "dst": 1})
    bad_pos = c.page_tokens + 1
    await _expect(env, {"op": "inject", "seq": 1, "pos": bad_pos, "bits": [0, width - 1]})
    await _expect(env, {"op": "inject", "seq": 1, "pos": bad_pos - 1, "bits": [width - 2]})
    await _expect(env, {"op": "append", "seq": 1, "data": 7})
    for seq in (0, 1):
        reply = await _expect(env, {"op": "read", "seq": seq, "start": c.page_tokens, "count": 2})
        assert reply["poisoned"] == [1] and reply["corrected"] == [0], reply
    # Overwriting a damaged slot clears it.
    await _expect(env, {"op": "truncate", "seq": 1, "length": bad_pos})
    await _expect(env, {"op": "append", "seq": 1, "data": 8})
    await _expect(env, {"op": "read", "seq": 1, "start": bad_pos, "count": 1}, poisoned=[], data=[8])

    # Saturation: the counters stop at 2**counter_bits - 1.
    limit = (1 << c.counter_bits) - 1
    if limit < 64:
        for _ in range(limit + 2):
            await env.run({"op": "read", "seq": 0, "start": bad_pos - 1, "count": 2})
        await _expect(env, {"op": "stat"}, ecc_corrected=limit, ecc_uncorrectable=limit)
    await env.finish()


@cocotb.test()
async def read_throughput(dut):
    """Back-to-back reads of one sequence keep one record per cycle while others are appended."""
    env = await _env(dut)
    c = env.config
    length = min(c.max_len, (c.pages // 2) * c.page_tokens)
    run = await reads_during_appends(env, length=length, reads=max(4, 256 // length),
                                     append_budget=(c.pages - length // c.page_tokens) * c.page_tokens - 1)
    rate = run.records_per_cycle
    dut._log.info("read_throughput: %d records in %d cycles (%.3f per cycle) with %d appends "
                  "committed meanwhile; first record %d cycles after acceptance", run.records, run.cycles,
                  rate, run.appends_meanwhile, run.reads[0].first_cycle - run.reads[0].accept_cycle)
    assert run.appends_meanwhile > 0, "no append ran concurrently with the reads"
    assert rate >= 0.95, f"read port delivered {rate:.3f} records per cycle"
    await env.finish()
