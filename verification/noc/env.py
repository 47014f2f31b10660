"""Reusable cocotb pieces for the fabric: mesh traffic driver, packet scoreboard, progress watchdog.

:class:`MeshEnv` drives every message stream of a :class:`rtl.noc.mesh.Mesh` with
:class:`verification.stream.StreamDriver` (one per node and class) and collects every ``rx`` stream with
:class:`verification.stream.StreamSink` (random ready stalls). Every message goes through the
reference model :class:`sim_models.noc.NetworkModel`, which checks exactly-once delivery, intact
payloads and per-flow order. A message is tagged with a unique sequence number in its header's
``user`` field, and the cycle its header is accepted and its last word delivered are recorded, so
zero-load latencies can be compared with :func:`sim_models.noc.zero_load_latency`.
"""

import random

import cocotb
from cocotb.triggers import RisingEdge

from rtl.noc.layouts import NocParams
from sim_models.noc import HeaderFormat, NetworkModel, destination
from verification.bench import wait_until
from verification.stream import StreamDriver, StreamSink

__all__ = ["params_from_config", "header_format", "CycleCounter", "MeshEnv", "drain"]


def params_from_config(cfg):
    keys = ("width", "vcs", "depth", "classes", "coord_bits", "order_buckets")
    return NocParams(**{k: cfg[k] for k in keys if k in cfg})


def header_format(params):
    return HeaderFormat(width=params.width, coord_bits=params.coord_bits, class_bits=params.class_bits)


class CycleCounter:
    """Counts rising edges; every transfer callback reads :attr:`now` in the cycle it happens."""

    def __init__(self, clock):
        self.now = 0
        self._clock = clock
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self._clock)
            self.now += 1


async def drain(clock, progress, done, *, max_idle, what):
    """Watchdog: wait until ``done()``, failing if ``progress()`` stays unchanged for ``max_idle`` cycles."""
    while not done():
        last = progress()
        await wait_until(clock, lambda last=last: done() or progress() != last, max_cycles=max_idle,
                         what=f"{what} (stuck at {last})")


class MeshEnv:
    """Drivers, sinks and the reference model around a ``kx`` by ``ky`` mesh DUT."""

    def __init__(self, dut, params, kx, ky, *, rng, stall_prob=0.0, idle_prob=0.0):
        self.dut, self.p, self.kx, self.ky = dut, params, kx, ky
        self.fmt = header_format(params)
        self.rng = rng
        self.model = NetworkModel(kx, ky, self.fmt)
        self.cycles = CycleCounter(dut.clk)
        layout = params.message_layout
        self.drivers = {}
        self.sinks = {}
        self.partial = {}
        self.sent_at = {}          # seq -> cycle the header was accepted
        self.latency = {}          # seq -> (src, dst, length, cycles header-accept to last word)
        self.info = {}
        self.created = {}          # seq -> cycle the message was created (queued at its source)
        self.done_at = {}          # seq -> cycle its last word was delivered
        self.seq = 0
        for y in range(ky):
            for x in range(kx):
                for c in range(params.classes):
                    self.drivers[x, y, c] = StreamDriver(
                        dut, f"tx_{x}_{y}__{c}", dut.clk, layout=layout, idle_prob=idle_prob,
                        rng=random.Random(rng.getrandbits(32)))
                    self.sinks[x, y, c] = StreamSink(
                        dut, f"rx_{x}_{y}__{c}", dut.clk, layout=layout, stall_prob=stall_prob,
                        rng=random.Random(rng.getrandbits(32)),
                        callback=lambda item, key=(x, y, c): self._word(key, item))

    # -- sending --------------------------------------------------------------------------------
    def message(self, src, dst, cls, length):
        """Words of a new message (unique ``user`` tag, random body) and its tag."""
        self.seq += 1
        seq = self.seq % (1 << self.fmt.user_bits)
        head = self.fmt.pack(dest_x=dst[0], dest_y=dst[1], length=length, user=seq,
                             src_x=self.rng.getrandbits(self.p.coord_bits))   # src is overwritten
        body = [self.rng.getrandbits(self.p.width) for _ in range(length - 1)]
        return [head] + body, seq

    def send(self, src, dst, cls, length):
        """Queue a message at ``src``; returns its tag (``None`` if it is addressed outside the mesh)."""
        words, seq = self.message(src, dst, cls, length)
        kept = self.model.send(src, cls, words)
        driver = self.drivers[src[0], src[1], cls]
        for k, w in enumerate(words):
            event = driver.append({"data": w, "last": int(k == len(words) - 1)})
            if k == 0 and kept:
                cocotb.start_soon(self._stamp(event, seq))
        if kept:
            self.info[seq] = (tuple(src), tuple(dst), length)
            self.created[seq] = self.cycles.now
            return seq
        return None

    async def _stamp(self, event, seq):
        await event.wait()
        self.sent_at[seq] = self.cycles.now

    def _word(self, key, item):
        words = self.partial.setdefault(key, [])
        words.append(item["data"])
        if item["last"]:
            del self.partial[key]
            x, y, c = key
            seq = self.fmt.unpack(words[0])["user"]
            self.model.deliver((x, y), c, words)
            self.done_at[seq] = self.cycles.now
            if seq in self.sent_at:
                src, dst, length = self.info[seq]
                self.latency[seq] = (src, dst, length, self.cycles.now - self.sent_at[seq])

    # -- traffic --------------------------------------------------------------------------------
    async def traffic(self, pattern, *, rate, cycles, lengths=(1, 2, 4), hotspot=(0, 0)):
        """Bernoulli packet creation at every node for ``cycles`` cycles (``rate`` packets/node/cycle)."""
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
            for y in range(self.ky):
                for x in range(self.kx):
                    if self.rng.random() < rate:
                        dst = destination(pattern, (x, y), self.kx, self.ky, self.rng, hotspot=hotspot)
                        self.send((x, y), dst, self.rng.randrange(self.p.classes),
                                  self.rng.choice(lengths))

    def outstanding(self):
        return self.model.outstanding()

    async def finish(self, *, max_idle=2000):
        """Wait (with the watchdog) until everything is delivered, then check the model's counts."""
        await drain(self.dut.clk, lambda: self.model.counts.delivered,
                    lambda: self.model.outstanding() == 0 and not any(len(d) for d in self.drivers.values()),
                    max_idle=max_idle, what="mesh delivery")
        for _ in range(10):
            await RisingEdge(self.dut.clk)
        counts = self.model.finish()
        assert not self.partial, f"half-delivered messages left: {self.partial}"
        assert counts.clean, counts
        return counts
