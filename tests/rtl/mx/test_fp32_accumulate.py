"""Fp32Accumulate against sim_models.mx.fp32_add_scaled, in the Amaranth simulator.

Directed classes (each exponent difference, rounding ties and their neighbours, carry into the next
binade, the subnormal/normal boundary, overflow, special values) plus seeded random vectors; every
result must match the golden model bit for bit. Vectors stream one per cycle through the pipeline.
"""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from rtl.mx.fp32_accumulate import Fp32Accumulate, leading_zeros
from sim_models import mx

QNAN = 0x7FC0_0000
MAX_DOT = mx.MAX_DOT_QUARTERS


def expected(acc, dot, exp, nan=0, bypass=0):
    if bypass:
        return QNAN if (acc & 0x7FFF_FFFF) > 0x7F80_0000 else acc
    if nan:
        return QNAN
    return mx.fp32_add_scaled(acc, dot, exp)


def run_vectors(vectors, stages=8, enable_pattern=None):
    """Stream ``(acc, dot, exp, nan, bypass)`` tuples through the adder; return the results.

    ``acc`` is sampled ``TERM_LATENCY`` enabled cycles after its term, so the term of vector ``i``
    is presented with the accumulator of vector ``i - TERM_LATENCY``.
    """
    dut = Fp32Accumulate(stages)
    latency = dut.latency
    results = []

    async def tb(ctx):
        issued = 0                         # terms taken so far
        cycle = 0
        ages = []                          # enabled edges seen by each vector in flight
        while len(results) < len(vectors):
            en = 1 if enable_pattern is None else enable_pattern(cycle)
            if issued < len(vectors):
                _, dot, exp, nan, bypass = vectors[issued]
                ctx.set(dut.term.dot, dot)
                ctx.set(dut.term.exp, exp)
                ctx.set(dut.term.nan, nan)
                ctx.set(dut.bypass, bypass)
            lag = issued - Fp32Accumulate.TERM_LATENCY
            if 0 <= lag < len(vectors):
                ctx.set(dut.acc, vectors[lag][0])
            ctx.set(dut.en, en)
            await ctx.tick()
            cycle += 1
            if en:
                ages = [age + 1 for age in ages]
                if issued < len(vectors):
                    ages.append(1)
                    issued += 1
                elif issued < len(vectors) + Fp32Accumulate.TERM_LATENCY:
                    issued += 1            # enabled cycles that present the last accumulators
                if ages and ages[0] == latency:
                    ages.pop(0)
                    results.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def check(vectors, **kwargs):
    vectors = [tuple(v) + (0,) * (5 - len(v)) for v in vectors]
    got = run_vectors(vectors, **kwargs)
    bad = [(v, g, expected(*v)) for v, g in zip(vectors, got, strict=True) if g != expected(*v)]
    assert not bad, "\n".join(f"acc={v[0]:#010x} dot={v[1]} exp={v[2]} nan={v[3]} bypass={v[4]}: "
                              f"got {g:#010x}, expected {w:#010x}" for v, g, w in bad[:10])


def bits(sign, biased, frac):
    return (sign << 31) | (biased << 23) | frac


def term_at(be_target, dot):
    """``exp`` putting the term ``dot`` at binary32 biased exponent ``be_target`` (None if out of range)."""
    exp = be_target - 124 - abs(dot).bit_length()
    return exp if mx.MIN_BLOCK_EXP <= exp <= mx.MAX_BLOCK_EXP else None


# ------------------------------------------------------------------------------------------------

def test_every_exponent_difference():
    """Term exponent minus accumulator exponent from -60 to +60, add and subtract, several operands."""
    rng = random.Random(1)
    vectors = []
    for acc_be in (1, 2, 30, 127, 200, 254):
        for d in range(-60, 61):
            for _ in range(3):
                frac = rng.getrandbits(23)
                acc = bits(rng.getrandbits(1), acc_be, frac)
                dot = rng.choice([1, -1, MAX_DOT, -MAX_DOT, rng.randrange(-MAX_DOT, MAX_DOT + 1) or 3])
                exp = term_at(acc_be + d, dot)
                if exp is not None:
                    vectors.append((acc, dot, exp))
    for d in range(0, 40):                          # subnormal accumulators against tiny terms
        acc = bits(rng.getrandbits(1), 0, rng.getrandbits(23) | 1)
        dot = rng.randrange(1, MAX_DOT) * rng.choice([1, -1])
        exp = term_at(1 - d, dot)
        if exp is not None:
            vectors.append((acc, dot, exp))
    assert len(vectors) > 1500
    check(vectors)


def test_rounding_ties_and_neighbours():
    """The term lands exactly on half an ulp (ties to even), and one quarter/eighth either side."""
    rng = random.Random(2)
    vectors = []
    for acc_be in (2, 3, 100, 127, 150, 253):
        for frac in (0, 1, 2, 3, 0x7FFFFE, 0x7FFFFF, rng.getrandbits(23), rng.getrandbits(23)):
            for sign in (0, 1):
                acc = bits(sign, acc_be, frac)
                ulp_lsb = acc_be - 150                   # weight of the accumulator's last bit
                for odd in (1, 3, 5, 4095, 4607):
                    for tsign in (1, -1):
                        # odd * 2**(lsb - 1 - j): the low bit sits j bits below the half-ulp point.
                        for j in (0, 1, 2, 3):
                            exp = ulp_lsb - 1 - j + 2
                            if mx.MIN_BLOCK_EXP <= exp <= mx.MAX_BLOCK_EXP:
                                vectors.append((acc, tsign * odd, exp))
                                if odd << j <= MAX_DOT:
                                    vectors.append((acc, tsign * (odd << j), exp))    # exact tie
    check(vectors)


def test_carry_into_next_binade():
    """All-ones significands pushed over the binade edge by addition or by rounding up."""
    vectors = []
    for acc_be in (1, 2, 126, 127, 128, 200, 253):
        for frac in (0x7FFFFF, 0x7FFFFE, 0x7FFFFD):
            for sign in (0, 1):
                acc = bits(sign, acc_be, frac)
                lsb = acc_be - 150
                for dot in (1, 2, 3, 4, 7, 8, 100, MAX_DOT):
                    for shift in (-2, -1, 0, 1, 5, 20):
                        exp = lsb + 2 + shift
                        s = 1 if sign == 0 else -1
                        if mx.MIN_BLOCK_EXP <= exp <= mx.MAX_BLOCK_EXP:
                            vectors.append((acc, s * dot, exp))
                            vectors.append((acc, -s * dot, exp))
    check(vectors)


def test_subnormal_normal_boundary():
    """Results crossing 2**-126 both ways, subnormal inputs and outputs, and tiny terms rounding away."""
    rng = random.Random(4)
    accs = [0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x807F_FFFF,
            0x0080_0000, 0x8080_0000, 0x0080_0001, 0x0040_0000, 0x00FF_FFFF, 0x0100_0000]
    accs += [rng.getrandbits(23) | (rng.getrandbits(1) << 31) for _ in range(8)]
    vectors = []
    for acc in accs:
        for exp in list(range(-160, -100, 3)) + [-254, -200, -149, -148, -147, -146, -125, -124]:
            for dot in (1, -1, 2, -2, 3, -3, 4095, -4095, MAX_DOT, -MAX_DOT,
                        rng.randrange(-MAX_DOT, MAX_DOT + 1)):
                vectors.append((acc, dot, exp))
    check(vectors)


def test_overflow():
    """Sums reaching 2**128 - 2**103 and beyond become infinities of the right sign; just below stay."""
    max_finite = 0x7F7F_FFFF
    vectors = []
    for sign in (0, 1):
        acc = max_finite | (sign << 31)
        s = -1 if sign else 1
        for dot, exp in ((1, 104), (1, 103), (1, 102), (3, 101), (MAX_DOT, 100), (MAX_DOT, 254),
                         (1, 254), (2, 103), (1, 105)):
            vectors += [(acc, s * dot, exp), (acc, -s * dot, exp)]
        for dot in (MAX_DOT, 4095, 1, 2, 3):
            for exp in range(110, 140):
                vectors.append((sign << 31, s * dot, exp))             # the term alone overflows or not
    vectors.append((0x7F00_0000, 4096, 116))
    check(vectors)


def test_special_values():
    """NaN and infinite accumulators, signed zeros, exact cancellation, NaN scales, bypass."""
    rng = random.Random(5)
    accs = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001, 0xFFFF_FFFF,
            0x7FBF_FFFF, 0x3F80_0000, 0xBF80_0000, 0x0000_0001]
    vectors = []
    for acc in accs:
        for dot, exp in ((0, 0), (0, -254), (0, 254), (1, 0), (-1, 0), (MAX_DOT, 254), (-MAX_DOT, 254),
                         (4, 0), (-4, 0), (1, -254)):
            for nan in (0, 1):
                vectors.append((acc, dot, exp, nan))
            vectors.append((acc, dot, exp, 0, 1))                     # bypass keeps acc exactly
    for _ in range(200):                                              # x + (-x) is +0
        dot = rng.randrange(1, MAX_DOT + 1) * rng.choice([1, -1])
        exp = rng.randrange(-140, 120)
        acc = mx.fp32_add_scaled(0, -dot, exp)
        if (acc & 0x7FFF_FFFF) and acc & 0x7F80_0000 != 0x7F80_0000:
            vectors.append((acc, dot, exp))
    check(vectors)


def test_random_vectors():
    rng = random.Random(6)
    vectors = []
    for _ in range(3000):
        if rng.random() < 0.5:
            acc = rng.getrandbits(32)
        else:
            acc = bits(rng.getrandbits(1), rng.choice([0, 1, 2, 127, 253, 254, rng.randrange(256)]),
                       rng.choice([0, 1, 0x7FFFFF, rng.getrandbits(23)]))
        dot = rng.choice([0, 1, -1, MAX_DOT, -MAX_DOT, rng.randrange(-MAX_DOT, MAX_DOT + 1),
                          rng.randrange(-64, 65)])
        exp = rng.choice([rng.randrange(-254, 255), rng.randrange(-160, -100), rng.randrange(90, 140)])
        vectors.append((acc, dot, exp, int(rng.random() < 0.02)))
    check(vectors)


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5, 6, 8, 10])
def test_pipeline_depths(stages):
    """Any number of pipeline registers computes the same function with that latency."""
    rng = random.Random(stages)
    vectors = [(rng.getrandbits(32), rng.randrange(-MAX_DOT, MAX_DOT + 1), rng.randrange(-200, 200))
               for _ in range(300)]
    check(vectors, stages=stages)


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles the pipeline freezes; results still come out in order."""
    rng = random.Random(7)
    vectors = [(rng.getrandbits(32), rng.randrange(-MAX_DOT, MAX_DOT + 1), rng.randrange(-200, 200))
               for _ in range(300)]
    pattern = random.Random(8)
    check(vectors, enable_pattern=lambda cycle: int(pattern.random() < 0.6))



@pytest.mark.parametrize("stages", [1, 8])
def test_bypass_ignores_the_term(stages):
    """A bypassed cycle returns ``acc`` whatever its term carries, a NaN term included.

    ``MacPe`` drives ``bypass = ~valid`` while the operand bus holds arbitrary payload, so a bypassed
    term can have ``nan`` set and any ``dot``/``exp`` bits: the result is still ``acc`` unchanged
    (the canonical NaN only when ``acc`` itself is a NaN). Kills the mutant that drops
    ``& ~self.bypass`` from the term's NaN flag (``self.term.nan & ~self.bypass`` -> ``self.term.nan``),
    which returns 0x7FC00000 for a bypassed NaN term (e.g. acc 0x3F800000). Bypassed and live cycles
    are interleaved, so the bypass flags also travel down a busy pipeline.
    """
    seed = 9
    rng = random.Random(seed)
    accs = [0x3F80_0000, 0xBF80_0000, 0x0000_0000, 0x8000_0000, 0x0000_0001, 0x807F_FFFF, 0x7F7F_FFFF,
            0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001, 0xFFFF_FFFF]
    accs += [rng.getrandbits(32) for _ in range(20)]
    vectors = []
    for acc in accs:
        for nan in (1, 0):
            for _ in range(6):
                # Any bit pattern of the term's fields (beyond the |dot| <= 4608 and -254..254 of a
                # real term), as an idle operand bus would present.
                dot = rng.choice([0, 1, -1, MAX_DOT, -MAX_DOT, -(1 << 13), (1 << 13) - 1,
                                  rng.randrange(-(1 << 13), 1 << 13)])
                exp = rng.choice([0, -256, 255, 254, -254, rng.randrange(-256, 256)])
                vectors.append((acc, dot, exp, nan, 1))
                # A live neighbour with a random term keeps the pipeline busy between bypasses.
                vectors.append((rng.getrandbits(32), rng.randrange(-MAX_DOT, MAX_DOT + 1),
                                rng.randrange(-200, 200), int(rng.random() < 0.2), 0))
    bypassed = [v for v in vectors if v[4]]
    assert {(v[3], (v[0] & 0x7FFF_FFFF) > 0x7F80_0000) for v in bypassed} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    got = run_vectors(vectors, stages=stages)
    for (acc, dot, exp, nan, bypass), result in zip(vectors, got, strict=True):
        if bypass:
            want = QNAN if (acc & 0x7FFF_FFFF) > 0x7F80_0000 else acc
            assert result == want, (f"seed {seed}: bypassed acc={acc:#010x} with term dot={dot} exp={exp} "
                                    f"nan={nan}: got {result:#010x}, expected {want:#010x}")
        else:
            assert result == expected(acc, dot, exp, nan), f"seed {seed}: live acc={acc:#010x} dot={dot}"


def test_leading_zeros_of_every_width():
    """``leading_zeros`` (also used by the vector unit's adders and normalizers at other widths)
    for every width 1..40: zero (count = width), each single bit, each leading bit with random
    bits below it, all ones; against ``width - value.bit_length()``. Widths at and just above a
    power of two need the full ``range(width + 1)`` for the all-zero count (``width + 1`` ->
    ``width - 1`` truncates 16 zeros of a 16-bit value to 0)."""
    seed = 10
    rng = random.Random(seed)
    m = Module()
    units = []
    for width in range(1, 41):
        value = Signal(width, name=f"value{width}")
        units.append((width, value, leading_zeros(m, value, f"lz{width}")))

    async def tb(ctx):
        for width, value, zeros in units:
            cases = [0, (1 << width) - 1] + [1 << i for i in range(width)]
            cases += [(1 << i) | rng.getrandbits(i) if i else 1 for i in range(width)]
            for case in cases:
                ctx.set(value, case)
                assert ctx.get(zeros) == width - case.bit_length(), f"seed {seed}: width {width}, {case:#x}"

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
