"""RmsScale (RMSNorm's row scale) against sim_models.vpu._rms_inverse, in the Amaranth simulator:
sums of squares of real rows and of every magnitude, eps from 0 to the largest finite, row lengths
from 1 to 8192, and the latency.
"""

import random

import numpy as np
from amaranth.sim import Simulator

from rtl.vpu.rms_scale import RmsScale
from sim_models import fp32, vpu

EPS = [0, 0x3586_37BD, 0x3727_C5AC, 0x0000_0001, 0x007F_FFFF, 0x0080_0000, 0x3F80_0000, 0x7F7F_FFFF,
       0x8000_0000]
"""0, 1e-6, 1e-5, the smallest and largest subnormals, the smallest normal, 1, the largest finite, -0."""


def _sum_squares(bits, lanes=4, slots=4):
    """The reducer's accumulator (sign, mag, exp) of the row's sum of squares."""
    _, sig, lsb = fp32.decode_finite_array(np.asarray(bits, np.int64))
    s, mag, exp = vpu.accumulate48(np.zeros_like(sig), sig * sig, 2 * lsb, lanes, slots)
    return int(s), int(mag), int(exp)


def _random_row(rng, n):
    kind = rng.randrange(4)
    if kind == 0:
        x = np.array([rng.gauss(0, 1) for _ in range(n)], np.float32)
    elif kind == 1:
        scale = 2.0 ** rng.randrange(-149, 100)
        x = np.array([rng.gauss(0, 1) * scale for _ in range(n)], np.float32)
    elif kind == 2:                                      # subnormals only
        return np.array([rng.randrange(0, 1 << 23) | (rng.getrandbits(1) << 31) for _ in range(n)], np.int64)
    else:                                                # uniform finite bit patterns
        return np.array([rng.randrange(0, 0x7F80_0000) | (rng.getrandbits(1) << 31) for _ in range(n)],
                        np.int64)
    return x.view(np.uint32).astype(np.int64)


def scale_cases(rng, count):
    cases = [((0, 0, 0), 1, 0), ((0, 0, 0), 7, 0x3586_37BD), ((0, 0, 0), 8192, 1)]
    for n in (1, 2, 3, 5, 7, 64, 100, 8191, 8192):
        for eps in EPS:
            cases.append((_sum_squares(_random_row(rng, min(n, 64)) if n > 64 else _random_row(rng, n)),
                          n, eps))
    # Exact quotients: V a power of four (the root and the reciprocal exact), V a tie of the 24-bit
    # rounding (x**2 of 25 bits, odd), and the tie just broken by an eps whose bits fall below the
    # divided window.
    for k in (-60, -1, 0, 1, 37):
        for n in (1, 4, 7, 64):
            row = np.full(n, np.float32(2.0 ** k)).view(np.uint32).astype(np.int64)
            cases.append((_sum_squares(row), n, 0))
    # 0, 2**-30 and 2**-32 (under the divided window), 2**-100 (a single bit shifted out of the window)
    for eps in (0, 0x3080_0000, 0x2F80_0000, 0x0D80_0000):
        for x in (4097.0, 4101.0, 4103.0, 8191.0):     # 4101, 4103: r differs between V's neighbours
            cases.append((_sum_squares(np.array([x], np.float32).view(np.uint32).astype(np.int64)), 1, eps))
    # V = 2**24 + 2**24 - 1: 25 ones, rounded up into the next binade
    row = np.array([4096.0], np.float32).view(np.uint32).astype(np.int64)
    cases.append((_sum_squares(row), 1, 0x4B7F_FFFF))
    while len(cases) < count:
        n = rng.choice([1, 3, rng.randrange(1, 65), rng.randrange(1, 8193)])
        row = _random_row(rng, min(n, 48))
        ss = _sum_squares(row)
        if rng.random() < 0.2:                           # any accumulator: mag normalized, any weight
            ss = (0, rng.randrange(1 << 47, 1 << 48), rng.randrange(-345, 250))
        cases.append((ss, n, rng.choice(EPS + [rng.randrange(0, 0x7F80_0000)])))
    return cases


def run_scale(cases):
    dut = RmsScale()
    got = []

    async def tb(ctx):
        for ss, n, eps in cases:
            ctx.set(dut.ss, {"sign": ss[0], "mag": ss[1], "exp": ss[2]})
            ctx.set(dut.n, n)
            ctx.set(dut.eps, eps)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles, busy = 1, 0
            while not ctx.get(dut.done):
                busy += ctx.get(dut.busy)
                await ctx.tick()
                cycles += 1
                assert cycles <= dut.latency, "no done within the latency"
            assert not ctx.get(dut.busy), "busy in the cycle of done"
            got.append((ctx.get(dut.zero), ctx.get(dut.r_sig), ctx.get(dut.r_lsb), cycles, busy))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return dut, got


def test_scale_matches_model():
    seed = 11
    print(f"seed {seed}")
    cases = scale_cases(random.Random(seed), 160)
    dut, got = run_scale(cases)
    bad = []
    for (ss, n, eps), (zero, r_sig, r_lsb, cycles, busy) in zip(cases, got, strict=True):
        want = vpu._rms_inverse(ss, n, eps & 0x7FFF_FFFF)
        have = None if zero else (r_sig, r_lsb)
        if have != want:
            bad.append(f"ss={ss} n={n} eps={eps:#010x}: got {have}, expected {want}")
        if not zero:
            assert cycles == dut.latency, f"seed {seed}: {cycles} cycles, latency {dut.latency}"
            assert busy == dut.latency - 1, f"seed {seed}: busy for {busy} of {cycles} cycles"
    assert not bad, f"seed {seed}:\n" + "\n".join(bad[:10])
