"""Random KV-cache traffic: every operation and every error path, on both ports at once.

:class:`RandomTraffic` chooses each operation from the golden model's current state (so most are
meaningful and every error is reached on purpose, not only by accident) and alternates two
phases: *grow* (opens, appends, forks: runs the pool to full occupancy and into ``no_space``) and
*shrink* (truncates, closes: releases pages, frees slots for reuse). Every other grow phase has a
*focus*: the longest live sequence takes most appends, so one sequence reaches ``seq_full`` in every
trace long enough to fill the pool a few times, whatever the seed. Reads run concurrently from a
second coroutine, so they race with appends, copy-on-writes, truncates and closes of the very
sequences they read. All randomness comes from one NumPy generator (seeded and logged by
:func:`verification.bench.numpy_rng`).
"""

import cocotb
from cocotb.triggers import RisingEdge

__all__ = ["RandomTraffic"]

_GROW = {"open": 2.0, "append": 12.0, "fork": 2.5, "truncate": 1.0, "close": 0.6, "stat": 1.0,
         "inject": 0.3, "bad_op": 0.1}
_SHRINK = {"open": 0.6, "append": 3.0, "fork": 0.8, "truncate": 3.0, "close": 3.0, "stat": 1.0,
           "inject": 0.3, "bad_op": 0.1}


class RandomTraffic:
    """Drives ``commands`` random commands and ``reads`` random reads through a :class:`KvEnv`.

    ``cmd_depth`` / ``read_depth`` bound how many operations of each port are queued or in flight
    at once (deeper queues mean the generator's view of the state is staler, so more races).
    """

    def __init__(self, env, rng, *, commands, reads, cmd_depth=2, read_depth=3, max_read=None,
                 active_seqs=None, grow_commands=None):
        self.env = env
        self.rng = rng
        self.commands = commands
        self.reads = reads
        self.cmd_depth = cmd_depth
        self.read_depth = read_depth
        c = env.config
        self.max_read = max_read if max_read is not None else 2 * c.page_tokens
        #: Sequence ids the generator uses (fewer ids: more sharing and more races per id).
        self.universe = list(range(min(c.seqs, active_seqs or c.seqs)))
        self.phase = "grow"
        self.phase_changes = 0
        self._no_space_mark = 0
        self._beyond_truncates = 0    # truncates sent past the sequence's length
        #: A grow phase also ends after this many commands (for pools too large to fill in a trace).
        self.grow_commands = grow_commands
        self._generated = 0
        self._phase_start = 0
        #: The sequence most appends of this grow phase go to (None: spread over a few).
        self.focus = None

    # -- helpers -----------------------------------------------------------------------------------
    def _pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def _chance(self, p):
        return self.rng.random() < p

    def _bits(self, n):
        return int.from_bytes(self.rng.bytes((n + 7) // 8), "little") & ((1 << n) - 1)

    def _state(self):
        m = self.env.model
        c = self.env.config
        live = [s for s in self.universe if m.live[s]]
        dead = [s for s in self.universe if not m.live[s]]
        return m, c, live, dead

    def _bad_seq(self):
        c = self.env.config
        return c.seqs + int(self.rng.integers(0, max(1, (1 << self.env.geometry.seq_width) - c.seqs)))

    def _seq(self, preferred, p_other=0.08, p_bad=0.04):
        _, c, _, _ = self._state()
        if self._chance(p_bad):
            return self._bad_seq()
        if preferred and not self._chance(p_other):
            return self._pick(preferred)
        return self._pick(self.universe)

    def _update_phase(self):
        m, c, live, _ = self._state()
        no_space = m.events["status:append:no_space"]
        if self.phase == "grow":
            grown = (self.grow_commands is not None
                     and self._generated - self._phase_start >= self.grow_commands)
            if no_space - self._no_space_mark >= 3 or (m.free_pages == 0 and self._chance(0.05)) or grown:
                self.phase, self._no_space_mark = "shrink", no_space
                self.phase_changes += 1
                self._phase_start = self._generated
        elif len(live) <= 1 or m.free_pages >= c.pages - 1:
            self.phase = "grow"
            self.phase_changes += 1
            self._phase_start = self._generated
            # Shrinking has freed all but at most one page (or left one sequence): the longest live
            # sequence can now grow to max_len if it takes most appends.
            focused = self.phase_changes % 4 == 2
            self.focus = max(live, key=lambda s: m.length[s]) if focused and live else None

    # -- operations --------------------------------------------------------------------------------
    def next_command(self):
        self._update_phase()
        self._generated += 1
        m, c, live, dead = self._state()
        weights = _GROW if self.phase == "grow" else _SHRINK
        names = list(weights)
        p = [weights[n] for n in names]
        total = sum(p)
        name = names[int(self.rng.choice(len(names), p=[w / total for w in p]))]
        if name == "open":
            return {"op": "open", "seq": self._seq(dead)}
        if name == "append":
            # Favour few sequences so that some grow to seq_full; now and then append to a full one.
            open_ended = [s for s in live if m.length[s] < c.max_len]
            full = [s for s in live if m.length[s] == c.max_len]
            if full and self._chance(0.15):
                favourites = full
            elif self.phase == "grow" and self.focus in open_ended and self._chance(0.7):
                favourites = [self.focus]
            elif self._chance(0.5):
                favourites = open_ended[:2]
            else:
                favourites = open_ended if self._chance(0.9) else live
            return {"op": "append", "seq": self._seq(favourites), "data": self._bits(c.token_bits)}
        if name == "fork":
            src = self._seq(live)
            dst = self._seq(dead, p_other=0.1)
            if self._chance(0.03):
                dst = src
            return {"op": "fork", "src": src, "dst": dst}
        if name == "truncate":
            seq = self._seq(live)
            length = m.length[seq] if 0 <= seq < c.seqs else 0
            # The first few truncates past the end are likelier, so even a short trace that never
            # reaches the shrink phase exercises out_of_range.
            if self._chance(0.3 if self._beyond_truncates < 3 else 0.08):
                self._beyond_truncates += 1
                new = length + int(self.rng.integers(1, 4))
            elif self._chance(0.7):
                new = max(0, length - int(self.rng.integers(0, c.page_tokens + 2)))
            else:
                new = int(self.rng.integers(0, length + 1))
            return {"op": "truncate", "seq": seq, "length": new}
        if name == "close":
            return {"op": "close", "seq": self._seq(live)}
        if name == "inject":
            seq = self._seq(live)
            length = m.length[seq] if 0 <= seq < c.seqs else 0
            pos = int(self.rng.integers(0, length + 1)) if length else 0
            width = c.token_bits + c.check_bits
            flips = int(self.rng.choice([1, 1, 1, 2, 2, 3]))
            bits = sorted(int(b) for b in self.rng.choice(width, size=flips, replace=False))
            return {"op": "inject", "seq": seq, "pos": pos, "bits": bits}
        if name == "bad_op":
            return {"op": "bad_op"}
        return {"op": "stat"}

    def next_read(self):
        m, c, live, _ = self._state()
        seq = self._seq(live, p_other=0.06, p_bad=0.03)
        length = m.length[seq] if 0 <= seq < c.seqs else 0
        start = int(self.rng.integers(0, length + 1))
        count = int(self.rng.integers(0, min(length - start, self.max_read) + 1))
        if self._chance(0.05):
            count = length - start + int(self.rng.integers(1, 4))
        elif self._chance(0.1) and length:
            start, count = 0, length                  # whole-sequence (decode-style) read
        return seq, start, count

    # -- coroutines --------------------------------------------------------------------------------
    async def _commands(self):
        env = self.env
        inflight = []
        for _ in range(self.commands):
            while len(inflight) >= self.cmd_depth:
                await RisingEdge(env.dut.clk)
                inflight = [p for p in inflight if not p.done]
            op = self.next_command()
            inflight.append(env.command(op))

    async def _reads(self):
        env = self.env
        inflight = []
        for _ in range(self.reads):
            while len(inflight) >= self.read_depth:
                await RisingEdge(env.dut.clk)
                inflight = [p for p in inflight if not p.done]
            inflight.append(env.read(*self.next_read()))
            if self._chance(0.1):
                await RisingEdge(env.dut.clk)

    async def run(self, max_cycles=2_000_000):
        """Run both generators to completion, then drain and check the state at rest."""
        commands = cocotb.start_soon(self._commands())
        reads = cocotb.start_soon(self._reads())
        await commands
        await reads
        await self.env.finish(max_cycles)
