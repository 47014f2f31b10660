"""cocotb testbench of :class:`rtl.mx.quantizer.MXQuantizer`, scoreboarded against the golden model.

Random blocks over the whole binary32 (or bfloat16) range and adversarial blocks (every amax exponent
at and just below a power of two, subnormals, each rounding midpoint and its neighbours, NaN/Inf at
every position, zero and negative-zero blocks, the largest finite values), each with a random
FLOOR/RCEIL mode, through the quantizer with random idle cycles on ``i`` and random stalls on ``o``.
Every output block is compared bit for bit with :func:`sim_models.mx.quantize`; the stream monitors
check the valid/ready rules. Functional coverage of the numeric corner classes is reported by the
last test, which fails if a class was never hit.

The NumPy generator is seeded from ``COCOTB_RANDOM_SEED`` (logged), so one number reproduces a run.
"""

import cocotb
import ml_dtypes
import numpy as np
from amaranth.lib import data
from cocotb_coverage.coverage import CoverPoint, coverage_db, coverage_section

from rtl.mx.layouts import MXBlock
from rtl.mx.quantizer import LATENCY, QuantizeMode, quantizer_input_layout
from sim_models import mx
from verification import config
from verification.bench import TransferSpan, numpy_rng, start_clock_and_reset, wait_until
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamMonitor, StreamSink

OUT_LAYOUT = data.Layout.cast(MXBlock)
MODES = ("floor", "rceil")
MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)
BLOCK_KINDS = ["nan_inf", "all_zero", "subnormal_amax", "low_clamp", "ordinary", "top_scale",
               "rceil_step", "floor_saturates"]


def _input_format():
    return config().get("input_format", "fp32")


# ---- Stimulus --------------------------------------------------------------------------------------

def random_blocks(rng, count):
    """binary32 patterns: normals over the whole range, subnormals, zeros, sprinkled NaN/Inf."""
    exps = rng.integers(-152, 129, (count, 1)).astype(np.float64)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal((count, 32)) * np.exp2(exps)).astype(np.float32)
    bits = x.view(np.uint32).copy()
    kind = rng.integers(0, 10, count)
    for index in np.flatnonzero(kind == 0):
        bits[index, rng.integers(0, 32)] = rng.choice([0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFF80_1234])
    for index in np.flatnonzero(kind == 1):
        bits[index] = rng.integers(0, 1 << 23, 32) | (rng.integers(0, 2, 32) << 31)
    for index in np.flatnonzero(kind == 2):
        bits[index, rng.random(32) < 0.5] = 0x8000_0000
    return bits.astype(np.uint32)


def adversarial_blocks(rng):
    """Corner blocks, in binary32 patterns (BF16 runs keep the upper halves)."""
    blocks = []

    def with_amax(amax, low=None):
        low = amax & 0x7FFF_FFFF if low is None else low
        block = rng.integers(0, low + 1, 32, dtype=np.int64) | (rng.integers(0, 2, 32) << 31)
        block[rng.integers(0, 32)] = amax
        return block.astype(np.uint32)

    for biased in list(range(0, 6)) + list(range(120, 136)) + list(range(249, 255)) \
            + list(rng.integers(0, 255, 12)):
        power = int(biased) << 23
        for amax in (power, power - 1 if power else 1, power | 0x40_0000, power | 0x40_0001,
                     power | 0x7F_FFFF):
            blocks.append(with_amax(amax))
    for shared in (-127, -126, -100, -3, 0, 1, 50, 125):
        pad = np.float32(4.0 * 2.0 ** shared)
        for y in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.5):
            mid = np.float32(y * 2.0 ** shared)
            row = np.array([np.nextafter(mid, np.float32(0)), mid, np.nextafter(mid, np.float32(np.inf))] * 10
                           + [-mid, pad], dtype=np.float32)
            blocks.append(row.view(np.uint32))
    for special in (0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001):
        for position in (0, 13, 31):
            block = with_amax(0x7F7F_FFFF)
            block[position] = special
            blocks.append(block)
    blocks += [np.zeros(32, np.uint32), np.full(32, 0x8000_0000, np.uint32),
               np.full(32, 0x7F7F_FFFF, np.uint32), np.full(32, 0xFF7F_FFFF, np.uint32),
               np.arange(32, dtype=np.uint32), np.full(32, 0x0000_0001, np.uint32)]
    return np.array(blocks, dtype=np.uint32)


def as_format(bits32, input_format):
    """(N, 32) binary32 patterns -> raw patterns of the DUT's input format."""
    if input_format == "bf16":
        return (bits32 >> 16).astype(np.uint16)
    return bits32


def expected(raw, modes, input_format):
    """Golden result per block: list of {"codes": [...], "scale": int}."""
    x = raw.view(ml_dtypes.bfloat16) if input_format == "bf16" else raw.view(np.float32)
    results = {}
    for mode in MODES:
        results[mode] = mx.quantize(x, mode)
    out = []
    for index, mode in enumerate(modes):
        codes, scales = results[mode]
        out.append({"codes": [int(c) for c in codes[index]], "scale": int(scales[index, 0])})
    return out


# ---- Functional coverage ---------------------------------------------------------------------------

def _classify(raw, mode, want, input_format):
    """Corner classes of one block and the rounding ties among its elements."""
    bits = (raw.astype(np.uint32) << 16) if input_format == "bf16" else raw.astype(np.uint32)
    mags = bits & 0x7FFF_FFFF
    amax = int(mags.max())
    scale = want["scale"]
    kinds = []
    if amax >= 0x7F80_0000:
        return ["nan_inf"], []
    if amax == 0:
        kinds.append("all_zero")
    elif amax < 0x0080_0000:
        kinds.append("subnormal_amax")
    elif scale == 0:
        kinds.append("low_clamp")
    else:
        kinds.append("ordinary")
    if scale >= 252:
        kinds.append("top_scale")
    if mode == "rceil" and amax >= 0x0080_0000 and (amax & 0x7F_FFFF) > 0x40_0000 and scale > 0:
        kinds.append("rceil_step")
    y4 = np.abs(bits.view(np.float32).astype(np.float64)) * 2.0 ** (2 - (scale - 127))
    if mode == "floor" and (y4 > 24).any():
        kinds.append("floor_saturates")
    ties = [t for t in MIDPOINT_QUARTERS if (y4 == t).any()]
    return kinds, ties


_cover_block = coverage_section(
    CoverPoint("quantizer.block_kind", xf=lambda kinds, ties, codes, mode: kinds,
               bins=BLOCK_KINDS, inj=False, rel=lambda kinds, b: b in kinds),
    CoverPoint("quantizer.tie_quarters", xf=lambda kinds, ties, codes, mode: ties,
               bins=list(MIDPOINT_QUARTERS), inj=False, rel=lambda ties, b: b in ties),
    CoverPoint("quantizer.code", xf=lambda kinds, ties, codes, mode: codes,
               bins=list(range(16)), inj=False, rel=lambda codes, b: b in codes),
    CoverPoint("quantizer.mode", xf=lambda kinds, ties, codes, mode: mode, bins=list(MODES)),
)


@_cover_block
def _sample(kinds, ties, codes, mode):
    pass


# ---- Test body -------------------------------------------------------------------------------------

async def _run(dut, bits32, *, idle_prob, stall_prob, rng):
    input_format = _input_format()
    in_layout = quantizer_input_layout(input_format)
    raw = as_format(bits32, input_format)
    modes = [MODES[int(v)] for v in rng.integers(0, 2, len(raw))]
    await start_clock_and_reset(dut)
    scoreboard = InOrderScoreboard("quantizer.o", formatter=lambda b: f"scale {b['scale']:#04x} "
                                                                       f"codes {b['codes']}")
    driver = StreamDriver(dut, "i", dut.clk, layout=in_layout, idle_prob=idle_prob)
    sink = StreamSink(dut, "o", dut.clk, layout=OUT_LAYOUT, stall_prob=stall_prob,
                      callback=scoreboard.got)
    inputs = StreamMonitor(dut, "i", dut.clk)
    for index, want in enumerate(expected(raw, modes, input_format)):
        scoreboard.expect(want)
        kinds, ties = _classify(raw[index], modes[index], want, input_format)
        _sample(kinds, ties, set(want["codes"]), modes[index])
        driver.append({"values": [int(v) for v in raw[index]],
                       "mode": QuantizeMode[modes[index].upper()].value})
    budget = int(len(raw) / (1 - idle_prob) / (1 - stall_prob) * 3) + 100
    await wait_until(dut.clk, lambda: scoreboard.pending == 0, max_cycles=budget,
                     what="every block delivered")
    assert scoreboard.finish() == len(raw)
    return sink, inputs


@cocotb.test()
async def full_rate(dut):
    """No stalls: one block per cycle, first result LATENCY cycles after the first transfer."""
    rng = numpy_rng(0)
    count = 300
    bits = random_blocks(rng, count)
    span_watch = TransferSpan(dut, dut.clk, inputs=("i",), output="o")
    sink, inputs = await _run(dut, bits, idle_prob=0.0, stall_prob=0.0, rng=rng)
    span_watch.stop()
    span = span_watch.cycles
    dut._log.info("%d blocks in %d cycles from first input to last output (latency %d)",
                  count, span, span - count)
    assert sink.monitor.stall_cycles == 0 and inputs.stall_cycles == 0
    assert span == count + LATENCY, f"{count} blocks took {span} cycles, expected {count + LATENCY}"


@cocotb.test()
async def adversarial_with_stalls(dut):
    """Corner blocks with random idle input and random output backpressure."""
    rng = numpy_rng(1)
    await _run(dut, adversarial_blocks(rng), idle_prob=0.2, stall_prob=0.4, rng=rng)


@cocotb.test()
async def random_with_stalls(dut):
    """Random blocks, random modes, random idle input and output backpressure."""
    rng = numpy_rng(2)
    await _run(dut, random_blocks(rng, 800), idle_prob=0.3, stall_prob=0.4, rng=rng)


@cocotb.test()
async def heavy_backpressure(dut):
    """Output ready one cycle in ten: the pipeline must hold every block without loss."""
    rng = numpy_rng(3)
    sink, _ = await _run(dut, random_blocks(rng, 100), idle_prob=0.0, stall_prob=0.9, rng=rng)
    assert sink.monitor.stall_cycles > 0


@cocotb.test()
async def coverage_closed(dut):
    """Runs last: every numeric corner class was hit by the tests above."""
    missed = []
    for name in ("quantizer.block_kind", "quantizer.tie_quarters", "quantizer.code", "quantizer.mode"):
        point = coverage_db[name]
        dut._log.info("coverage %-24s %3d/%-3d %s", name, point.coverage, point.size,
                      dict(point.detailed_coverage))
        missed += [f"{name}={b}" for b, hits in point.detailed_coverage.items() if hits == 0]
    assert not missed, f"coverage holes: {', '.join(missed)}"
