"""KvCache in the Amaranth simulator: parameter checks, a scripted session, exact latencies, and
both ports at once against the golden model.

The cocotb regression (``test_kv_cache_cocotb.py``) checks long random traces against the golden
model; these tests pin the cycle-level contract that ``docs/kv_cache.md`` states. The two-port tests
(:class:`TwoPortBench`) scoreboard short random traces in four configurations (odd widths, one
bank, one-record pages, one sequence of one page) and sweep reads across the race windows of
copy-on-write appends, injects, truncates and closes, checking every cycle that no unchecked
block-RAM read port reads the address being written.
"""

import contextlib
import inspect
import random

import pytest
from amaranth.sim import Simulator

from rtl.common.unchecked_read import unchecked_read_port
from rtl.kv import kv_cache as kv_cache_module
from rtl.kv.kv_cache import KvCache
from rtl.kv.layouts import KvGeometry, Op, Status
from sim_models.kv_cache import STATUSES, KvCacheModel, KvConfig
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


# -- both ports at once, against the golden model ------------------------------------------------

_OPCODES = {"open": Op.OPEN, "append": Op.APPEND, "fork": Op.FORK, "truncate": Op.TRUNCATE,
            "close": Op.CLOSE, "stat": Op.STAT, "inject": Op.INJECT, "bad_op": 7}

#: Configurations of the two-port tests: the small one, the cocotb regression's odd one (one bank,
#: pages of two, three sequences), pages of one record, and a minimal one (one sequence of one
#: page, a two-page pool, one-row banks, one-bit ECC counters).
CONFIGS = {
    "small": SMALL,
    "odd": dict(pages=5, page_tokens=2, token_bits=8, seqs=3, max_pages_per_seq=3, banks=1, counter_bits=2),
    "page1": dict(pages=3, page_tokens=1, token_bits=8, seqs=2, max_pages_per_seq=3, banks=1, counter_bits=2),
    "tiny": dict(pages=2, page_tokens=2, token_bits=8, seqs=1, max_pages_per_seq=1, banks=2, counter_bits=1),
}


class _Item:
    def __init__(self, op, payload, gate=None):
        self.op, self.payload, self.gate = op, payload, gate
        self.accept_cycle = self.reply_cycle = None
        self.reply = None


class TwoPortBench:
    """Drives ``cmd`` and ``rd`` of a :class:`KvCache` at once and checks every reply against
    :class:`~sim_models.kv_cache.KvCacheModel`, in the order ``docs/kv_cache.md`` (*Ordering*)
    states: a command takes effect in the cycle its reply is first presented, a read in the cycle
    it is accepted; in one cycle, the command first. A ``stat`` must count the ECC flags of the
    items delivered before it is presented (saturating), as the hardware counts them on delivery.

    One testbench process drives every input and observes both ports with ``tick().sample``, so
    nothing depends on the order in which processes run. Operations are queued (``command``,
    ``read``) with an optional gate (a function of the bench: present no earlier than it says) or
    generated from the model's state (``random_commands``/``random_reads``); ``rd_ready`` and
    ``reply_ready`` decide the reply streams' ready each cycle.
    """

    def __init__(self, dut, seed, *, idle=0.3, stall=0.3):
        self.dut = dut
        self.g = g = dut.geometry
        self.model = KvCacheModel(g.config)
        self.rng = random.Random(seed)
        self.seed = seed
        self.layouts = (g.command_layout(), g.command_reply_layout(), g.read_layout(), g.read_reply_layout())
        self.cmds, self.reads = [], []               # queued, not yet presented
        self.random_commands = self.random_reads = 0
        self.idle, self.stall = idle, stall
        self.rd_ready = lambda bench: bench.rng.random() >= bench.stall
        self.reply_ready = lambda bench: bench.rng.random() >= bench.stall
        self.cycle = 0
        self.done_cmds, self.done_reads = [], []
        self.delivered_corrected = self.delivered_poisoned = 0
        self._cmd = self._rd = None
        self._cmd_accepted, self._rd_accepted, self._items = [], [], []
        self._reply_was_valid = self._reply_was_taken = False
        self._counter_max = (1 << g.counter_bits) - 1
        #: (name, expression) of every read/write collision on an unchecked read port (see
        #: :func:`_run_bench`); each must stay 0.
        self.collisions = []

    # -- requests --------------------------------------------------------------------------------
    def _clamp(self, value, bits):
        return min(value, (1 << bits) - 1)

    def command(self, op, gate=None):
        g = self.g
        arg_bits = max(g.seq_width, g.len_width)
        name = op["op"]
        fields = {"op": int(_OPCODES[name]), "seq": self._clamp(op.get("seq", op.get("src", 0)), g.seq_width)}
        if name == "fork":
            fields["arg"] = self._clamp(op["dst"], arg_bits)
        elif name == "truncate":
            fields["arg"] = self._clamp(op["length"], arg_bits)
        elif name == "append":
            fields["data"] = op["data"]
        elif name == "inject":
            fields["arg"] = self._clamp(op["pos"], arg_bits)
            mask = sum(1 << bit for bit in op["bits"])
            fields["data"], fields["check"] = mask & ((1 << g.token_bits) - 1), mask >> g.token_bits
        item = _Item(op, pack(self.layouts[0], fields), gate)
        self.cmds.append(item)
        return item

    def read(self, seq, start, count, gate=None):
        g = self.g
        op = {"op": "read", "seq": seq, "start": start, "count": count}
        payload = pack(self.layouts[2], {"seq": self._clamp(seq, g.seq_width),
                                         "start": self._clamp(start, g.len_width),
                                         "count": self._clamp(count, g.len_width)})
        item = _Item(op, payload, gate)
        self.reads.append(item)
        return item

    def _random_command(self):
        rng, c, model = self.rng, self.g.config, self.model
        live = [s for s in range(c.seqs) if model.live[s]]

        def seq_id(prefer_live=True):
            if rng.random() < 0.08:                     # out of range, also the largest id
                return rng.choice([c.seqs, (1 << self.g.seq_width) - 1])
            if prefer_live and live and rng.random() < 0.85:
                return rng.choice(live)
            return rng.randrange(c.seqs)

        name = rng.choices(["open", "append", "fork", "truncate", "close", "stat", "inject", "bad_op"],
                           [3, 12, 2, 2, 1.2, 1, 1.5, 0.2])[0]
        if name in ("open", "close", "stat", "bad_op"):
            return {"op": name, "seq": seq_id(name != "open")}
        if name == "append":
            return {"op": name, "seq": seq_id(), "data": rng.getrandbits(c.token_bits)}
        if name == "fork":
            return {"op": name, "src": seq_id(), "dst": seq_id(False)}
        seq = seq_id()
        length = model.length[seq] if seq < c.seqs else 0
        if name == "truncate":
            if rng.random() < 0.1:
                return {"op": name, "seq": seq, "length": rng.randrange(1 << self.g.len_width)}
            return {"op": name, "seq": seq, "length": rng.randrange(length + 2)}
        width = self.g.codeword_width
        bits = rng.sample(range(width), rng.choice([1, 1, 1, 2]))
        return {"op": "inject", "seq": seq, "pos": rng.randrange(length + 1), "bits": bits}

    def _random_read(self):
        rng, c, model = self.rng, self.g.config, self.model
        live = [s for s in range(c.seqs) if model.live[s]]
        seq = rng.choice(live) if live and rng.random() < 0.9 else rng.randrange(c.seqs + 1)
        length = model.length[seq] if seq < c.seqs else 0
        if rng.random() < 0.1:                          # any start and count the fields hold
            top = 1 << self.g.len_width
            return seq, rng.randrange(top), rng.randrange(top)
        start = rng.randrange(length + 1)
        return seq, start, rng.randrange(length - start + 2)

    # -- the run ---------------------------------------------------------------------------------
    def _next(self, queue):
        if queue and (queue[0].gate is None or queue[0].gate(self)) and self.rng.random() >= self.idle:
            return queue.pop(0)
        return None

    def busy(self):
        return bool(self.cmds or self.reads or self.random_commands or self.random_reads
                    or self._cmd or self._rd or self._cmd_accepted or self._rd_accepted)

    async def run(self, ctx, max_cycles=50_000):
        dut = self.dut
        items = self._items
        while self.busy():
            assert self.cycle < max_cycles, f"seed {self.seed}: stuck in cycle {self.cycle}"
            if self._cmd is None:
                if not self.cmds and self.random_commands:
                    self.random_commands -= 1
                    self.command(self._random_command())
                self._cmd = self._next(self.cmds)
            if self._rd is None:
                if not self.reads and self.random_reads:
                    self.random_reads -= 1
                    self.read(*self._random_read())
                self._rd = self._next(self.reads)
            for stream, item in ((dut.cmd, self._cmd), (dut.rd, self._rd)):
                ctx.set(stream.valid, item is not None)
                if item is not None:
                    ctx.set(stream.payload.as_value(), item.payload)
            ctx.set(dut.cmd_reply.ready, self.reply_ready(self))
            ctx.set(dut.rd_reply.ready, self.rd_ready(self))
            (_, _, cmd_valid, cmd_ready, reply_valid, reply_ready, reply, rd_valid, rd_ready,
             item_valid, item_ready, item, *collisions) = await ctx.tick().sample(
                dut.cmd.valid, dut.cmd.ready, dut.cmd_reply.valid, dut.cmd_reply.ready,
                dut.cmd_reply.payload.as_value(), dut.rd.valid, dut.rd.ready, dut.rd_reply.valid,
                dut.rd_reply.ready, dut.rd_reply.payload.as_value(), *(c for _, c in self.collisions))
            cycle = self.cycle
            hit = [name for (name, _), value in zip(self.collisions, collisions, strict=True) if value]
            assert not hit, (f"seed {self.seed}: cycle {cycle}: {', '.join(hit)} read the address "
                             "written in the same cycle (an unchecked port: undefined data)")
            if cmd_valid and cmd_ready:
                self._cmd.accept_cycle = cycle
                self._cmd_accepted.append(self._cmd)
                self._cmd = None
            if reply_valid and (not self._reply_was_valid or self._reply_was_taken):   # takes effect now
                assert self._cmd_accepted, f"seed {self.seed}: reply with no command in cycle {cycle}"
                pending = self._cmd_accepted.pop(0)
                self._check_command(pending, unpack(self.layouts[1], reply), cycle)
            self._reply_was_valid, self._reply_was_taken = reply_valid, reply_valid and reply_ready
            if rd_valid and rd_ready:
                self._rd.accept_cycle = cycle
                self._rd.expected = self.model.apply(self._rd.op)
                self._rd_accepted.append(self._rd)
                self._rd = None
            if item_valid and item_ready:
                assert self._rd_accepted, f"seed {self.seed}: read item with no read in cycle {cycle}"
                fields = unpack(self.layouts[3], item)
                self.delivered_corrected += fields["corrected"]
                self.delivered_poisoned += fields["poisoned"]
                items.append(fields)
                if fields["last"]:
                    pending = self._rd_accepted.pop(0)
                    pending.reply, pending.reply_cycle = self._reply_of_read(items), cycle
                    assert pending.reply == pending.expected, (
                        f"seed {self.seed}: {pending.op} accepted in cycle {pending.accept_cycle} -> "
                        f"{pending.reply}, expected {pending.expected}")
                    self.done_reads.append(pending)
                    items.clear()
            self.cycle += 1

    def _check_command(self, pending, payload, cycle):
        op = pending.op
        assert payload["op"] == int(_OPCODES[op["op"]]) & 7
        status = STATUSES[payload["status"]]
        got = {"status": status}
        if status == "ok" and op["op"] == "append":
            got["pos"] = payload["pos"]
        if status == "ok" and op["op"] == "stat":
            got.update({k: payload[k] for k in ("free_pages", "live_seqs", "ecc_corrected",
                                                 "ecc_uncorrectable")})
        if op["op"] == "bad_op":
            expected = {"status": "bad_op"}
        else:
            expected = self.model.apply(op)
            self.model.check_invariant()
        if op["op"] == "stat":
            expected = dict(expected, ecc_corrected=min(self.delivered_corrected, self._counter_max),
                            ecc_uncorrectable=min(self.delivered_poisoned, self._counter_max))
        pending.reply, pending.reply_cycle = got, cycle
        assert got == expected, (f"seed {self.seed}: {op} accepted in cycle {pending.accept_cycle}, "
                                 f"reply in cycle {cycle} -> {got}, expected {expected}")
        self.done_cmds.append(pending)

    @staticmethod
    def _reply_of_read(items):
        first = items[0]
        status = STATUSES[first["status"]]
        if first["empty"]:
            assert len(items) == 1 and first["last"], f"a status item must be alone and last: {items}"
            if status != "ok":
                return {"status": status}
            return {"status": "ok", "data": [], "poisoned": [], "corrected": []}
        for index, item in enumerate(items):
            assert not item["empty"] and STATUSES[item["status"]] == "ok", f"record item {index}: {item}"
        return {"status": "ok", "data": [item["data"] for item in items],
                "poisoned": [i for i, item in enumerate(items) if item["poisoned"]],
                "corrected": [i for i, item in enumerate(items) if item["corrected"]]}


@contextlib.contextmanager
def _watched_read_ports():
    """Record every unchecked read port :class:`KvCache` builds, with its memory.

    Those ports promise nothing when they read an address another port writes in the same cycle
    (``rtl/common/unchecked_read.py``), and the simulators return the old data there, so a design
    that reads the entry being written passes every data check in simulation. The controller must
    make that impossible (the locks, ``DRAIN``): this lets a test check it every cycle.
    """
    seen = []

    def watched(m, memory, *, name):
        port = unchecked_read_port(m, memory, name=name)
        seen.append((name, memory, port))
        return port

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kv_cache_module, "unchecked_read_port", watched)
        yield seen


def _run_bench(dut, bench_fn, bench=None):
    with _watched_read_ports() as ports:
        sim = Simulator(dut)                    # elaborates, building the ports
    if bench is not None:
        bench.collisions = [(f"{name}/write{w}", port.en & write.en & (port.addr == write.addr))
                            for name, memory, port in ports
                            for w, write in enumerate(memory.write_ports)]
        assert len(bench.collisions) == 2 * dut.geometry.banks + 2
    sim.add_clock(1e-8)
    sim.add_testbench(bench_fn)
    sim.run()


@pytest.mark.parametrize("name", CONFIGS)
def test_random_traffic_on_both_ports_matches_the_model(name):
    """Random commands and reads, racing each other, with random idle and stall cycles on every
    stream; every reply (statuses, positions, records, ECC flags, stat counts) as the model's."""
    seed = 100 + list(CONFIGS).index(name)
    print(f"seed {seed}")
    dut = KvCache(**CONFIGS[name])
    bench = TwoPortBench(dut, seed)
    bench.random_commands, bench.random_reads = 250, 150
    stall = {"until": 0}

    def bursty(bench):
        # rd_reply stalls in bursts of up to 40 cycles, long enough to fill the reply FIFO.
        if bench.cycle >= stall["until"] and bench.rng.random() < 0.04:
            stall["until"] = bench.cycle + bench.rng.randrange(40)
        return bench.cycle >= stall["until"] and bench.rng.random() >= 0.2

    bench.rd_ready = bursty

    async def run(ctx):
        await bench.run(ctx)
        bench.command({"op": "stat"})                  # at rest: the counts agree with the model
        await bench.run(ctx)
        assert bench.model.ecc_corrected == min(bench.delivered_corrected, bench._counter_max)
        assert bench.model.ecc_uncorrectable == min(bench.delivered_poisoned, bench._counter_max)

    _run_bench(dut, run, bench)
    statuses = {(p.op["op"], p.reply["status"]) for p in bench.done_cmds + bench.done_reads}
    assert {("open", "ok"), ("append", "ok"), ("read", "ok"), ("read", "out_of_range")} <= statuses, statuses


def _race_bench(scenario, delays):
    """``scenario(bench, d)`` queues one race for each delay ``d`` and returns its (command, read)
    pair; no idle or stall cycles, so the delays are exact. Every reply and every cycle's port
    collisions are checked. Returns the bench and whether some reads were accepted before their
    command took effect and some after (so the delays span the race)."""
    dut = KvCache(**SMALL)
    bench = TwoPortBench(dut, seed=0, idle=0.0, stall=0.0)
    races = [scenario(bench, d) for d in delays]

    async def run(ctx):
        await bench.run(ctx)

    _run_bench(dut, run, bench)
    before = {read.accept_cycle < command.reply_cycle for command, read in races}
    return bench, before == {True, False}


def _after(item, cycles):
    """A gate: present no earlier than ``cycles`` after ``item`` was accepted."""
    return lambda bench: item.accept_cycle is not None and bench.cycle >= item.accept_cycle + cycles


def test_reads_racing_a_copy_on_write_append():
    """A read of a sequence presented at every offset around an append that copies its shared
    tail page. The commit rewrites the tail's block-table entry, so reads of the sequence are
    locked out from the append's check to its reply and the copy waits for those already
    accepted (docs/kv_cache.md, *Ordering*): no read may fetch that entry in the cycle it is
    written. Without the lock (``lock.eq(1)`` dropped on the copy path) a read accepted in the
    copy's last cycle reads the entry in the commit cycle: the collision check fails."""
    def scenario(bench, d):
        bench.command({"op": "open", "seq": 0})
        for k in range(3):
            bench.command({"op": "append", "seq": 0, "data": 0x40 * d + k})
        bench.command({"op": "fork", "src": 0, "dst": 1})            # the tail page is shared
        append = bench.command({"op": "append", "seq": 0, "data": 0xEE})  # copy-on-write
        read = bench.read(0, 0, 3, gate=_after(append, d))          # the tail page's records
        bench.command({"op": "close", "seq": 1})
        bench.command({"op": "close", "seq": 0})
        return append, read

    bench, spans = _race_bench(scenario, range(18))
    assert bench.model.events["copy_on_write"] == 18 and spans


def test_reads_racing_an_inject():
    """A read of the injected record presented at every offset around an inject: reads of every
    sequence are locked out from the inject's check to its reply, and the inject waits for the
    reads already accepted, so a read sees the flipped bit exactly when it was accepted after the
    inject took effect. Without ``lock_all`` blocking the inject's own sequence
    (``lock_all | (lock_seq == seq)`` -> ``^``) a read accepted during the read-modify-write
    returns the flipped word although it is ordered before the inject."""
    def scenario(bench, d):
        bench.command({"op": "open", "seq": 0})
        for k in range(3):
            bench.command({"op": "append", "seq": 0, "data": 0x11 * (k + 1)})
        inject = bench.command({"op": "inject", "seq": 0, "pos": 1, "bits": [d % 8]})
        read = bench.read(0, 1, 1, gate=_after(inject, d))
        bench.command({"op": "close", "seq": 0})
        return inject, read

    bench, spans = _race_bench(scenario, range(14))
    assert spans


@pytest.mark.parametrize("op", ["truncate", "close"])
def test_reads_racing_a_release_of_their_pages(op):
    """A read of sequence A presented at every offset after a truncate (or close) of A that frees
    its page, while an earlier read of another sequence stalls the read engine (``rd_reply`` not
    ready): the stalled read keeps A's read waiting to issue. Reads of A are locked out from the
    release's check to its reply, so one presented in that window is accepted after the release
    and answered ``out_of_range`` (``not_live``). Without the lock (``lock.eq(1)`` -> ``lock.eq(0)``
    on truncate/close) it is accepted during the release, ordered before it, and still waiting
    when the next append reuses the freed page: it returns the new record instead of A's."""
    spans = set()
    for d in range(12):
        dut = KvCache(**SMALL)
        bench = TwoPortBench(dut, seed=d, idle=0.0, stall=0.0)
        bench.command({"op": "open", "seq": 0})
        for k in range(4):
            bench.command({"op": "append", "seq": 0, "data": 0xA0 + k})        # A: page 0
        bench.command({"op": "open", "seq": 3})
        for k in range(12):
            last = bench.command({"op": "append", "seq": 3, "data": 0xC0 + k})  # C: pages 1-3
        stalled = bench.read(3, 0, 12, gate=lambda b, last=last: last.reply_cycle is not None)
        release = bench.command({"op": op, "seq": 0} | ({"length": 0} if op == "truncate" else {}),
                                gate=_after(stalled, 1))
        read = bench.read(0, 0, 4, gate=_after(release, d))
        bench.command({"op": "open", "seq": 1})
        reuse = bench.command({"op": "append", "seq": 1, "data": 0x5A})        # takes page 0
        def rd_ready(b, reuse=reuse, release=release):
            late = release.accept_cycle is not None and b.cycle > release.accept_cycle + 80
            return reuse.reply_cycle is not None or late
        bench.rd_ready = rd_ready

        async def run(ctx, bench=bench):
            await bench.run(ctx, max_cycles=5000)

        _run_bench(dut, run, bench)
        assert bench.done_reads[0].reply["data"] == [0xC0 + k for k in range(12)]
        spans.add(read.accept_cycle < release.reply_cycle)
    assert spans == {True, False}


@pytest.mark.parametrize("op", ["truncate", "inject"])
@pytest.mark.parametrize("read", [(0, 0, 9), (0, 2, 0)], ids=["failed", "empty"])
def test_a_read_without_records_is_not_waited_for_once_it_has_issued(op, read):
    """A truncate (inject) waits for the reads of its sequence (all reads) that are held or
    issuing records (``query_hit``/``read_busy``); a failed or empty read issues one status item
    and no record, so once that item has left the check stage nothing is in flight. Accepted the
    cycle before the command, such a read has issued its item by the time the command drains:
    the command's latency is the same as with no read at all. (Counting every pipeline token,
    ``p.valid & p.record`` -> ``p.valid | p.record``, makes it wait a cycle more.)"""
    latency = []
    for with_read in (False, True):
        dut = KvCache(**SMALL)
        bench = TwoPortBench(dut, seed=0, idle=0.0, stall=0.0)
        bench.command({"op": "open", "seq": 0})
        for k in range(4):
            last = bench.command({"op": "append", "seq": 0, "data": k})
        settled = _after(last, 12)
        fields = {"length": 2} if op == "truncate" else {"pos": 1, "bits": [3]}
        if with_read:
            first = bench.read(*read, gate=settled)
            command = bench.command({"op": op, "seq": 0, **fields}, gate=_after(first, 1))
        else:
            command = bench.command({"op": op, "seq": 0, **fields}, gate=settled)

        async def run(ctx, bench=bench):
            await bench.run(ctx)

        _run_bench(dut, run, bench)
        if with_read:
            assert command.accept_cycle == first.accept_cycle + 1
            assert first.reply["status"] == ("out_of_range" if read[2] else "ok")
        latency.append(command.reply_cycle - command.accept_cycle)
    assert latency[1] == latency[0], f"{op} after a {read} read: {latency[1]} cycles, {latency[0]} alone"
