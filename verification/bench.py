"""Testbench basics: seeded NumPy generators, clock and reset, bounded waits.

cocotb seeds only Python's :mod:`random` (from ``COCOTB_RANDOM_SEED``, printed at the start of every
run). :func:`numpy_rng` derives a NumPy generator from the same seed and logs it, so one number
reproduces a whole run: ``COCOTB_RANDOM_SEED=<seed> make test``.
"""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge

__all__ = ["numpy_rng", "start_clock_and_reset", "wait_until", "WatchdogTimeout", "TransferSpan",
           "CLOCK_PERIOD_NS"]

CLOCK_PERIOD_NS = 10


class WatchdogTimeout(AssertionError):
    """The design stopped making progress within the allowed number of cycles."""


def numpy_rng(stream=0):
    """A NumPy generator seeded from the test's seed ``cocotb.RANDOM_SEED`` (``stream`` selects
    independent ones).

    cocotb derives each test's seed from the regression's ``COCOTB_RANDOM_SEED`` and the test's
    name, so the regression seed (logged by cocotb at start-up and by the runner on failure) is the
    one that reproduces a run.
    """
    seed = cocotb.RANDOM_SEED
    regression_seed = os.environ.get("COCOTB_RANDOM_SEED", "the one cocotb logged at start-up")
    cocotb.log.info("NumPy generator %d seeded from this test's seed %d (reproduce with "
                    "COCOTB_RANDOM_SEED=%s)", stream, seed, regression_seed)
    return np.random.default_rng([seed, stream])


async def start_clock_and_reset(dut, cycles=2):
    """Start ``dut.clk`` and hold ``dut.rst`` high for ``cycles`` rising edges."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def wait_until(clock, predicate, *, max_cycles, what="condition"):
    """Wait for rising edges of ``clock`` until ``predicate()`` holds; fail after ``max_cycles``.

    Returns the number of cycles waited. This is the watchdog of every testbench: a design that
    wedges fails with a message naming ``what`` it was waiting for, instead of hanging the run.
    """
    for cycle in range(max_cycles + 1):
        if predicate():
            return cycle
        await RisingEdge(clock)
    raise WatchdogTimeout(f"no progress: {what} not reached within {max_cycles} cycles")


async def wait_for_high(signal, clock, *, max_cycles, what="signal"):
    """Wait until ``signal`` is high, at most ``max_cycles`` cycles of ``clock``: one edge trigger,
    not a poll per cycle (for long waits such as a program's interrupt)."""
    if int(signal.value) != 1:
        await First(RisingEdge(signal), ClockCycles(clock, max_cycles))
        if int(signal.value) != 1:
            raise WatchdogTimeout(f"no progress: {what} not reached within {max_cycles} cycles")


class TransferSpan:
    """Counts clock cycles and records the first transfer on any of ``inputs`` and the last on ``output``.

    ``inputs`` and ``output`` are stream port prefixes (``"i"`` means ``i__valid``/``i__ready``).
    :attr:`cycles` is the span from the first input accepted to the last output delivered, both
    cycles included: the figure the benchmarks report. :meth:`restart` forgets both marks (to
    measure the next job); the counter runs until :meth:`stop`.
    """

    def __init__(self, dut, clock, inputs, output):
        self.cycle = 0
        self.first = None
        self.last = None
        self._inputs = [(getattr(dut, f"{p}__valid"), getattr(dut, f"{p}__ready")) for p in inputs]
        self._output = (getattr(dut, f"{output}__valid"), getattr(dut, f"{output}__ready"))
        self._clock = clock
        self._task = cocotb.start_soon(self._run())

    @property
    def cycles(self):
        """Cycles from the first input transfer to the last output transfer (0 before both)."""
        if self.first is None or self.last is None:
            return 0
        return self.last - self.first + 1

    def restart(self):
        self.first = self.last = None

    def stop(self):
        self._task.cancel()

    async def _run(self):
        out_valid, out_ready = self._output
        while True:
            await RisingEdge(self._clock)
            await ReadOnly()
            self.cycle += 1
            if self.first is None and any(v.value == 1 and r.value == 1 for v, r in self._inputs):
                self.first = self.cycle
            if out_valid.value == 1 and out_ready.value == 1:
                self.last = self.cycle
