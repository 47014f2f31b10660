"""RoundPack against sim_models.fp32.encode_rne, in the Amaranth simulator.

For several (magnitude width, exponent width) pairs: every result exponent across the
subnormal/normal boundary, underflow to zero and overflow, with magnitudes that are exact, ties
(odd and even), just either side of a tie, all ones (carry into the next binade) and random; the
whole exponent range for the narrow configurations; zero magnitudes; the ``nan``/``inf`` flags; and
seeded random vectors. Vectors stream one per cycle; one test toggles ``en`` randomly.
"""

import random

import pytest

from rtl.vpu.round_pack import QNAN, RoundPack, spread_registers
from sim_models import fp32
from verification.pipeline import run_pipeline

CONFIGS = [(28, 9), (48, 10), (50, 12), (34, 11), (24, 8), (3, 4)]
PORTS = ("sign", "magnitude", "exponent", "nan", "inf")


def expected(sign, magnitude, exponent, nan=0, inf=0):
    if nan:
        return QNAN
    if inf:
        return fp32.NEG_INF if sign else fp32.POS_INF
    return fp32.encode_rne(sign, magnitude, exponent)


def stream(dut, vectors, enable=None, junk=None):
    """Present ``vectors`` (tuples in ``PORTS`` order) one per enabled cycle; return the results.

    With ``enable(cycle)`` low the inputs carry ``junk()`` instead, which the pipeline must ignore.
    """
    got = run_pipeline(dut, [dict(zip(PORTS, v, strict=False)) for v in vectors], ["result"],
                       enable_pattern=enable,
                       junk=(lambda: dict(zip(PORTS, junk(), strict=False))) if junk else None)
    return [g["result"] for g in got]


def check(vectors, width, exp_width, stages=RoundPack.DEFAULT_STAGES, **kwargs):
    vectors = [tuple(v) + (0,) * (len(PORTS) - len(v)) for v in vectors]
    for _, magnitude, exponent, *_ in vectors:
        assert 0 <= magnitude < 1 << width and -(1 << (exp_width - 1)) <= exponent < 1 << (exp_width - 1)
    dut = RoundPack(width, exp_width, stages)
    assert dut.latency == stages
    got = stream(dut, vectors, **kwargs)
    bad = [(v, g, expected(*v)) for v, g in zip(vectors, got, strict=True) if g != expected(*v)]
    assert not bad, f"RoundPack({width}, {exp_width}, stages={stages}): {len(bad)} mismatches\n" + "\n".join(
        f"sign={v[0]} magnitude={v[1]:#x} exponent={v[2]} nan={v[3]} inf={v[4]}: "
        f"got {g:#010x}, expected {w:#010x}" for v, g, w in bad[:10])


def magnitudes(rng, width):
    """Magnitudes of every rounding class that fit ``width`` bits (each with its bit length)."""
    out = {1, (1 << width) - 1, 1 << (width - 1), rng.getrandbits(width) | 1 << (width - 1)}
    for drop in range(1, width):                      # the last `drop` bits fall below the lsb
        top = rng.getrandbits(width - drop) | 1 << (width - drop - 1)
        for kept in (top, top | 1, top & ~1, (1 << (width - drop)) - 1):
            half = 1 << (drop - 1)
            for low in (half, half - 1, half + 1, 0, rng.getrandbits(drop)):
                if 0 <= low < 1 << drop:
                    out.add(kept << drop | low)
    for bits in range(1, width + 1):                   # short magnitudes too
        out.add(rng.getrandbits(bits) | 1 << (bits - 1))
    return sorted(out)


def boundary_vectors(rng, width, exp_width, tops, per_top=40):
    """``per_top`` magnitudes of all classes, placed so that their top bit has each weight in ``tops``."""
    lo, hi = -(1 << (exp_width - 1)), (1 << (exp_width - 1)) - 1
    classes = magnitudes(rng, width)
    vectors = []
    for top in tops:
        for magnitude in rng.sample(classes, min(per_top, len(classes))):
            exponent = top - (magnitude.bit_length() - 1)
            if lo <= exponent <= hi:
                vectors.append((rng.getrandbits(1), magnitude, exponent))
    return vectors


# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("width", "exp_width"), CONFIGS)
def test_subnormal_boundary_and_underflow(width, exp_width):
    """Top bit from 2**-177 (far below the grid) to 2**-124: subnormals, ties, carries, zero."""
    seed = width * 100 + exp_width
    rng = random.Random(seed)
    print(f"seed {seed}")
    tops = list(range(-153, -123)) + [-177, -170, -160, -156, -155, -154]
    vectors = boundary_vectors(rng, width, exp_width, tops)
    if exp_width >= 9:
        assert len(vectors) > 1000
    check(vectors, width, exp_width)


@pytest.mark.parametrize(("width", "exp_width"), CONFIGS)
def test_overflow_and_normal_range(width, exp_width):
    """Top bit at 2**125..2**131 (rounding up to 2**128 overflows) and spread over the normal range."""
    seed = width * 100 + exp_width + 1
    rng = random.Random(seed)
    print(f"seed {seed}")
    tops = [125, 126, 127, 128, 129, 131, -126, -1, 0, 1, 63]
    vectors = boundary_vectors(rng, width, exp_width, tops)
    # The exact overflow threshold 2**128 - 2**103 and its neighbours.
    for magnitude, exponent in (((1 << 25) - 1, 103), ((1 << 25) - 2, 103), ((1 << 24) - 1, 104),
                                ((1 << 26) - 3, 102), ((1 << 26) - 5, 102)):
        shift = max(0, magnitude.bit_length() - width)
        if shift == 0 and exponent < 1 << (exp_width - 1):
            vectors += [(0, magnitude, exponent), (1, magnitude, exponent)]
    check(vectors, width, exp_width)


@pytest.mark.parametrize(("width", "exp_width"), [(3, 4), (24, 8), (28, 9)])
def test_every_exponent(width, exp_width):
    """The whole exponent range of the narrower configurations, several magnitudes each."""
    seed = width + 7
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for exponent in range(-(1 << (exp_width - 1)), 1 << (exp_width - 1)):
        for magnitude in (1, (1 << width) - 1, rng.getrandbits(width), rng.getrandbits(width)):
            vectors.append((rng.getrandbits(1), magnitude, exponent))
    check(vectors, width, exp_width)


def test_zero_and_flags():
    """A zero magnitude gives the signed zero; ``nan`` and ``inf`` override whatever is rounded."""
    seed = 11
    rng = random.Random(seed)
    print(f"seed {seed}")
    width, exp_width = 48, 10
    vectors = []
    for exponent in (-512, -300, -150, -149, 0, 103, 104, 200, 511):
        for sign in (0, 1):
            vectors.append((sign, 0, exponent))
            for nan, inf in ((1, 0), (0, 1), (1, 1)):
                magnitude = rng.choice([0, 1, (1 << width) - 1, rng.getrandbits(width)])
                vectors.append((sign, magnitude, exponent, nan, inf))
    check(vectors, width, exp_width)


@pytest.mark.parametrize(("width", "exp_width"), CONFIGS)
def test_random_vectors(width, exp_width):
    seed = 1000 + width * 100 + exp_width
    rng = random.Random(seed)
    print(f"seed {seed}")
    lo, hi = -(1 << (exp_width - 1)), (1 << (exp_width - 1)) - 1
    vectors = []
    for _ in range(400):
        magnitude = rng.getrandbits(rng.randint(1, width))
        if rng.random() < 0.5:                        # near the ends of the binary32 range
            exponent = rng.choice([-150, -140, -126, 100, 127]) - magnitude.bit_length() + rng.randint(-8, 8)
            exponent = min(max(exponent, lo), hi)
        else:
            exponent = rng.randint(lo, hi)
        vectors.append((rng.getrandbits(1), magnitude, exponent, int(rng.random() < 0.02),
                        int(rng.random() < 0.02)))
    check(vectors, width, exp_width)


@pytest.mark.parametrize("stages", [0, 1, 2, 3, 4, 6, 8])
def test_pipeline_depths(stages):
    """Any number of registers computes the same function, with latency ``stages``."""
    seed = 2000 + stages
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = boundary_vectors(rng, 48, 10, [-160, -150, -149, -127, -126, 0, 127, 128])
    check(vectors, 48, 10, stages=stages)


def test_clock_enable_holds_pipeline():
    """With ``en`` low on random cycles (and junk on the inputs) the pipeline holds its contents."""
    seed = 3000
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = boundary_vectors(rng, 28, 9, [-155, -150, -149, -127, -126, -20, 127, 128], per_top=80)
    pattern = random.Random(seed + 1)
    junk = random.Random(seed + 2)
    check(vectors, 28, 9, enable=lambda cycle: int(pattern.random() < 0.6),
          junk=lambda: (junk.getrandbits(1), junk.getrandbits(28), junk.randrange(-256, 256),
                        junk.getrandbits(1), junk.getrandbits(1)))


def test_register_placement():
    """Exactly ``stages`` registers (one per step at most), the last step always registered."""
    weights = RoundPack.weights(48)
    for stages in range(0, 9):
        cuts, extra = spread_registers(weights, stages)
        assert len(cuts) + extra == stages
        assert stages == 0 or len(weights) - 1 in cuts
    cuts, extra = spread_registers((1, 1, 1, 10), 3)          # unbalanced: still three registers
    assert len(cuts) == 3 and 3 in cuts and extra == 0


@pytest.mark.parametrize("bad", [(0, 9, 5), (28, 0, 5), (28, 9, -1), (28.0, 9, 5), (28, 9, True)])
def test_bad_parameters(bad):
    with pytest.raises(ValueError):
        RoundPack(*bad)
