"""Acc48Add against sim_models.vpu._acc_add, in the Amaranth simulator.

Directed classes: every exponent difference from 0 to 60 (and far beyond) in both operand orders,
additions and subtractions; cancellation (equal exponents and exponents one apart, down to exact
zero); sums whose dropped bits are exactly half an ulp (ties to even) and one unit either side,
with both parities of the kept significand; carries into the next binade; zeros (with any sign,
exponent and low significand bits) and ``a_clear``; the exponent range of ``sum_squares``. Then
seeded random vectors and a run with the clock enable toggling. Vectors stream one per cycle;
every sum must match the model bit for bit.
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.vpu.accumulator import ACC_BITS, Acc48Add
from sim_models import vpu

TOP = 1 << (ACC_BITS - 1)
FULL = (1 << ACC_BITS) - 1
EXP_LO, EXP_HI = -345, 230          # accumulator exponents of sum_squares rows


def canonical(operand, clear=0):
    """The model's form of an operand: a zero (bit 47 clear, or cleared) is ``(0, 0, 0)``."""
    return (0, 0, 0) if clear or operand[1] < TOP else operand


def model_sums(vectors):
    """``_acc_add`` of every ``((sa, ma, ea), (sb, mb, eb)[, a_clear])``, as a list of ``(s, m, e)``."""
    ops = [(canonical(v[0], v[2] if len(v) > 2 else 0), canonical(v[1])) for v in vectors]
    a = tuple(np.array([v[0][k] for v in ops], dtype=np.int64) for k in range(3))
    b = tuple(np.array([v[1][k] for v in ops], dtype=np.int64) for k in range(3))
    s, m, e = vpu._acc_add(a, b)
    return list(zip(s.tolist(), m.tolist(), e.tolist(), strict=True))


def run(vectors, stages=Acc48Add.DEFAULT_STAGES, enable=None, tag_width=0):
    """Stream the operand pairs through an Acc48Add; return ``[(sign, mag, exp, tag)]`` in order."""
    dut = Acc48Add(stages=stages, tag_width=tag_width)
    latency = dut.latency
    results = []

    async def tb(ctx):
        issued, cycle, ages = 0, 0, []
        while len(results) < len(vectors):
            en = 1 if enable is None else enable(cycle)
            ctx.set(dut.en, en)
            if issued < len(vectors):
                vector = vectors[issued]
                for port, (sign, mag, exp) in zip((dut.a, dut.b), vector[:2], strict=True):
                    ctx.set(port, {"sign": sign, "mag": mag, "exp": exp})
                ctx.set(dut.a_clear, vector[2] if len(vector) > 2 else 0)
                if tag_width:
                    ctx.set(dut.tag, issued % (1 << tag_width))
            await ctx.tick()
            cycle += 1
            if en:
                ages = [age + 1 for age in ages]
                if issued < len(vectors):
                    ages.append(1)
                    issued += 1
                if ages and ages[0] == latency:
                    ages.pop(0)
                    out = ctx.get(dut.sum)
                    tag = ctx.get(dut.tag_out) if tag_width else None
                    results.append((out.sign, out.mag, out.exp, tag))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def check(vectors, seed, **kwargs):
    got = run(vectors, **kwargs)
    want = model_sums(vectors)
    bad = [(v, g[:3], w) for v, g, w in zip(vectors, got, want, strict=True) if g[:3] != w]
    assert not bad, f"seed {seed}: {len(bad)} of {len(vectors)} mismatches\n" + "\n".join(
        f"a={v[0]} b={v[1]} a_clear={v[2:]}: got {g}, expected {w}" for v, g, w in bad[:8])
    return got


def operand(rng, exp=None):
    """A random normalized accumulator of either sign."""
    if exp is None:
        exp = rng.randrange(EXP_LO, EXP_HI)
    mag = rng.choice([TOP, FULL, TOP | 1, FULL - 1, TOP | rng.getrandbits(ACC_BITS - 1),
                      TOP | rng.getrandbits(ACC_BITS - 1), TOP | rng.getrandbits(8) << 20])
    return (rng.getrandbits(1), mag, exp)


def exact_sum(x, y):
    """Exact ``x + y`` of two accumulators as ``(integer, exponent)``."""
    e = min(x[2], y[2])
    total = 0
    for s, mag, exp in (x, y):
        total += (-1) ** s * (mag << (exp - e))
    return total, e


def near_tie(rng, x, y, low):
    """Move ``y``'s low bits so the exact sum's dropped bits read ``low(half)``; None if impossible."""
    total, _ = exact_sum(x, y)
    drop = abs(total).bit_length() - ACC_BITS
    scale = y[2] - min(x[2], y[2])
    if drop < 1 or scale:
        return None
    # total's low `drop` bits come from y's low bits (y has the smaller exponent, scale 0).
    half = 1 << (drop - 1)
    target = low(half) & ((1 << drop) - 1)
    sign = -1 if total < 0 else 1                    # adjust |total| through y's signed term
    delta = target - abs(total) % (1 << drop)
    y_term = (-1) ** y[0] * y[1] + sign * delta
    if rng.getrandbits(1):
        y_term += sign * (1 << drop)                 # the other parity of the kept significand
    mag = abs(y_term)
    if not TOP <= mag <= FULL or (y_term < 0) != bool(y[0]):
        return None
    candidate = (y[0], mag, y[2])
    total2, _ = exact_sum(x, candidate)
    if abs(total2).bit_length() - ACC_BITS != drop:
        return None
    return candidate


# ------------------------------------------------------------------------------------------------

def test_exponent_differences():
    """|exp(a) - exp(b)| from 0 to 60 and far beyond, both orders, both signs of each operand."""
    seed = 1
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for d in list(range(0, 61)) + [61, 62, 63, 64, 65, 100, 127, 128, 300, 500]:
        for _ in range(12):
            e_big = rng.randrange(EXP_LO + d if d < 500 else -10, EXP_HI)
            x, y = operand(rng, e_big), operand(rng, e_big - d)
            if e_big - d < -512:
                continue
            vectors += [(x, y), (y, x)]
    assert len(vectors) > 1600
    check(vectors, seed)


def test_cancellation():
    """Subtractions with exponents equal or one apart: every amount of cancellation, exact zero."""
    seed = 2
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(300):
        e = rng.randrange(EXP_LO + 2, EXP_HI)
        s = rng.getrandbits(1)
        x = operand(rng, e)
        x = (s, x[1], e)
        k = rng.randrange(0, ACC_BITS)
        # equal exponents: difference of about 2**k, in both orders; and exactly zero
        diff = rng.getrandbits(k + 1) if k else rng.getrandbits(1)
        y_mag = x[1] - diff if x[1] - diff >= TOP else x[1] + diff
        if TOP <= y_mag <= FULL:
            vectors += [(x, (1 - s, y_mag, e)), ((1 - s, y_mag, e), x)]
        vectors += [(x, (1 - s, x[1], e))]
        # one apart: 2X - Y of about 2**k (X has the larger exponent)
        y_mag = 2 * x[1] - (rng.getrandbits(k + 1) | (1 << k))
        if TOP <= y_mag <= FULL:
            vectors += [(x, (1 - s, y_mag, e - 1)), ((1 - s, y_mag, e - 1), x)]
        y = operand(rng, e - 1)                       # no cancellation to speak of
        vectors += [(x, (1 - s, y[1], e - 1))]
    got = check(vectors, seed)
    zeros = sum(1 for g in got if g[1] == 0)
    assert zeros >= 300, zeros


def test_rounding_ties_and_neighbours():
    """Dropped bits exactly half an ulp (ties to even), one unit below and above; both parities."""
    seed = 3
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    ties = 0
    for d in range(0, 50):
        for _ in range(12):
            e = rng.randrange(EXP_LO + 60, EXP_HI)
            x = operand(rng, e)
            y = operand(rng, e - d)
            for low in (lambda h: h, lambda h: h - 1, lambda h: h + 1):
                y2 = near_tie(rng, x, y, low)
                if y2 is not None:
                    vectors += [(x, y2), (y2, x)]
                    total, _ = exact_sum(x, y2)
                    drop = abs(total).bit_length() - ACC_BITS
                    ties += abs(total) % (1 << drop) == 1 << (drop - 1)
    assert ties >= 300, ties
    check(vectors, seed)


def test_carry_into_next_binade():
    """All-ones significands pushed over 2**48 by the addition or by the rounding."""
    seed = 4
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for d in range(0, 56):
        for x_mag in (FULL, FULL - 1, FULL - 2, FULL ^ 1 << 3):
            for y_mag in (TOP, FULL, TOP | 1, TOP | rng.getrandbits(ACC_BITS - 1)):
                s = rng.getrandbits(1)
                e = rng.randrange(EXP_LO + 60, EXP_HI)
                vectors += [((s, x_mag, e), (s, y_mag, e - d)), ((s, y_mag, e - d), (s, x_mag, e))]
    check(vectors, seed)


def test_zeros():
    """Zero operands (mag bit 47 clear, any other bits, sign and exponent); zero plus zero is +0."""
    seed = 5
    rng = random.Random(seed)
    print(f"seed {seed}")
    zeros = [(0, 0, 0), (1, 0, 0), (0, 0, -512), (1, 0, 511), (0, 0, 17), (1, 0, -345),
             (0, 1, 3), (1, TOP - 1, -7), (0, rng.getrandbits(ACC_BITS - 1), 200)]
    vectors = []
    for z in zeros:
        for other in zeros + [operand(rng) for _ in range(6)] + [(0, TOP, -512 + 4), (1, FULL, 500)]:
            vectors += [(z, other), (other, z)]
    got = check(vectors, seed)
    assert all(g[:3] == (0, 0, 0) for (a, b), g in zip(vectors, got, strict=True)
               if a[1] < TOP and b[1] < TOP)


def test_a_clear():
    """``a_clear`` makes ``a`` count as +0 whatever it holds: the sum is ``b`` (or +0)."""
    seed = 8
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(200):
        x, y = operand(rng), operand(rng) if rng.random() > 0.1 else (1, rng.getrandbits(20), 9)
        clear = int(rng.random() < 0.5)
        vectors.append((x, y, clear))
    got = check(vectors, seed)
    assert all(g[:3] == canonical(y) for (_, y, clear), g in zip(vectors, got, strict=True) if clear)


def test_random_vectors():
    seed = 6
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(3000):
        x = operand(rng) if rng.random() > 0.03 else (0, 0, 0)
        d = rng.choice([0, 1, 2, 3, 4, rng.randrange(64), rng.randrange(600)])
        e = x[2] - d if rng.getrandbits(1) else x[2] + d
        y = operand(rng, min(max(e, -509), 508)) if rng.random() > 0.03 else (0, 0, 0)
        vectors.append((x, y))
    check(vectors, seed)


@pytest.mark.parametrize("stages", [1, 3, 8, 10])
def test_pipeline_depths(stages):
    """Any number of pipeline registers computes the same function with that latency."""
    seed = 100 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(300):
        x = operand(rng)
        y = operand(rng, min(max(x[2] - rng.choice([0, 1, 2, rng.randrange(60)]), -509), 508))
        vectors.append((x, y) if rng.getrandbits(1) else (y, x))
    check(vectors, seed, stages=stages)


def test_clock_enable_and_tag():
    """With ``en`` low on random cycles the pipeline freezes; sums and tags still come out in order."""
    seed = 7
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(400):
        x = operand(rng)
        y = operand(rng, min(max(x[2] - rng.randrange(-4, 50), -509), 508))
        vectors.append((x, y))
    pattern = random.Random(seed + 1)
    got = check(vectors, seed, enable=lambda cycle: int(pattern.random() < 0.6), tag_width=5)
    assert [g[3] for g in got] == [i % 32 for i in range(len(vectors))]


def test_parameters_rejected():
    with pytest.raises(ValueError, match="stages"):
        Acc48Add(stages=0)
    with pytest.raises(ValueError, match="exponent_width"):
        Acc48Add(exponent_width=3)
    with pytest.raises(ValueError, match="tag_width"):
        Acc48Add(tag_width=-1)
