"""MXQuantizer in the Amaranth simulator: every exponent and rounding corner, bit-exact.

Each test sends blocks through the whole pipeline and compares codes and scales with
:func:`sim_models.mx.quantize`. The rounding and scale corners are also checked against expectations
worked out by hand from the contract, so a disagreement between the model and the contract shows up
here too, not only a disagreement between the RTL and the model.

The E2M1 tests run on two instances (``instance``): the E2M1-only quantizer (window datapath) and the
all-formats one quantizing to E2M1 (general datapath). The tests at the end cover the other formats,
format switching from block to block, and instances for subsets of the formats.
"""

import random

import ml_dtypes
import numpy as np
import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from rtl.mx.layouts import MXFormat
from rtl.mx.quantizer import (
    FORMATS,
    LATENCY,
    MXQuantizer,
    QuantizeMode,
    quantizer_input_layout,
    quantizer_output_layout,
)
from sim_models import mx
from verification.packing import pack, unpack

MODES = {"floor": QuantizeMode.FLOOR, "rceil": QuantizeMode.RCEIL}
E2M1_ONLY = ("e2m1",)
INSTANCES = {"e2m1_only": E2M1_ONLY, "all_formats": FORMATS}


@pytest.fixture(params=list(INSTANCES), ids=list(INSTANCES))
def instance(request):
    """The supported formats of the quantizer instance under test."""
    return INSTANCES[request.param]


def payload_of(layout, instance, block, mode, fmt="e2m1"):
    fields = {"values": [int(v) for v in block], "mode": MODES[mode].value}
    if len(instance) > 1:
        fields["format"] = MXFormat[fmt.upper()].value
    return pack(layout, fields)

POS_INF = 0x7F80_0000
NEG_INF = 0xFF80_0000
QNAN = 0x7FC0_0000
SNAN = 0x7F80_0001
NEG_ZERO = 0x8000_0000
MAX_FINITE = 0x7F7F_FFFF
MIN_NORMAL = 0x0080_0000
MAX_SUBNORMAL = 0x007F_FFFF
MIN_SUBNORMAL = 0x0000_0001


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def simulate(blocks, modes, *, formats=None, instance=E2M1_ONLY, input_format="fp32", idle_prob=0.0,
             stall_prob=0.0, seed=0, max_cycles=None):
    """Run blocks through the RTL; return (codes (N, 32) uint8, scales (N,) uint8, cycles).

    ``blocks``: (N, 32) array of raw bit patterns (uint32 for fp32, uint16 for bf16). ``modes``: one
    of "floor"/"rceil" per block; ``formats``: one element format per block (default E2M1), sent in
    the ``format`` field when the ``instance`` (its supported formats) has one, and checked against
    the output's ``format`` field. Random idle cycles on the input and stalls on the output come
    from ``seed``; the testbench checks the stream rules on ``o`` every cycle.
    """
    blocks = np.asarray(blocks)
    formats = formats or ["e2m1"] * len(blocks)
    dut = MXQuantizer(input_format, instance)
    layout = quantizer_input_layout(input_format, instance)
    out_layout = data.Layout.cast(quantizer_output_layout(instance))
    payloads = [payload_of(layout, instance, blk, mode, fmt)
                for blk, mode, fmt in zip(blocks, modes, formats, strict=True)]
    out = []
    stats = {"cycles": 0}
    rng = random.Random(seed)
    limit = max_cycles or (len(payloads) + LATENCY + 10) * 20

    async def tb(ctx):
        sent = 0
        held = None                              # o payload seen while stalled
        for cycle in range(limit):
            if len(out) == len(payloads):
                stats["cycles"] = cycle
                return
            present = sent < len(payloads) and not (idle_prob and rng.random() < idle_prob)
            if present:
                ctx.set(dut.i.payload.as_value(), payloads[sent])
            ctx.set(dut.i.valid, int(present))
            ready = not (stall_prob and rng.random() < stall_prob)
            ctx.set(dut.o.ready, int(ready))
            _, _, i_valid, i_ready, o_valid, o_payload = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload.as_value())
            if held is not None:
                assert o_valid and o_payload == held, f"o changed while stalled (cycle {cycle})"
            if i_valid and i_ready:
                sent += 1
            if o_valid and ready:
                block = unpack(out_layout, o_payload)
                if "format" in block:
                    want = MXFormat[formats[len(out)].upper()].value
                    assert block["format"] == want, f"block {len(out)}: format {block['format']} != {want}"
                out.append(block)
                held = None
            elif o_valid:
                held = o_payload
        raise AssertionError(f"only {len(out)} of {len(payloads)} blocks delivered in {limit} cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    codes = np.array([o["codes"] for o in out], dtype=np.uint8).reshape(-1, 32)
    scales = np.array([o["scale"] for o in out], dtype=np.uint8)
    return codes, scales, stats["cycles"]


def golden(blocks, modes, input_format="fp32", formats=None):
    blocks = np.asarray(blocks)
    formats = formats or ["e2m1"] * len(blocks)
    x = blocks.view(ml_dtypes.bfloat16) if input_format == "bf16" else blocks.view(np.float32)
    codes = np.empty(blocks.shape, dtype=np.uint8)
    scales = np.empty(len(blocks), dtype=np.uint8)
    for index, (mode, fmt) in enumerate(zip(modes, formats, strict=True)):
        c, s = mx.quantize(x[index], mode, fmt)
        codes[index], scales[index] = c, s[0]
    return codes, scales


def check(blocks, modes, **kwargs):
    """RTL == golden model, block by block; returns the RTL result for further checks."""
    blocks = np.asarray(blocks)
    codes, scales, _ = simulate(blocks, modes, **kwargs)
    formats = kwargs.get("formats") or ["e2m1"] * len(blocks)
    want_codes, want_scales = golden(blocks, modes, kwargs.get("input_format", "fp32"), formats)
    assert len(scales) == len(blocks), "blocks lost or duplicated"
    for index in range(len(blocks)):
        assert scales[index] == want_scales[index] and np.array_equal(codes[index], want_codes[index]), (
            f"block {index} ({modes[index]}, {formats[index]}): scale {scales[index]:#04x} vs golden "
            f"{want_scales[index]:#04x}\n  rtl    {codes[index].tolist()}\n  golden "
            f"{want_codes[index].tolist()}\n  input  {[hex(int(v)) for v in blocks[index]]}")
    return codes, scales


def both_modes(blocks):
    blocks = np.asarray(blocks)
    return np.concatenate([blocks, blocks]), ["floor"] * len(blocks) + ["rceil"] * len(blocks)


def filler(rng, amax_bits, count=31):
    """``count`` random patterns with magnitude at most ``amax_bits`` (random signs)."""
    mags = rng.integers(0, int(amax_bits & 0x7FFF_FFFF) + 1, count, dtype=np.int64)
    return (mags | (rng.integers(0, 2, count) << 31)).astype(np.uint32)


def with_amax(rng, amax_bits):
    """A block whose largest magnitude is ``amax_bits``, placed at a random position."""
    block = filler(rng, amax_bits)
    return np.insert(block, rng.integers(0, 32), np.uint32(amax_bits))


# ==================================================================================================
# Scale: every exponent, powers of two and just below, subnormals, both clamps
# ==================================================================================================

def test_every_amax_exponent_power_of_two_and_just_below(instance):
    """amax = 2**e and the float just below it, and the largest significand, for every exponent."""
    rng = np.random.default_rng(1)
    blocks = []
    for biased in range(1, 255):
        power = biased << 23
        blocks += [with_amax(rng, power), with_amax(rng, power - 1), with_amax(rng, power | 0x7F_FFFF)]
    blocks = np.array(blocks)
    _, scales = check(*both_modes(blocks), instance=instance)
    floor, rceil = scales[:len(blocks)], scales[len(blocks):]
    for index, biased in enumerate(range(1, 255)):
        # FLOOR: 2**e -> e - 2 (clamped at 0); just below 2**e is one binade lower.
        assert floor[3 * index] == max(biased - 2, 0)
        assert floor[3 * index + 1] == max(biased - 3, 0)
        # RCEIL: 2**e needs no extra step; (2 - ulp) * 2**e exceeds 1.5 and needs one.
        assert rceil[3 * index] == max(biased - 2, 0)
        assert rceil[3 * index + 2] == max(biased - 1, 0)


def test_rceil_threshold_at_one_and_a_half(instance):
    """RCEIL adds one to the exponent exactly when amax's significand exceeds 1.5."""
    rng = np.random.default_rng(2)
    mags = [0x3FC0_0000, 0x3FC0_0001, 0x3FBF_FFFF, 0x40C0_0000, 0x40C0_0001, 0x00C0_0000, 0x00C0_0001,
            0x0140_0001, 0x7F40_0000, 0x7F40_0001]
    blocks = np.array([with_amax(rng, b) for b in mags])
    _, scales = check(*both_modes(blocks), instance=instance)
    rceil = scales[len(mags):]
    assert rceil.tolist() == [125, 126, 125, 127, 128, 0, 0, 1, 252, 253]


def test_subnormal_blocks_are_exact(instance):
    """All-subnormal blocks, subnormals under tiny normals, single subnormals: no flush to zero."""
    rng = np.random.default_rng(3)
    blocks = []
    for amax in (MIN_SUBNORMAL, 2, 3, 0x100, 0x20_0000, 0x40_0000, 0x60_0000, MAX_SUBNORMAL):
        blocks.append(with_amax(rng, amax))
        blocks.append(np.insert(np.zeros(31, np.uint32), 5, np.uint32(amax | 0x8000_0000)))
    # Tiny normal amax (scale codes 0..3, where subnormal elements still round to non-zero codes).
    for amax in (MIN_NORMAL, MIN_NORMAL | 0x40_0001, 0x0100_0000, 0x0180_0000, 0x0200_0000, 0x0280_0000):
        block = filler(rng, MAX_SUBNORMAL)
        blocks.append(np.insert(block, rng.integers(0, 32), np.uint32(amax)))
    codes, scales = check(*both_modes(np.array(blocks)), instance=instance)
    assert scales[0] == 0 and scales[len(blocks)] == 0
    assert codes.any(), "subnormal elements never produced a non-zero code"


def test_subnormal_element_rounding_at_scale_zero(instance):
    """At scale 0 (2**-127) every subnormal f * 2**-149 is y = f / 2**22: all E2M1 midpoints occur."""
    ulp = 1 << 22                                # y = 1 in subnormal fraction units at scale 0
    # Midpoints 0.25 .. 1.75 in y at scale 0, each exactly and one subnormal ulp either side.
    fracs = []
    for quarters in (1, 3, 5, 7):
        t = quarters * ulp // 4
        fracs += [t - 1, t, t + 1]
    blocks = np.zeros((len(fracs), 32), dtype=np.uint32)
    blocks[:, 0] = fracs
    blocks[:, 1] = np.array(fracs, dtype=np.uint32) | 0x8000_0000
    codes, scales = check(blocks, ["floor"] * len(fracs), instance=instance)
    assert set(scales.tolist()) == {0}
    assert codes[:, 0].tolist() == [0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4]
    assert (codes[:, 1] == codes[:, 0] | 8).all()


def test_max_normal_and_upper_scale(instance):
    """The largest finite values give the largest scales (252 FLOOR, 253 RCEIL): no upper clamp."""
    rng = np.random.default_rng(4)
    blocks = np.array([with_amax(rng, MAX_FINITE), with_amax(rng, MAX_FINITE | 0x8000_0000),
                       np.full(32, MAX_FINITE, dtype=np.uint32), with_amax(rng, 0x7F00_0000)])
    codes, scales = check(*both_modes(blocks), instance=instance)
    assert scales.tolist() == [252, 252, 252, 252, 253, 253, 253, 252]
    assert (codes[2] == 7).all() and (codes[6] == 6).all()      # 7.99 saturates; RCEIL gives 3.99 -> 4


def test_lower_scale_clamp(instance):
    """shared below -127 clamps: amax < 2**-125 gives scale 0 in both modes, above it the code counts up."""
    rng = np.random.default_rng(5)
    mags = [0x0000_0001, 0x007F_FFFF, 0x0080_0000, 0x00FF_FFFF, 0x0100_0000, 0x017F_FFFF, 0x0180_0000]
    blocks = np.array([with_amax(rng, b) for b in mags])
    _, scales = check(*both_modes(blocks), instance=instance)
    assert scales[:7].tolist() == [0, 0, 0, 0, 0, 0, 1]
    assert scales[7:].tolist() == [0, 0, 0, 0, 0, 1, 1]


# ==================================================================================================
# Elements: every rounding midpoint, saturation, signs
# ==================================================================================================

# Midpoints of y = x / 2**shared between E2M1 magnitudes, and the codes just below, at, and above.
MIDPOINTS = [(0.25, 0, 0, 1), (0.75, 1, 2, 2), (1.25, 2, 2, 3), (1.75, 3, 4, 4), (2.5, 4, 4, 5),
             (3.5, 5, 6, 6), (5.0, 6, 6, 7)]


@pytest.mark.parametrize("shared", [0, -20, 40, -126])
def test_every_rounding_midpoint(shared, instance):
    """Each midpoint exactly (ties to even) and one float32 ulp either side, both signs."""
    pad = np.float32(4.0 * 2.0 ** shared)      # pins FLOOR's shared exponent; |values| < 8 * 2**shared
    values, want = [], []
    for y, below, tie, above in MIDPOINTS:
        mid = np.float32(y * 2.0 ** shared)
        for v, code in ((np.nextafter(mid, np.float32(0)), below), (mid, tie),
                        (np.nextafter(mid, np.float32(np.inf)), above)):
            values += [v, -v]
            want += [code, code | 8]
    values += [np.float32(6 * 2.0 ** shared), np.float32(7.9 * 2.0 ** shared), np.float32(0.0),
               np.float32(-0.0), np.float32(2.0 ** shared * 0.1), np.float32(-(2.0 ** shared) * 0.1)]
    want += [7, 7, 0, 8, 0, 8]
    rows = -(-len(values) // 31)
    body = np.zeros(rows * 31, dtype=np.float32)
    body[:len(values)] = values
    x = np.concatenate([body.reshape(rows, 31), np.full((rows, 1), pad)], axis=1)
    codes, scales = check(bits_of(x), ["floor"] * rows, instance=instance)
    assert set(scales.tolist()) == {shared + 127}
    assert codes[:, :31].reshape(-1)[:len(values)].tolist() == want


def test_all_e2m1_values_round_trip(instance):
    """Every E2M1 value times a power of two quantizes to its own code (both modes)."""
    x = np.tile(mx.E2M1_VALUES, 2) * np.float32(2.0 ** 10)
    codes, scales = check(*both_modes(bits_of(x[None, :])), instance=instance)
    assert scales.tolist() == [137, 137]
    assert codes[0].tolist() == list(range(16)) * 2 and codes[1].tolist() == list(range(16)) * 2


def test_floor_saturates_and_rceil_does_not(instance):
    """FLOOR maps amax in (5, 8) * 2**s to 6 * 2**s (code 7); RCEIL keeps every element <= 6."""
    x = np.zeros((3, 32), dtype=np.float32)
    x[0, 0], x[1, 0], x[2, 0] = 7.5, 5.5, -7.0
    x[:, 1] = 1.0
    codes, scales = check(*both_modes(bits_of(x)), instance=instance)
    assert codes[:3, 0].tolist() == [7, 7, 15] and scales[:3].tolist() == [127, 127, 127]
    assert scales[3:].tolist() == [128, 127, 128]     # 5.5 <= 6 needs no extra step
    assert codes[3:, 0].tolist() == [6, 7, 14]        # 3.75 -> 4, 5.5 -> 6, -3.5 -> -4 (tie to even)


def test_negative_zero_and_negative_underflow(instance):
    """-0 and negatives rounding to zero keep the sign: code 0x8 (also in an all-zero block)."""
    x = np.zeros((3, 32), dtype=np.float32)
    x[0, :] = -0.0
    x[1, ::2] = -0.0
    x[2, 0] = 4.0
    x[2, 1:4] = [-0.25, -1e-30, -0.0]
    codes, scales = check(*both_modes(bits_of(x)), instance=instance)
    assert scales[:2].tolist() == [0, 0]
    assert (codes[0] == 8).all() and codes[1].tolist() == [8, 0] * 16
    assert codes[2, 1:4].tolist() == [8, 8, 8]


# ==================================================================================================
# Special blocks
# ==================================================================================================

@pytest.mark.parametrize("special", [POS_INF, NEG_INF, QNAN, SNAN, 0xFFC0_0000, 0x7FFF_FFFF])
def test_nan_and_inf_blocks(special, instance):
    """Any NaN or infinity, at any position, among any values: scale 0xFF and all codes 0."""
    rng = np.random.default_rng(special & 0xFFFF)
    blocks = []
    for position in range(32):
        block = filler(rng, MAX_FINITE, 32)
        block[position] = special
        blocks.append(block)
    blocks.append(np.full(32, special, dtype=np.uint32))
    codes, scales = check(*both_modes(np.array(blocks)), instance=instance)
    assert (scales == 0xFF).all() and not codes.any()


def test_zero_blocks(instance):
    """+0, -0 and mixed zero blocks: scale 0x00, codes 0 for +0 and 0x8 for -0."""
    blocks = np.array([np.zeros(32, np.uint32), np.full(32, NEG_ZERO, np.uint32),
                       np.array([0, NEG_ZERO] * 16, np.uint32)])
    codes, scales = check(*both_modes(blocks), instance=instance)
    assert not scales.any()
    assert codes[:, 0].tolist() == [0, 8, 0] * 2 and codes[2, 1] == 8


# ==================================================================================================
# Random blocks, BF16, flow control
# ==================================================================================================

def random_blocks(rng, count):
    """Blocks spanning the whole exponent range, with sprinkled specials, zeros and subnormals."""
    scale = np.exp2(rng.integers(-150, 128, (count, 1))).astype(np.float64)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal((count, 32)) * scale).astype(np.float32)
    bits = bits_of(x).copy()
    kinds = rng.integers(0, 8, count)
    for index, kind in enumerate(kinds):
        if kind == 0:
            bits[index, rng.integers(0, 32)] = rng.choice([POS_INF, NEG_INF, QNAN])
        elif kind == 1:
            bits[index] = rng.integers(0, 1 << 23, 32) | (rng.integers(0, 2, 32) << 31)
        elif kind == 2:
            bits[index, rng.integers(0, 2, 32) == 1] = 0
    return bits.astype(np.uint32)


def test_random_blocks_both_modes_with_backpressure(instance):
    rng = np.random.default_rng(6)
    blocks = random_blocks(rng, 300)
    modes = [("floor", "rceil")[int(v)] for v in rng.integers(0, 2, len(blocks))]
    check(blocks, modes, idle_prob=0.3, stall_prob=0.4, seed=6, instance=instance)


def test_bf16_instance(instance):
    """BF16 input: corners and random values, against the model's bfloat16 path."""
    rng = np.random.default_rng(7)
    top = (random_blocks(rng, 150) >> 16).astype(np.uint16)
    corners = np.array([[0x7F7F] + [0x0001] * 31, [0x0040] * 32, [0x8000] * 32, [0x7F80] + [0] * 31,
                        [0x7FC0] * 32, [0x40A0, 0x4080, 0x4020, 0x3F40] + [0] * 28,   # 5, 4, 2.5, 0.75
                        [0x3FC0, 0x3FC1, 0x3FBF] + [0] * 29], dtype=np.uint16)
    blocks = np.concatenate([corners, top])
    modes = ["floor", "rceil"] * (len(blocks) // 2) + ["floor"] * (len(blocks) % 2)
    codes, scales = check(blocks, modes, input_format="bf16", stall_prob=0.3, seed=7,
                          instance=instance)
    assert codes[5, :4].tolist() == [6, 6, 4, 2] and scales[5] == 127


def test_full_throughput_and_latency(instance):
    """No backpressure: one block per cycle, first output LATENCY cycles after the first transfer."""
    count = 64
    dut = MXQuantizer("fp32", instance)
    layout = quantizer_input_layout("fp32", instance)
    first_out = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        accepted = delivered = 0
        for cycle in range(count + LATENCY + 2):
            ctx.set(dut.i.payload.as_value(), payload_of(layout, instance, [0x3F80_0000] * 32, "floor"))
            ctx.set(dut.i.valid, int(accepted < count))
            _, _, i_valid, i_ready, o_valid = await ctx.tick().sample(dut.i.valid, dut.i.ready, dut.o.valid)
            if i_valid:
                assert i_ready, f"input stalled at cycle {cycle} with the output ready"
                accepted += 1
            if o_valid:
                if not first_out:
                    first_out.append(cycle)
                delivered += 1
        assert accepted == count and delivered == count

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    # Samples are taken at each clock edge, so index k shows cycle k: the first block, transferred in
    # cycle 0, is on o in cycle LATENCY.
    assert first_out == [LATENCY]


def test_stalled_output_fills_the_pipeline_then_holds_input(instance):
    """With o.ready low the quantizer takes exactly LATENCY blocks, then deasserts i.ready."""
    dut = MXQuantizer("fp32", instance)

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        taken = 0
        for _ in range(3 * LATENCY):
            _, _, i_ready = await ctx.tick().sample(dut.i.ready)
            taken += i_ready
        assert taken == LATENCY and not ctx.get(dut.i.ready)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_heavy_backpressure_keeps_order(instance):
    rng = np.random.default_rng(8)
    blocks = random_blocks(rng, 60)
    check(blocks, ["rceil", "floor", "floor"] * 20, stall_prob=0.85, idle_prob=0.1, seed=8,
          instance=instance)


@pytest.mark.parametrize("bad", ["fp16", "FP32", 32, None])
def test_rejects_unknown_input_format(bad):
    with pytest.raises(ValueError, match="input_format"):
        MXQuantizer(bad)


@pytest.mark.parametrize("bad", ["e2m1", (), ("e2m1", "e2m1"), ("fp4",), ("E2M1",), (4,), None])
def test_rejects_unknown_formats(bad):
    with pytest.raises(ValueError, match="formats"):
        MXQuantizer("fp32", bad)


def test_bubbles_are_squeezed_out_under_backpressure(instance):
    """With ``o`` stalled, an empty stage still fills: gappy input packs into LATENCY blocks in flight.

    The documented flow control: "each stage holds its block while the stage after it is occupied
    and stalled, and an empty stage fills even then, so bubbles are squeezed out under backpressure;
    up to six blocks are in flight". So while ``o.ready`` is low, ``i.ready`` is high exactly when
    fewer than LATENCY blocks are in flight (accepted, not yet delivered), whatever the gaps between
    them. Blocks arrive with one to three idle cycles between them; the output is stalled until the
    pipeline holds LATENCY blocks (and LATENCY cycles more, in which nothing may enter), then released
    for a few cycles, so each stall starts from a different pattern of bubbles. Results must still
    match the golden model, in order. Kills the mutant that drops ``~valid[k] |`` from a stage's load
    (``~valid[k] | load[k + 1]`` -> ``load[k + 1]``), under which the pipeline only advances as a
    whole and a stalled output freezes the bubbles in place.
    """
    seed = 10
    rng = random.Random(seed)
    blocks = random_blocks(np.random.default_rng(seed), 60)
    modes = [rng.choice(["floor", "rceil"]) for _ in blocks]
    layout = quantizer_input_layout("fp32", instance)
    out_layout = data.Layout.cast(quantizer_output_layout(instance))
    payloads = [payload_of(layout, instance, blk, mode) for blk, mode in zip(blocks, modes, strict=True)]
    dut = MXQuantizer("fp32", instance)
    out = []
    stats = {"stalls": 0, "squeezed": 0}

    async def tb(ctx):
        sent, gap, held = 0, 0, None        # held: o's payload seen while stalled

        async def cycle(o_ready):
            nonlocal sent, gap, held
            present = sent < len(payloads) and gap == 0
            if present:
                ctx.set(dut.i.payload.as_value(), payloads[sent])
            ctx.set(dut.i.valid, int(present))
            ctx.set(dut.o.ready, int(o_ready))
            _, _, i_ready, o_valid, o_payload = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.payload.as_value())
            in_flight = sent - len(out)
            want_ready = int(o_ready or in_flight < LATENCY)
            assert i_ready == want_ready, (f"seed {seed}: i.ready {i_ready} with {in_flight} blocks in "
                                           f"flight and o.ready {int(o_ready)}")
            if held is not None:
                assert o_valid and o_payload == held, f"seed {seed}: o changed while stalled"
            if present and i_ready:
                sent += 1
                gap = rng.randint(1, 3)
                if o_valid and not o_ready:
                    stats["squeezed"] += 1      # entered a bubble behind a stalled output
            elif not present and gap:
                gap -= 1
            if o_valid and o_ready:
                out.append(unpack(out_layout, o_payload))
                held = None
            elif o_valid:
                held = o_payload

        while sent < len(payloads):
            # Stall until the pipeline is full of gappy input, then LATENCY cycles more.
            for _ in range(8 * LATENCY):
                if sent - len(out) == LATENCY or sent == len(payloads):
                    break
                await cycle(o_ready=False)
            if sent < len(payloads):
                assert sent - len(out) == LATENCY, f"seed {seed}: only {sent - len(out)} blocks in flight"
                stats["stalls"] += 1
            for _ in range(LATENCY):
                await cycle(o_ready=False)
            for _ in range(rng.randint(1, LATENCY)):
                await cycle(o_ready=True)
        for _ in range(LATENCY + 1):
            await cycle(o_ready=True)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    # Coverage: many stalls, and on average more than one block entered behind a stalled output each.
    assert stats["stalls"] >= 10 and stats["squeezed"] > stats["stalls"], (seed, stats)
    want_codes, want_scales = golden(blocks, modes)
    assert len(out) == len(blocks), f"seed {seed}: {len(out)} of {len(blocks)} blocks delivered"
    for index, block in enumerate(out):
        assert block["scale"] == want_scales[index] and list(block["codes"]) == want_codes[index].tolist(), (
            f"seed {seed}: block {index} ({modes[index]}) differs from the golden model")


# ==================================================================================================
# Every element format (all-formats instance unless stated)
# ==================================================================================================

def format_magnitudes(fmt):
    """Every non-negative finite value of ``fmt``, ascending (float64, exact)."""
    f = mx.element_format(fmt)
    return np.array(sorted({float(v) for v in f.values[:f.sign_bit] if np.isfinite(v)}))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shared", [0, -30, 60, -127])
def test_format_rounding_midpoints(fmt, shared):
    """Each midpoint between neighbouring magnitudes (ties to even) and one float32 ulp either side,
    both signs; the largest normal, halfway to the next binade and beyond it saturate; values below
    half the smallest subnormal and binary32 subnormals (at shared -127) round to signed zero."""
    f = mx.element_format(fmt)
    mags = format_magnitudes(fmt)
    top = f.max_normal
    pad = np.float32(2.0 ** f.emax * 2.0 ** shared)      # pins FLOOR's shared exponent
    values = []
    for lo, hi in zip(mags[:-1], mags[1:], strict=True):
        mid = np.float32((lo + hi) / 2 * 2.0 ** shared)
        values += [np.nextafter(mid, np.float32(0)), mid, np.nextafter(mid, np.float32(np.inf))]
    values += [np.float32(v * 2.0 ** shared) for v in (top, top * 1.0625, top * 1.125, top * 1.24,
                                                         2.0 ** (f.lsb_exponent - 2), 0.0)]
    values += [np.float32(-v) for v in values]
    if shared == -127:
        values += list(np.array([1, 0x40_0000, 0x7F_FFFF, 0x8000_0001], np.uint32).view(np.float32))
    values = np.array([v for v in values if abs(float(v)) < 2.0 ** f.emax * 2.0 ** (shared + 1)],
                      dtype=np.float32)
    rows = -(-len(values) // 31)
    body = np.zeros(rows * 31, dtype=np.float32)
    body[:len(values)] = values
    x = np.concatenate([body.reshape(rows, 31), np.full((rows, 1), pad)], axis=1)
    codes, scales = check(bits_of(x), ["floor"] * rows, formats=[fmt] * rows, instance=FORMATS)
    assert set(scales.tolist()) == {max(shared + 127, 0)}
    if shared > -120:
        # Ties went to the even code: at each midpoint the code is the even one of its two neighbours.
        got = codes[:, :31].reshape(-1)[:len(values)]
        for index in range(len(mags) - 1):
            tie = int(got[3 * index + 1]) & (f.sign_bit - 1)
            assert tie % 2 == 0 and tie in (index, index + 1), (fmt, index, tie)


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_scales_every_exponent(fmt):
    """amax = 2**e, just below it, and the significands either side of the RCEIL threshold, for every
    binary32 exponent: scale = clamp(e - emax (+1 for RCEIL above the threshold), 0, ...)."""
    rng = np.random.default_rng(11)
    f = mx.element_format(fmt)
    threshold = int(round((f.max_normal / 2.0 ** f.emax - 1) * (1 << 23)))
    blocks = []
    for biased in range(1, 255):
        power = biased << 23
        for amax in (power, power - 1, power | threshold, power | (threshold + 1), power | 0x7F_FFFF):
            blocks.append(with_amax(rng, amax))
    blocks = np.array(blocks)
    modes = ["floor", "rceil"] * (len(blocks) // 2 + 1)
    _, scales = check(blocks, modes[:len(blocks)], formats=[fmt] * len(blocks), instance=FORMATS)
    for index in range(len(blocks)):
        biased = index // 5 + 1
        kind = index % 5
        step = modes[index] == "rceil" and kind in (1, 3, 4)    # power - 1 has significand 2 - ulp
        assert scales[index] == max(biased - (kind == 1) - f.emax + step, 0), (fmt, index)


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_every_code_round_trips(fmt):
    """Every finite value of the format times a power of two quantizes to its own code (each block
    also holds the largest normal, which pins the scale in both modes)."""
    f = mx.element_format(fmt)
    finite = [c for c in range(f.code_count) if not f.special[c]]
    finite += finite[:(-len(finite)) % 31]
    rows = np.array(finite).reshape(-1, 31)
    codes_in = np.concatenate([rows, np.full((len(rows), 1), int(np.argmax(f.units)))], axis=1)
    values = f.values[codes_in] * np.float32(2.0 ** -40)
    codes, scales = check(*both_modes(bits_of(values)), formats=[fmt] * (2 * len(values)), instance=FORMATS)
    assert (codes == np.concatenate([codes_in, codes_in])).all()
    assert (scales == 127 - 40).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_special_and_zero_blocks(fmt):
    rng = np.random.default_rng(12)
    blocks = []
    for special in (POS_INF, NEG_INF, QNAN, SNAN):
        block = filler(rng, MAX_FINITE, 32)
        block[rng.integers(0, 32)] = special
        blocks.append(block)
    blocks += [np.zeros(32, np.uint32), np.full(32, NEG_ZERO, np.uint32),
               np.full(32, MAX_FINITE, np.uint32), np.full(32, MIN_SUBNORMAL, np.uint32),
               with_amax(rng, MAX_SUBNORMAL), with_amax(rng, MIN_NORMAL | 0x7F_FFFF)]
    blocks = np.array(blocks)
    codes, scales = check(*both_modes(blocks), formats=[fmt] * (2 * len(blocks)), instance=FORMATS)
    n = len(blocks)
    for half in (0, n):
        assert (scales[half:half + 4] == 0xFF).all() and not codes[half:half + 4].any()
        assert scales[half + 4] == 0 and scales[half + 5] == 0
        assert (codes[half + 5] == mx.element_format(fmt).sign_bit).all()


def mixed_formats_run(instance, count, seed, idle_prob, stall_prob):
    rng = np.random.default_rng(seed)
    blocks = random_blocks(rng, count)
    # Tiny blocks too: binary32 subnormals land in the normal range of the wide formats.
    tiny = rng.integers(0, count, count // 6)
    blocks[tiny] = (rng.integers(0, 1 << 23, (len(tiny), 32)) >> rng.integers(0, 20, (len(tiny), 1))
                    | (rng.integers(0, 2, (len(tiny), 32)) << 31)).astype(np.uint32)
    modes = [("floor", "rceil")[int(v)] for v in rng.integers(0, 2, count)]
    formats = [instance[int(v)] for v in rng.integers(0, len(instance), count)]
    check(blocks, modes, formats=formats, instance=instance, idle_prob=idle_prob,
          stall_prob=stall_prob, seed=seed)


def test_format_switching_under_random_stalls():
    """Random blocks, a random format and mode per block, random idle input and output stalls."""
    mixed_formats_run(FORMATS, 400, 13, idle_prob=0.3, stall_prob=0.4)


@pytest.mark.parametrize("subset", [("e2m1", "e4m3"), ("e5m2",), ("e2m3", "e3m2")])
def test_format_subsets(subset):
    """Instances for some of the formats: bit-exact on those, blocks of any of them in any order."""
    mixed_formats_run(subset, 120, 14, idle_prob=0.2, stall_prob=0.3)


def test_unsupported_format_code_is_the_first_format():
    """A format code the instance does not build is quantized as its first format, and says so."""
    instance = ("e3m2", "e4m3")
    layout = quantizer_input_layout("fp32", instance)
    out_layout = data.Layout.cast(quantizer_output_layout(instance))
    dut = MXQuantizer("fp32", instance)
    x = (np.arange(32, dtype=np.float32) - 10) * np.float32(0.37)
    out = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        for code in (MXFormat.E2M1.value, 7, MXFormat.E4M3.value):
            ctx.set(dut.i.payload.as_value(),
                    pack(layout, {"values": [int(v) for v in bits_of(x)], "mode": 0, "format": code}))
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(LATENCY + 1):
            _, _, o_valid, o_payload = await ctx.tick().sample(dut.o.valid, dut.o.payload.as_value())
            if o_valid:
                out.append(unpack(out_layout, o_payload))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert [block["format"] for block in out] == [MXFormat.E3M2.value] * 2 + [MXFormat.E4M3.value]
    for block, fmt in zip(out, ("e3m2", "e3m2", "e4m3"), strict=True):
        codes, scales = mx.quantize(x, "floor", fmt)
        assert block["codes"] == codes.tolist() and block["scale"] == scales[0]
