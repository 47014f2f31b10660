"""cocotb environment of the KV-cache controller: drivers, one cycle-exact observer, golden model.

:class:`KvEnv` drives both client ports of :class:`rtl.kv.kv_cache.KvCache` (``cmd``/``cmd_reply``,
``rd``/``rd_reply``) with :mod:`verification.stream` drivers and sinks (random idle and stall
cycles, protocol checks) and checks every reply against :class:`sim_models.kv_cache.KvCacheModel`.

Ordering contract it checks: the controller's behaviour is the golden model's, applied in this
order: a command takes effect in the cycle its reply is first presented on ``cmd_reply``; a read in
the cycle it is accepted on ``rd``; in one cycle, the command first. One coroutine observes both
ports in the ``ReadOnly`` phase of every cycle and applies operations to the model in exactly that
order, so concurrent reads, appends, truncates and closes are checked exactly, not loosely.

The ECC counters are counted where the hardware counts them, on delivery: a ``stat`` reply's
``ecc_corrected``/``ecc_uncorrectable`` must equal the number of items flagged ``corrected``/``poisoned``
delivered on ``rd_reply`` before the cycle it is presented (saturating), and once every read is
delivered the model's own counters must agree.

Operations and replies use the golden model's dict format (``{"op": "append", "seq": 0, "data": 5}``
and ``{"status": "ok", "pos": 3}``). Ids and lengths too wide for a field are clamped to the field's
largest value, which is still out of range, so the reply is the one the model gives for the
original value. ``{"op": "bad_op"}`` sends the unassigned opcode 7 (reply ``bad_op``).
"""

import random
from collections import Counter, deque
from dataclasses import dataclass

import cocotb
from cocotb.triggers import Event, ReadOnly, RisingEdge

from rtl.kv.layouts import KvGeometry, Op
from sim_models.kv_cache import STATUSES, KvCacheModel
from verification.bench import start_clock_and_reset, wait_until
from verification.packing import pack, unpack
from verification.scoreboard import ScoreboardError
from verification.stream import StreamDriver, StreamSink

__all__ = ["KvEnv", "Pending", "start_env", "ReadBandwidth", "reads_during_appends"]

_OPCODES = {"open": Op.OPEN, "append": Op.APPEND, "fork": Op.FORK, "truncate": Op.TRUNCATE,
            "close": Op.CLOSE, "stat": Op.STAT, "inject": Op.INJECT, "bad_op": 7}


class Pending:
    """One operation in flight: ``await pending.wait()`` returns its reply (model format)."""

    def __init__(self, op):
        self.op = op
        self.reply = None
        self.expected = None
        self.accept_cycle = None
        self.reply_cycle = None          # commands: first cycle the reply is presented
        self.first_cycle = None          # reads: cycles of the first and last item delivered
        self.last_cycle = None
        self.items = []
        self._done = Event()

    @property
    def done(self):
        return self._done.is_set()

    async def wait(self):
        await self._done.wait()
        return self.reply

    def _finish(self, reply):
        self.reply = reply
        self._done.set()


class KvEnv:
    """Both ports of a ``KvCache`` DUT, observed cycle by cycle and checked against the model.

    Parameters
    ----------
    dut : cocotb handle of the ``kv_cache`` top level (clock and reset already running)
    config : :class:`sim_models.kv_cache.KvConfig`
    check : bool
        Compare every reply with the golden model (``False``: just collect replies, e.g. to replay a
        trace on the RTL alone).
    cmd_idle, cmd_stall, rd_idle, rd_stall : float
        Probabilities of an idle cycle before each request and of a stalled reply cycle, per port.
    rng : ``random.Random``-like, optional
        Source of the drivers' and sinks' idle and stall decisions.
    """

    def __init__(self, dut, config, *, check=True, cmd_idle=0.0, cmd_stall=0.0, rd_idle=0.0,
                 rd_stall=0.0, rng=None):
        self.dut = dut
        self.config = config
        self.geometry = g = KvGeometry(config)
        self.model = KvCacheModel(config) if check else None
        self.cycle = 0
        self._layouts = (g.command_layout(), g.command_reply_layout(), g.read_layout(),
                         g.read_reply_layout())
        clk = dut.clk
        kwargs = {} if rng is None else {"rng": rng}
        self.cmd = StreamDriver(dut, "cmd", clk, idle_prob=cmd_idle, **kwargs)
        self.cmd_reply = StreamSink(dut, "cmd_reply", clk, stall_prob=cmd_stall, **kwargs)
        self.rd = StreamDriver(dut, "rd", clk, idle_prob=rd_idle, **kwargs)
        self.rd_reply = StreamSink(dut, "rd_reply", clk, stall_prob=rd_stall, **kwargs)
        self._queued_cmds = deque()
        self._accepted_cmds = deque()
        self._queued_reads = deque()
        self._accepted_reads = deque()
        self.delivered_corrected = 0
        self.delivered_poisoned = 0
        self.record_cycles = []          # cycles in which rd_reply delivered a record
        self.commands_done = []          # every finished command Pending, in order
        self.reads_done = []
        self.stats_checked = 0
        #: Reads accepted while a command on the same sequence was accepted but not yet answered,
        #: by that command's name: how often the ports really raced.
        self.races = Counter()
        self._counter_max = (1 << config.counter_bits) - 1
        self._task = cocotb.start_soon(self._observe())

    # -- requests --------------------------------------------------------------------------------
    def _clamp(self, value, bits, what):
        value = int(value)
        if value < 0:
            raise ValueError(f"{what} must be non-negative, not {value}")
        return min(value, (1 << bits) - 1)

    def command_fields(self, op):
        """The ``cmd`` payload (a dict of the command layout) for a model-format operation."""
        g = self.geometry
        name = op["op"]
        if name not in _OPCODES:
            raise ValueError(f"not a command: {name!r}")
        arg_bits = max(g.seq_width, g.len_width)
        fields = {"op": int(_OPCODES[name])}
        if "seq" in op:
            fields["seq"] = self._clamp(op["seq"], g.seq_width, "seq")
        if name == "fork":
            fields["seq"] = self._clamp(op["src"], g.seq_width, "src")
            fields["arg"] = self._clamp(op["dst"], arg_bits, "dst")
        elif name == "truncate":
            fields["arg"] = self._clamp(op["length"], arg_bits, "length")
        elif name == "append":
            fields["data"] = int(op["data"])
        elif name == "inject":
            fields["arg"] = self._clamp(op["pos"], arg_bits, "pos")
            mask = 0
            for bit in op["bits"]:
                if not 0 <= bit < g.codeword_width:
                    raise ValueError(f"bit {bit} is outside the {g.codeword_width}-bit codeword")
                mask ^= 1 << bit
            fields["data"] = mask & ((1 << g.token_bits) - 1)
            fields["check"] = mask >> g.token_bits
        return fields

    def command(self, op):
        """Queue a command (any operation but ``read``); returns its :class:`Pending`."""
        pending = Pending(op)
        payload = pack(self._layouts[0], self.command_fields(op))
        self._queued_cmds.append(pending)
        self.cmd.append(payload)
        return pending

    def read(self, seq, start, count):
        """Queue a read; returns its :class:`Pending`."""
        g = self.geometry
        op = {"op": "read", "seq": seq, "start": start, "count": count}
        pending = Pending(op)
        payload = pack(self._layouts[2], {
            "seq": self._clamp(seq, g.seq_width, "seq"),
            "start": self._clamp(start, g.len_width, "start"),
            "count": self._clamp(count, g.len_width, "count")})
        self._queued_reads.append(pending)
        self.rd.append(payload)
        return pending

    def submit(self, op):
        """Queue any trace operation on the port it belongs to."""
        if op["op"] == "read":
            return self.read(op["seq"], op["start"], op["count"])
        return self.command(op)

    async def run(self, op, max_cycles=20_000):
        """Submit one operation and wait (at most ``max_cycles``) for its reply."""
        pending = self.submit(op)
        await wait_until(self.dut.clk, lambda: pending.done, max_cycles=max_cycles,
                         what=f"the reply to {op}")
        return pending.reply

    @property
    def outstanding(self):
        return (len(self._queued_cmds) + len(self._accepted_cmds) + len(self._queued_reads)
                + len(self._accepted_reads))

    async def drain(self, max_cycles=100_000):
        """Wait until every queued operation has its reply."""
        await wait_until(self.dut.clk, lambda: self.outstanding == 0, max_cycles=max_cycles,
                         what="every queued operation answered")

    # -- conversions -----------------------------------------------------------------------------
    @staticmethod
    def reply_of_command(name, payload):
        status = STATUSES[payload["status"]]
        if status != "ok":
            return {"status": status}
        if name == "append":
            return {"status": "ok", "pos": payload["pos"]}
        if name == "stat":
            return {"status": "ok", "free_pages": payload["free_pages"],
                    "live_seqs": payload["live_seqs"], "ecc_corrected": payload["ecc_corrected"],
                    "ecc_uncorrectable": payload["ecc_uncorrectable"]}
        return {"status": "ok"}

    @staticmethod
    def reply_of_read(items):
        first = items[0]
        status = STATUSES[first["status"]]
        if first["empty"]:
            if len(items) != 1 or not first["last"]:
                raise ScoreboardError(f"kv rd_reply: a status item must be alone and last: {items}")
            if status != "ok":
                return {"status": status}
            return {"status": "ok", "data": [], "poisoned": [], "corrected": []}
        for index, item in enumerate(items):
            if item["empty"] or STATUSES[item["status"]] != "ok":
                raise ScoreboardError(f"kv rd_reply: record item {index} has status/empty set: {item}")
            if bool(item["last"]) != (index == len(items) - 1):
                raise ScoreboardError(f"kv rd_reply: 'last' on item {index} of {len(items)}")
        return {"status": "ok", "data": [item["data"] for item in items],
                "poisoned": [i for i, item in enumerate(items) if item["poisoned"]],
                "corrected": [i for i, item in enumerate(items) if item["corrected"]]}

    def _expect_command(self, pending):
        op = pending.op
        if op["op"] == "bad_op":
            return {"status": "bad_op"}
        expected = self.model.apply(op)
        self.model.check_invariant()
        if op["op"] == "stat":
            expected = dict(expected,
                            ecc_corrected=min(self.delivered_corrected, self._counter_max),
                            ecc_uncorrectable=min(self.delivered_poisoned, self._counter_max))
            self.stats_checked += 1
        return expected

    # -- the observer ----------------------------------------------------------------------------
    async def _observe(self):
        dut = self.dut
        _, reply_layout, _, item_layout = self._layouts
        reply_was_valid = False
        reply_was_taken = False
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            cycle = self.cycle

            if dut.cmd__valid.value == 1 and dut.cmd__ready.value == 1:
                pending = self._queued_cmds.popleft()
                pending.accept_cycle = cycle
                self._accepted_cmds.append(pending)

            # A command takes effect when its reply is first presented.
            valid = dut.cmd_reply__valid.value == 1
            if valid and (not reply_was_valid or reply_was_taken):
                if not self._accepted_cmds:
                    raise ScoreboardError(f"kv cmd_reply: reply presented in cycle {cycle} "
                                          "with no command outstanding")
                pending = self._accepted_cmds.popleft()
                payload = unpack(reply_layout, int(dut.cmd_reply__payload.value))
                name = pending.op["op"]
                if payload["op"] != int(_OPCODES[name]) & 7:
                    raise ScoreboardError(f"kv cmd_reply: opcode {payload['op']} answers {pending.op}")
                reply = self.reply_of_command(name, payload)
                pending.reply_cycle = cycle
                if self.model is not None:
                    expected = self._expect_command(pending)
                    pending.expected = expected
                    if reply != expected:
                        raise ScoreboardError(f"kv cmd_reply in cycle {cycle}: {pending.op} -> "
                                              f"{reply}, expected {expected}")
                self.commands_done.append(pending)
                pending._finish(reply)
            reply_was_valid = valid
            reply_was_taken = valid and dut.cmd_reply__ready.value == 1

            # A read takes effect when it is accepted.
            if dut.rd__valid.value == 1 and dut.rd__ready.value == 1:
                pending = self._queued_reads.popleft()
                pending.accept_cycle = cycle
                for other in self._accepted_cmds:
                    if other.op.get("seq", other.op.get("dst")) == pending.op["seq"]:
                        self.races[other.op["op"]] += 1
                if self.model is not None:
                    pending.expected = self.model.apply(pending.op)
                self._accepted_reads.append(pending)

            if len(self.rd_reply.items) > 1024:          # the sinks' own lists are not used
                self.rd_reply.items.clear()
                self.cmd_reply.items.clear()
            if dut.rd_reply__valid.value == 1 and dut.rd_reply__ready.value == 1:
                if not self._accepted_reads:
                    raise ScoreboardError(f"kv rd_reply: item delivered in cycle {cycle} with no "
                                          "read outstanding")
                item = unpack(item_layout, int(dut.rd_reply__payload.value))
                pending = self._accepted_reads[0]
                if pending.first_cycle is None:
                    pending.first_cycle = cycle
                pending.items.append(item)
                self.delivered_corrected += item["corrected"]
                self.delivered_poisoned += item["poisoned"]
                if not item["empty"]:
                    self.record_cycles.append(cycle)
                if item["last"]:
                    self._accepted_reads.popleft()
                    pending.last_cycle = cycle
                    reply = self.reply_of_read(pending.items)
                    if self.model is not None and reply != pending.expected:
                        raise ScoreboardError(f"kv rd_reply in cycle {cycle}: {pending.op} -> "
                                              f"{reply}, expected {pending.expected}")
                    self.reads_done.append(pending)
                    pending._finish(reply)

    # -- end of test -----------------------------------------------------------------------------
    async def finish(self, max_cycles=100_000):
        """Drain, then check with a final ``stat`` that the RTL agrees with the model at rest."""
        await self.drain(max_cycles)
        if self.model is None:
            return
        reply = await self.run({"op": "stat"})
        model = self.model.stat()
        if reply != model:
            raise ScoreboardError(f"kv at rest: stat {reply} differs from the model's {model}")
        self.model.check_invariant()


async def start_env(dut, config, **options):
    """Reset the controller and return a fresh :class:`KvEnv` for ``config`` (a ``KvConfig``).

    A previous test in the same simulation may have left a request presented: it is withdrawn
    first. The environment's random choices come from cocotb's seeded :mod:`random`.
    """
    for port in ("cmd", "rd"):
        getattr(dut, f"{port}__valid").value = 0
    await start_clock_and_reset(dut)
    return KvEnv(dut, config, rng=random.Random(random.getrandbits(32)), **options)


@dataclass
class ReadBandwidth:
    """What :func:`reads_during_appends` measured (cycles as the observer counts them)."""
    reads: list                # the read :class:`Pending` objects, in issue order
    records: int               # records delivered by them
    cycles: int                # first record of the first read .. last record of the last, inclusive
    appends_meanwhile: int     # appends whose reply was presented within those cycles

    @property
    def records_per_cycle(self):
        return self.records / self.cycles


async def reads_during_appends(env, *, length, reads, append_budget):
    """Whole-sequence reads of one sequence back to back while other sequences are appended.

    Sequence 0 is opened and filled with ``length`` records; sequences 1..3 (as many as exist) are
    opened; then ``reads`` reads of all of sequence 0 are queued at once, and while they run one
    append at a time (at most two queued) goes round-robin to the other sequences, at most
    ``append_budget`` in all and none into a full sequence. Every reply is checked as usual.
    """
    c = env.config
    writers = list(range(1, min(c.seqs, 4)))

    async def open_(seq):
        reply = await env.run({"op": "open", "seq": seq})
        assert reply["status"] == "ok", f"open {seq}: {reply}"

    await open_(0)
    for k in range(length):
        env.command({"op": "append", "seq": 0, "data": k})
    await env.drain()
    for seq in writers:
        await open_(seq)
    pending = [env.read(0, 0, length) for _ in range(reads)]
    appends = 0
    while not all(r.done for r in pending):
        if len(env.cmd) < 2 and appends < append_budget:
            seq = writers[appends % len(writers)]
            if env.model is None or env.model.length[seq] < c.max_len:
                env.command({"op": "append", "seq": seq, "data": appends})
            appends += 1
        await RisingEdge(env.dut.clk)
    await env.drain()
    first, last = pending[0].first_cycle, pending[-1].last_cycle
    meanwhile = sum(1 for p in env.commands_done
                    if p.op["op"] == "append" and first <= p.reply_cycle <= last)
    return ReadBandwidth(reads=pending, records=sum(len(r.reply["data"]) for r in pending),
                         cycles=last - first + 1, appends_meanwhile=meanwhile)
