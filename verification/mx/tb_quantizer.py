"""cocotb testbench of :class:`rtl.mx.quantizer.MXQuantizer`, scoreboarded against the golden model.

Random blocks over the whole binary32 (or bfloat16) range and adversarial blocks (every amax exponent
at and just below a power of two, subnormals, each rounding midpoint of every supported element
format and its neighbours, values at and above each format's largest normal, NaN/Inf at every
position, zero and negative-zero blocks, the largest finite values), each with a random FLOOR/RCEIL
mode and a random supported element format (so the format switches between consecutive blocks),
through the quantizer with random idle cycles on ``i`` and random stalls on ``o``. The instance's
formats come from the run's config (``formats``, default E2M1 alone).
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

from rtl.mx.layouts import MXFormat
from rtl.mx.quantizer import LATENCY, QuantizeMode, quantizer_input_layout, quantizer_output_layout
from sim_models import mx
from verification import config
from verification.bench import TransferSpan, numpy_rng, start_clock_and_reset, wait_until
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamMonitor, StreamSink

MODES = ("floor", "rceil")
MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)
BLOCK_KINDS = ["nan_inf", "all_zero", "subnormal_amax", "low_clamp", "ordinary", "top_scale",
               "rceil_step", "floor_saturates"]


def _input_format():
    return config().get("input_format", "fp32")


def _formats():
    return tuple(config().get("formats", ("e2m1",)))


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


def adversarial_blocks(rng, formats=("e2m1",)):
    """Corner blocks for the ``formats``, in binary32 patterns (BF16 runs keep the upper halves).

    Returns the blocks and, per block, the format it must be sent with (``None``: any, chosen at
    random): the midpoint rows of a format are built for that format's grid.
    """
    blocks, block_formats = [], []

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
            block_formats.append(None)
    for fmt in formats:
        f = mx.element_format(fmt)
        mags = sorted({float(v) for v in f.values[:f.sign_bit] if np.isfinite(v)})
        points = [(lo + hi) / 2 for lo, hi in zip(mags[:-1], mags[1:], strict=True)]
        points += [f.max_normal, f.max_normal * 1.0625, f.max_normal * 1.125, 2.0 ** (f.lsb_exponent - 1)]
        for shared in (-127, -126, -100, -3, 0, 1, 50, 125):
            if shared + f.emax > 127:                  # the block's amax would overflow binary32
                continue
            pad = np.float32(2.0 ** f.emax * 2.0 ** shared)
            for y in points[::max(1, len(points) // 12)] + points[-4:]:
                if y * 2.0 ** shared >= 2.0 ** 128:        # not a binary32 value
                    continue
                mid = np.float32(y * 2.0 ** shared)
                row = np.array([np.nextafter(mid, np.float32(0)), mid, np.nextafter(mid, np.float32(np.inf))]
                               * 10 + [-mid, pad], dtype=np.float32)
                blocks.append(row.view(np.uint32))
                block_formats.append(fmt)
    for special in (0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001):
        for position in (0, 13, 31):
            block = with_amax(0x7F7F_FFFF)
            block[position] = special
            blocks.append(block)
            block_formats.append(None)
    blocks += [np.zeros(32, np.uint32), np.full(32, 0x8000_0000, np.uint32),
               np.full(32, 0x7F7F_FFFF, np.uint32), np.full(32, 0xFF7F_FFFF, np.uint32),
               np.arange(32, dtype=np.uint32), np.full(32, 0x0000_0001, np.uint32)]
    block_formats += [None] * (len(blocks) - len(block_formats))
    return np.array(blocks, dtype=np.uint32), block_formats


def as_format(bits32, input_format):
    """(N, 32) binary32 patterns -> raw patterns of the DUT's input format."""
    if input_format == "bf16":
        return (bits32 >> 16).astype(np.uint16)
    return bits32


def expected(raw, modes, formats, input_format, with_format):
    """Golden result per block: list of {"codes": [...], "scale": int} (and "format" if the output
    carries one)."""
    x = raw.view(ml_dtypes.bfloat16) if input_format == "bf16" else raw.view(np.float32)
    results = {}
    for mode in MODES:
        for fmt in set(formats):
            results[mode, fmt] = mx.quantize(x, mode, fmt)
    out = []
    for index, (mode, fmt) in enumerate(zip(modes, formats, strict=True)):
        codes, scales = results[mode, fmt]
        want = {"codes": [int(c) for c in codes[index]], "scale": int(scales[index, 0])}
        if with_format:
            want["format"] = MXFormat[fmt.upper()].value
        out.append(want)
    return out


# ---- Functional coverage ---------------------------------------------------------------------------

def _classify(raw, mode, fmt, want, input_format):
    """Corner classes of one block and the rounding ties among its elements."""
    bits = (raw.astype(np.uint32) << 16) if input_format == "bf16" else raw.astype(np.uint32)
    mags = bits & 0x7FFF_FFFF
    amax = int(mags.max())
    scale = want["scale"]
    f = mx.element_format(fmt)
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
    threshold = round((f.max_normal / 2.0 ** f.emax - 1) * (1 << 23))
    if mode == "rceil" and amax >= 0x0080_0000 and (amax & 0x7F_FFFF) > threshold and scale > 0:
        kinds.append("rceil_step")
    y = np.abs(bits.view(np.float32).astype(np.float64)) * 2.0 ** (127 - scale)
    y4 = y * 4
    if mode == "floor" and (y > f.max_normal).any():
        kinds.append("floor_saturates")
    ties = [t for t in MIDPOINT_QUARTERS if (y4 == t).any()] if fmt == "e2m1" else []
    return kinds, ties


_cover_block = coverage_section(
    CoverPoint("quantizer.block_kind", xf=lambda kinds, ties, codes, mode, fmt: kinds,
               bins=BLOCK_KINDS, inj=False, rel=lambda kinds, b: b in kinds),
    CoverPoint("quantizer.tie_quarters", xf=lambda kinds, ties, codes, mode, fmt: ties,
               bins=list(MIDPOINT_QUARTERS), inj=False, rel=lambda ties, b: b in ties),
    CoverPoint("quantizer.code", xf=lambda kinds, ties, codes, mode, fmt: codes if fmt == "e2m1" else (),
               bins=list(range(16)), inj=False, rel=lambda codes, b: b in codes),
    CoverPoint("quantizer.mode", xf=lambda kinds, ties, codes, mode, fmt: mode, bins=list(MODES)),
    CoverPoint("quantizer.format", xf=lambda kinds, ties, codes, mode, fmt: fmt, bins=list(mx.FORMATS)),
)


@_cover_block
def _sample(kinds, ties, codes, mode, fmt):
    pass


# ---- Test body -------------------------------------------------------------------------------------

async def _run(dut, bits32, *, idle_prob, stall_prob, rng, fixed_formats=None):
    input_format, formats = _input_format(), _formats()
    in_layout = quantizer_input_layout(input_format, formats)
    out_layout = data.Layout.cast(quantizer_output_layout(formats))
    with_format = len(formats) > 1
    raw = as_format(bits32, input_format)
    modes = [MODES[int(v)] for v in rng.integers(0, 2, len(raw))]
    chosen = [formats[int(v)] for v in rng.integers(0, len(formats), len(raw))]
    fixed_formats = fixed_formats or [None] * len(raw)
    block_formats = [fixed or pick for fixed, pick in zip(fixed_formats, chosen, strict=True)]
    await start_clock_and_reset(dut)
    scoreboard = InOrderScoreboard("quantizer.o", formatter=lambda b: f"scale {b['scale']:#04x} "
                                                                       f"codes {b['codes']}")
    driver = StreamDriver(dut, "i", dut.clk, layout=in_layout, idle_prob=idle_prob)
    sink = StreamSink(dut, "o", dut.clk, layout=out_layout, stall_prob=stall_prob,
                      callback=scoreboard.got)
    inputs = StreamMonitor(dut, "i", dut.clk)
    for index, want in enumerate(expected(raw, modes, block_formats, input_format, with_format)):
        scoreboard.expect(want)
        fmt = block_formats[index]
        kinds, ties = _classify(raw[index], modes[index], fmt, want, input_format)
        _sample(kinds, ties, set(want["codes"]), modes[index], fmt)
        payload = {"values": [int(v) for v in raw[index]], "mode": QuantizeMode[modes[index].upper()].value}
        if with_format:
            payload["format"] = MXFormat[fmt.upper()].value
        driver.append(payload)
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
    blocks, fixed_formats = adversarial_blocks(rng, _formats())
    await _run(dut, blocks, idle_prob=0.2, stall_prob=0.4, rng=rng, fixed_formats=fixed_formats)


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
    names = ["quantizer.block_kind", "quantizer.mode"]
    if "e2m1" in _formats():
        names += ["quantizer.tie_quarters", "quantizer.code"]
    for name in names:
        point = coverage_db[name]
        dut._log.info("coverage %-24s %3d/%-3d %s", name, point.coverage, point.size,
                      dict(point.detailed_coverage))
        missed += [f"{name}={b}" for b, hits in point.detailed_coverage.items() if hits == 0]
    formats = coverage_db["quantizer.format"].detailed_coverage
    missed += [f"quantizer.format={f}" for f in _formats() if formats[f] == 0]
    assert not missed, f"coverage holes: {', '.join(missed)}"
