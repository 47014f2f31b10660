"""cocotb testbench of :class:`rtl.common.stream_register.StreamRegister`.

Random words through the register with random idle cycles on the input and random stalls on the
output; the scoreboard checks order and content, the monitors check the valid/ready rules.
"""

import random

import cocotb

from verification import config
from verification.bench import start_clock_and_reset, wait_until
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamSink


async def _run(dut, count, idle_prob, stall_prob):
    width = config()["width"]
    await start_clock_and_reset(dut)
    scoreboard = InOrderScoreboard("stream_register.o", formatter=hex)
    driver = StreamDriver(dut, "i", dut.clk, idle_prob=idle_prob)
    sink = StreamSink(dut, "o", dut.clk, stall_prob=stall_prob, callback=scoreboard.got)
    for _ in range(count):
        word = random.getrandbits(width)
        scoreboard.expect(word)
        driver.append(word)
    budget = int(count / (1 - idle_prob) / (1 - stall_prob) * 3) + 50
    await wait_until(dut.clk, lambda: scoreboard.pending == 0, max_cycles=budget,
                     what="every word delivered")
    assert scoreboard.finish() == count
    return sink


@cocotb.test()
async def full_rate(dut):
    """No stalls: one word per cycle, latency one cycle."""
    sink = await _run(dut, 200, 0.0, 0.0)
    assert sink.monitor.stall_cycles == 0


@cocotb.test()
async def random_stalls(dut):
    """Random idle input and random output backpressure: nothing lost, duplicated or reordered."""
    await _run(dut, 2000, 0.3, 0.4)


@cocotb.test()
async def heavy_backpressure(dut):
    """Output ready only one cycle in ten: the skid register must hold every word."""
    await _run(dut, 300, 0.0, 0.9)
