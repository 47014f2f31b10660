"""cocotb driver, sink and monitor for ``amaranth.lib.stream`` valid/ready interfaces.

A stream port named ``i`` in Amaranth appears in the generated Verilog as ``i__valid``, ``i__ready``
and (unless the payload is zero-width) ``i__payload``. Every class here takes the DUT and that
prefix. Payloads are integers; give a ``layout`` to send and receive dicts/lists packed with
:mod:`verification.packing`.

Timing discipline (identical on Verilator and Icarus): inputs change right after a rising edge;
transfers are sampled in the ``ReadOnly`` phase of the cycle, when ``valid`` and ``ready`` have
settled, so ``ready`` may depend combinationally on ``valid``.
"""

import random
from collections import deque

import cocotb
from cocotb.triggers import Event, ReadOnly, RisingEdge

from .packing import pack, unpack

__all__ = ["StreamDriver", "StreamSink", "StreamMonitor", "ProtocolError"]


class ProtocolError(AssertionError):
    """A stream broke the valid/ready rules (valid dropped or payload changed while stalled)."""


def _handle(dut, prefix, suffix, required=True):
    name = f"{prefix}__{suffix}"
    if hasattr(dut, name):
        return getattr(dut, name)
    if required:
        raise AttributeError(f"{dut._name} has no port {name}")
    return None


class StreamDriver:
    """Drives a stream *into* the DUT (the DUT's ``In(stream.Signature(...))`` port).

    Items queued with :meth:`send` (awaitable, returns when accepted) or :meth:`append` are presented
    in order. With probability ``idle_prob`` the driver leaves ``valid`` low for a cycle before
    presenting the next item; once ``valid`` is high it stays high, with a stable payload, until the
    DUT accepts the item.
    """

    def __init__(self, dut, prefix, clock, *, layout=None, idle_prob=0.0, rng=None):
        self.clock = clock
        self.layout = layout
        self.idle_prob = idle_prob
        self.rng = rng or random.Random(random.getrandbits(32))
        self.valid = _handle(dut, prefix, "valid")
        self.ready = _handle(dut, prefix, "ready")
        self.payload = _handle(dut, prefix, "payload", required=False)
        self.name = prefix
        self._queue = deque()
        self._idle = Event()
        self._idle.set()
        self.sent = 0
        self.valid.value = 0
        self._task = cocotb.start_soon(self._run())

    def _encode(self, item):
        return pack(self.layout, item) if self.layout is not None else int(item)

    def append(self, item):
        """Queue ``item``; returns an :class:`Event` set when the DUT accepts it."""
        done = Event()
        self._queue.append((self._encode(item), done))
        self._idle.clear()
        return done

    async def send(self, item):
        """Queue ``item`` and wait until the DUT has accepted it."""
        await self.append(item).wait()

    async def wait_idle(self):
        """Wait until every queued item has been accepted."""
        await self._idle.wait()

    def __len__(self):
        return len(self._queue)

    async def _run(self):
        while True:
            await RisingEdge(self.clock)
            if not self._queue:
                self.valid.value = 0
                continue
            if self.idle_prob and self.rng.random() < self.idle_prob:
                self.valid.value = 0
                continue
            value, done = self._queue[0]
            if self.payload is not None:
                self.payload.value = value
            self.valid.value = 1
            while True:
                await ReadOnly()
                if self.ready.value == 1:
                    break
                await RisingEdge(self.clock)
            self._queue.popleft()
            self.sent += 1
            done.set()
            if not self._queue:
                self._idle.set()


class StreamMonitor:
    """Observes a stream without driving it; calls ``callback(item)`` for every transfer.

    With ``check_protocol`` (default) it also fails the test when ``valid`` falls, or the payload
    changes, while a transfer is pending.
    """

    def __init__(self, dut, prefix, clock, *, callback=None, layout=None, check_protocol=True):
        self.clock = clock
        self.layout = layout
        self.callback = callback
        self.check_protocol = check_protocol
        self.valid = _handle(dut, prefix, "valid")
        self.ready = _handle(dut, prefix, "ready")
        self.payload = _handle(dut, prefix, "payload", required=False)
        self.name = prefix
        self.transfers = 0
        self.stall_cycles = 0
        self._task = cocotb.start_soon(self._run())

    def _decode(self, value):
        return unpack(self.layout, value) if self.layout is not None else value

    async def _run(self):
        pending = None
        while True:
            await RisingEdge(self.clock)
            await ReadOnly()
            valid = self.valid.value == 1
            raw = self.payload.value if self.payload is not None else None
            value = int(raw) if raw is not None and raw.is_resolvable else None
            if self.check_protocol and pending is not None:
                if not valid:
                    raise ProtocolError(f"{self.name}: valid fell before the pending transfer")
                if value != pending:
                    raise ProtocolError(f"{self.name}: payload changed while stalled "
                                        f"({pending:#x} -> {value})")
            if not valid:
                pending = None
                continue
            if self.payload is not None and value is None:
                raise ProtocolError(f"{self.name}: payload has X/Z bits while valid: {raw}")
            if self.ready.value == 1:
                pending = None
                self.transfers += 1
                if self.callback is not None:
                    self.callback(self._decode(value) if value is not None else None)
            else:
                pending = value
                self.stall_cycles += 1


class StreamSink:
    """Accepts a stream *out of* the DUT (its ``Out(stream.Signature(...))`` port).

    Drives ``ready``, low with probability ``stall_prob`` on each cycle, and collects every transfer
    in :attr:`items` (and calls ``callback`` when given). Protocol is checked as by
    :class:`StreamMonitor`.
    """

    def __init__(self, dut, prefix, clock, *, callback=None, layout=None, stall_prob=0.0, rng=None,
                 check_protocol=True):
        self.clock = clock
        self.stall_prob = stall_prob
        self.rng = rng or random.Random(random.getrandbits(32))
        self.ready = _handle(dut, prefix, "ready")
        self.items = deque()
        self._user_callback = callback
        self._arrived = Event()
        self.ready.value = 0
        self.monitor = StreamMonitor(dut, prefix, clock, callback=self._collect, layout=layout,
                                     check_protocol=check_protocol)
        self._task = cocotb.start_soon(self._run())

    def _collect(self, item):
        self.items.append(item)
        self._arrived.set()
        if self._user_callback is not None:
            self._user_callback(item)

    async def _run(self):
        while True:
            await RisingEdge(self.clock)
            stall = self.stall_prob and self.rng.random() < self.stall_prob
            self.ready.value = 0 if stall else 1

    async def receive(self):
        """Wait for and return the next collected item."""
        while not self.items:
            self._arrived.clear()
            await self._arrived.wait()
        return self.items.popleft()

    @property
    def transfers(self):
        return self.monitor.transfers
