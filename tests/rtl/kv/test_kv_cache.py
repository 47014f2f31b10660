"""KvCache in the Amaranth simulator: parameter checks, a scripted session, exact latencies.

The cocotb regression (``test_kv_cache_cocotb.py``) checks long random traces against the golden
model; these tests pin the cycle-level contract that ``docs/kv_cache.md`` states.
"""

import inspect

import pytest
from amaranth.sim import Simulator

from rtl.kv.kv_cache import KvCache
from rtl.kv.layouts import KvGeometry, Op, Status
from sim_models.kv_cache import KvConfig
from verification.packing import pack, unpack

SMALL = dict(pages=8, page_tokens=4, token_bits=16, seqs=4, max_pages_per_seq=4, banks=2,
             counter_bits=3)


class Client:
    """One operation at a time; returns ``(reply, latency)`` with latency counted in cycles from
    the cycle a request is accepted to the first cycle its reply (first item) is valid."""

    def __init__(self, dut):
        self.dut = dut
        g = dut.geometry
        self.layouts = (g.command_layout(), g.command_reply_layout(), g.read_layout(),
                        g.read_reply_layout())

    async def _send(self, ctx, stream, payload):
        ctx.set(stream.payload.as_value(), payload)
        ctx.set(stream.valid, 1)
        cycles = 0
        while not ctx.get(stream.ready):
            await ctx.tick()
            cycles += 1
        await ctx.tick()
        ctx.set(stream.valid, 0)
        return 1

    async def command(self, ctx, **fields):
        dut = self.dut
        ctx.set(dut.cmd_reply.ready, 0)
        cycles = await self._send(ctx, dut.cmd, pack(self.layouts[0], fields))
        while not ctx.get(dut.cmd_reply.valid):
            await ctx.tick()
            cycles += 1
        reply = unpack(self.layouts[1], ctx.get(dut.cmd_reply.payload.as_value()))
        ctx.set(dut.cmd_reply.ready, 1)
        await ctx.tick()
        ctx.set(dut.cmd_reply.ready, 0)
        assert reply["op"] == fields["op"] & 7
        return reply, cycles

    async def read(self, ctx, seq, start, count):
        dut = self.dut
        ctx.set(dut.rd_reply.ready, 1)
        cycles = await self._send(ctx, dut.rd, pack(self.layouts[2], dict(seq=seq, start=start, count=count)))
        items, first = [], None
        while True:
            if ctx.get(dut.rd_reply.valid):
                first = cycles if first is None else first
                items.append(unpack(self.layouts[3], ctx.get(dut.rd_reply.payload.as_value())))
                if items[-1]["last"]:
                    await ctx.tick()
                    return items, first
            await ctx.tick()
            cycles += 1


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("params, error", [
    (dict(page_tokens=3), ValueError), (dict(banks=32), ValueError), (dict(pages="8"), TypeError),
    (dict(max_pages_per_seq=100), ValueError),
])
def test_parameters_are_checked(params, error):
    with pytest.raises(error):
        KvCache(**params)


def test_geometry_of_the_default_configuration():
    defaults = {name: p.default for name, p in inspect.signature(KvCache).parameters.items()}
    assert KvConfig(**defaults) == KvConfig()       # the RTL's defaults are the model's
    g = KvGeometry()
    assert (g.codeword_width, g.bank_depth, g.table_depth, g.seq_width, g.len_width) == (72, 256, 256, 5, 9)
    assert g.command_layout().size == 89 and g.read_reply_layout().size == 71


def test_session_and_latencies():
    dut = KvCache(**SMALL)
    client = Client(dut)
    latency = {}

    async def bench(ctx):
        reply, latency["open"] = await client.command(ctx, op=Op.OPEN, seq=1)
        assert reply["status"] == Status.OK
        reply, latency["stat"] = await client.command(ctx, op=Op.STAT)
        assert (reply["free_pages"], reply["live_seqs"]) == (8, 1)
        reply, latency["error"] = await client.command(ctx, op=Op.APPEND, seq=2, data=1)
        assert reply["status"] == Status.NOT_LIVE
        reply, _ = await client.command(ctx, op=7)
        assert reply["status"] == Status.BAD_OP
        reply, latency["append_new_page"] = await client.command(ctx, op=Op.APPEND, seq=1, data=0x100)
        assert reply["pos"] == 0
        reply, latency["append_in_place"] = await client.command(ctx, op=Op.APPEND, seq=1, data=0x101)
        assert reply["pos"] == 1
        for k in range(2, 6):
            await client.command(ctx, op=Op.APPEND, seq=1, data=0x100 + k)
        reply, latency["fork_2_pages"] = await client.command(ctx, op=Op.FORK, seq=1, arg=2)
        reply, latency["append_cow_2"] = await client.command(ctx, op=Op.APPEND, seq=2, data=0x222)
        assert reply["pos"] == 6
        items, latency["read"] = await client.read(ctx, 2, 0, 7)
        assert [i["data"] for i in items] == [0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x222]
        items, _ = await client.read(ctx, 1, 0, 6)
        assert [i["data"] for i in items] == [0x100 + k for k in range(6)]
        items, _ = await client.read(ctx, 1, 4, 3)
        assert items == [dict(status=Status.OUT_OF_RANGE, last=1, empty=1, corrected=0, poisoned=0, data=0)]
        items, _ = await client.read(ctx, 1, 2, 0)
        assert items == [dict(status=Status.OK, last=1, empty=1, corrected=0, poisoned=0, data=0)]
        reply, latency["inject"] = await client.command(ctx, op=Op.INJECT, seq=2, arg=1, data=1 << 3)
        await client.command(ctx, op=Op.INJECT, seq=2, arg=2, data=0b11)
        items, _ = await client.read(ctx, 1, 0, 3)       # page 0 is shared by 1 and 2
        assert [(i["data"], i["corrected"], i["poisoned"]) for i in items] == [
            (0x100, 0, 0), (0x101, 1, 0), (0x102 ^ 0b11, 0, 1)]
        reply, _ = await client.command(ctx, op=Op.STAT)
        assert (reply["ecc_corrected"], reply["ecc_uncorrectable"], reply["free_pages"]) == (1, 1, 5)
        reply, latency["truncate_1_page"] = await client.command(ctx, op=Op.TRUNCATE, seq=2, arg=3)
        reply, latency["close_2_pages"] = await client.command(ctx, op=Op.CLOSE, seq=1)
        reply, _ = await client.command(ctx, op=Op.STAT)
        assert (reply["free_pages"], reply["live_seqs"]) == (7, 1)

    _run(dut, bench)
    assert latency == {"open": 4, "stat": 4, "error": 4, "append_new_page": 5, "append_in_place": 7,
                       "fork_2_pages": 8, "append_cow_2": 13, "read": 9, "inject": 9,
                       "truncate_1_page": 8, "close_2_pages": 9}, latency


def test_back_to_back_reads_keep_one_record_per_cycle():
    dut = KvCache(**SMALL)
    client = Client(dut)
    g = dut.geometry

    async def bench(ctx):
        await client.command(ctx, op=Op.OPEN, seq=0)
        for k in range(16):
            await client.command(ctx, op=Op.APPEND, seq=0, data=k)
        requests = [(0, 0, 16), (0, 3, 5), (0, 15, 1), (0, 0, 0), (3, 0, 1), (0, 1, 9)]
        ctx.set(dut.rd_reply.ready, 1)
        ctx.set(dut.rd.valid, 1)
        items, cycles, busy = [], 0, []
        pending = list(requests)
        while len([i for i in items if i["last"]]) < len(requests):
            if pending:
                seq, start, count = pending[0]
                ctx.set(dut.rd.payload.as_value(),
                        pack(g.read_layout(), dict(seq=seq, start=start, count=count)))
            accepted = bool(pending) and ctx.get(dut.rd.ready)
            if ctx.get(dut.rd_reply.valid):
                items.append(unpack(g.read_reply_layout(), ctx.get(dut.rd_reply.payload.as_value())))
                busy.append(cycles)
            await ctx.tick()
            cycles += 1
            if accepted:
                pending.pop(0)
                if not pending:
                    ctx.set(dut.rd.valid, 0)
        assert [i["data"] for i in items if not i["empty"]] == (
            list(range(16)) + list(range(3, 8)) + [15] + list(range(1, 10)))
        assert busy == list(range(busy[0], busy[0] + len(busy)))      # not one idle cycle

    _run(dut, bench)
