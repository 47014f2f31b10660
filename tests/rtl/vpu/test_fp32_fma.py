"""Fp32Fma against sim_models.vpu._fma_scalar, in the Amaranth simulator.

Directed classes (products that cancel ``c`` exactly and almost exactly, ``c`` far above and far
below the product at every exponent difference around the window's edges, subnormal products and
addends, ties and their neighbours, ties that only ``c``'s sticky bit breaks, overflow, every
combination of special operands) plus seeded
random vectors; every result must match the golden model bit for bit. Vectors stream one per cycle
through the pipeline; one test toggles ``en`` randomly.
"""

import random

import pytest

from rtl.vpu.fp32_fma import Fp32Fma
from sim_models import fp32
from sim_models.vpu import _fma_scalar
from verification.pipeline import run_pipeline

QNAN = fp32.QNAN
SIGN = fp32.SIGN_BIT
LATENCY = {"dsp": 13, "lut": 15}


def run(dut, vectors, enable=None):
    """Present ``(a, b, c)`` vectors one per enabled cycle; return the results in order.

    With ``enable(cycle)`` low, ``en`` is low and the operands carry junk the pipeline must ignore.
    """
    junk = random.Random(0)
    got = run_pipeline(dut, [dict(zip("abc", v, strict=True)) for v in vectors], ["result"],
                       enable_pattern=enable, junk=lambda: {port: junk.getrandbits(32) for port in "abc"})
    return [g["result"] for g in got]


def check(vectors, multiplier="dsp", enable=None):
    dut = Fp32Fma(multiplier=multiplier)
    assert dut.multiplier == multiplier and dut.latency == LATENCY[multiplier]
    got = run(dut, vectors, enable)
    bad = [(v, g, _fma_scalar(*v)) for v, g in zip(vectors, got, strict=True) if g != _fma_scalar(*v)]
    assert not bad, f"{len(bad)} of {len(vectors)} mismatch\n" + "\n".join(
        f"a={a:#010x} b={b:#010x} c={c:#010x}: got {g:#010x}, expected {w:#010x}"
        for (a, b, c), g, w in bad[:10])


def exact(sign, sig, lsb):
    """The binary32 pattern of ``(-1)**sign * sig * 2**lsb``, or None if that is not a binary32 value."""
    bits = fp32.encode_rne(sign, sig, lsb)
    if (bits & 0x7F80_0000) == 0x7F80_0000:
        return None
    _, m, e = fp32.decode_finite(bits)
    return bits if (m << max(e - lsb, 0)) == (sig << max(lsb - e, 0)) else None


def pack(sign, sig, lsb):
    """The binary32 pattern of ``(-1)**sign * sig * 2**lsb``, which must be a binary32 value."""
    bits = exact(sign, sig, lsb)
    assert bits is not None, (sign, sig, lsb)
    return bits


def finite(rng, lo=1, hi=254):
    """A random finite binary32 pattern with a biased exponent in ``[lo, hi]`` (0: subnormal)."""
    return rng.getrandbits(1) << 31 | rng.randint(lo, hi) << 23 | rng.getrandbits(23)


def product(a, b):
    """Exact ``a * b`` of finite patterns as ``(sign, significand, lsb exponent)``."""
    sa, ma, ea = fp32.decode_finite(a)
    sb, mb, eb = fp32.decode_finite(b)
    return sa ^ sb, ma * mb, ea + eb


def short(rng, bits):
    """A significand of at most ``bits`` significant bits, placed at the top of 24."""
    return (rng.getrandbits(bits - 1) | 1 << (bits - 1)) << (24 - bits)


# ------------------------------------------------------------------------------------------------

def test_specials():
    """Every combination of zeros, infinities, NaNs (quiet, signalling, negative) and finite values."""
    specials = [0, SIGN, 0x7F80_0000, 0xFF80_0000, 0x7F80_0001, 0xFFC0_1234]
    finites = [0x3F80_0000, 0x0000_0001, 0x807F_FFFF, 0x7F7F_FFFF, 0xC000_0000]
    values = specials + finites
    check([(a, b, c) for a in values for b in values for c in values
           if a in specials or b in specials or c in specials])


def test_exact_cancellation():
    """``c = -(a * b)`` exactly (+0 whatever the signs), and products that cancel ``c`` to a few bits."""
    seed = 101
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(70):
        # a * b exact in binary32: the significands have at most 24 significant bits together.
        bits_a = rng.randint(1, 23)
        a = pack(rng.getrandbits(1), short(rng, bits_a), rng.randint(-120, 80))
        b = pack(rng.getrandbits(1), short(rng, 24 - bits_a) >> rng.randint(0, 24 - bits_a),
                 rng.randint(-60, 40))
        sp, p, ep = product(a, b)
        if not p or not (-149 <= ep + p.bit_length() - 24 and ep + p.bit_length() <= 128):
            continue
        c = fp32.encode_rne(sp, p, ep)
        vectors += [(a, b, c ^ SIGN), (a ^ SIGN, b, c), (b, a ^ SIGN, c ^ SIGN)]
        # Cancellation to a few bits: c one or two ulps away from -(a * b).
        vectors += [(a, b, (c ^ SIGN) + 1), (a, b, (c ^ SIGN) - 1), (a, b, (c ^ SIGN) + 2)]
    check(vectors)


def test_almost_exact_cancellation():
    """``c = -round(a * b)``: the result is the product's rounding error, exact and tiny."""
    seed = 102
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(120):
        lo = rng.choice([0, 1, 1, 30, 100])
        a, b = finite(rng, lo, lo + 60), finite(rng, 60, 150)
        sp, p, ep = product(a, b)
        c = fp32.encode_rne(sp, p, ep)
        if (c & 0x7F80_0000) == 0x7F80_0000:
            continue
        vectors += [(a, b, c ^ SIGN), (a, b, (c ^ SIGN) + 1), (a, b, (c ^ SIGN) - 1), (a, b, c)]
    check(vectors)


@pytest.mark.parametrize("multiplier", ["dsp", "lut"])
def test_exponent_differences(multiplier):
    """``c``'s lsb from 80 places below the product's lsb to 80 above it, both signs, edge values.

    Covers ``c`` entirely below the window (a sticky bit), partly below, overlapping, just below
    the window's top (the product two places below ``c``'s lsb) and above it (a sticky product),
    with powers of two (a result one binade lower) and all-ones significands (carries).
    """
    seed = 103
    rng = random.Random(seed)
    print(f"seed {seed}")
    diffs = list(range(-30, 3)) + list(range(20, 30)) + list(range(44, 56)) + [60, 70, 80, -50, -80]
    if multiplier == "lut":
        diffs = diffs[::3]
    vectors = []
    for d in diffs:
        for _ in range(6):
            a = finite(rng, 100, 150)
            b = rng.choice([finite(rng, 100, 150), 0x3F80_0000 | rng.getrandbits(1) << 31])
            _, _, ep = product(a, b)
            sig_c = rng.choice([1 << 23, (1 << 24) - 1, rng.getrandbits(23) | 1 << 23,
                                rng.getrandbits(23) | 1 << 23 | 1])
            c = pack(rng.getrandbits(1), sig_c, ep + d)
            vectors.append((a, b, c))
    check(vectors, multiplier)


def test_subnormal_products_and_addends():
    """Subnormal operands, products in and below the subnormal range, subnormal and zero addends."""
    seed = 104
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(200):
        kind = rng.randrange(5)
        if kind == 0:                   # subnormal a, b anything; c subnormal or small
            a, b, c = finite(rng, 0, 0), finite(rng, 1, 254), finite(rng, 0, rng.choice([0, 1, 30]))
        elif kind == 1:                 # product near the subnormal range, c zero or subnormal
            a, b = finite(rng, 40, 90), finite(rng, 40, 90)
            c = rng.choice([0, SIGN, finite(rng, 0, 0), finite(rng, 1, 2)])
        elif kind == 2:                 # product far below the subnormal range: rounds to +-0 or c
            a, b = finite(rng, 0, 30), finite(rng, 0, 30)
            c = rng.choice([0, SIGN, finite(rng, 0, 0), 1, SIGN | 1])
        elif kind == 3:                 # subnormal times large: normal products from subnormals
            a, b = finite(rng, 0, 0) >> rng.randint(0, 22), finite(rng, 150, 254)
            c = finite(rng, 0, 254)
        else:                           # two subnormals and a subnormal addend
            a, b, c = finite(rng, 0, 0), finite(rng, 0, 0), finite(rng, 0, 0)
        vectors.append((a, b, c))
        vectors.append((b, a, c ^ SIGN))
    check(vectors)


def test_sticky_decides_ties():
    """Products exactly half-way between two binary32 values, plus a ``c`` far below them.

    ``(2**23 + x * 2**11) * (2**23 + y * 2**11)`` with odd ``x, y < 2**10`` has 47 bits and exactly
    its guard bit set below the 24 kept ones: a tie. A ``c`` whose top bit is 1 to 70 places below
    the guard bit breaks it, toward or away from zero; from about 22 places below, ``c`` is entirely
    under the window's bit 1 and only its sticky bit carries that information.
    """
    seed = 109
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for below in range(1, 71):
        x, y = rng.getrandbits(9) << 1 | 1, rng.getrandbits(9) << 1 | 1
        a = pack(rng.getrandbits(1), (1 << 23) + (x << 11), rng.randint(-60, 40))
        b = pack(rng.getrandbits(1), (1 << 23) + (y << 11), rng.randint(-40, 20))
        sp, p, ep = product(a, b)
        assert p.bit_length() == 47 and p % (1 << 23) == 1 << 22
        sig_c = rng.choice([1 << 23, (1 << 24) - 1, rng.getrandbits(23) | 1 << 23])
        c = pack(rng.getrandbits(1), sig_c, ep + 22 - below - 23)
        vectors += [(a, b, c), (a, b, c ^ SIGN), (a, b, 0)]
    check(vectors)


def tie_vectors(rng, count):
    """Vectors whose exact result lies exactly half-way between two binary32 values (and neighbours)."""
    vectors = []
    while len(vectors) < count:
        lo = rng.choice([1, 40, 100])
        a, b = finite(rng, lo, lo + 60), finite(rng, 60, 140)
        sp, p, ep = product(a, b)
        # A half-way point near a * b: its rounding, plus half an ulp (on the subnormal grid too).
        lsb = max(ep + p.bit_length() - 24, -149)
        half = ((p << max(ep - lsb + 1, 0)) >> max(lsb - 1 - ep, 0)) | 1    # odd multiple of 2**(lsb-1)
        # c = half-way point - a * b, which must be a binary32 value.
        e = min(ep, lsb - 1)
        diff = (half << (lsb - 1 - e)) - (p << (ep - e))
        c = exact(int(diff < 0) ^ sp, abs(diff), e)
        if c is None:
            continue
        vectors += [(a, b, c), (a, b, c + 1), (a, b, c - 1)]
    return vectors


def test_ties():
    """Exact results half-way between two binary32 values (both parities), and one ulp of c either side."""
    seed = 105
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = tie_vectors(rng, 210)
    ties = 0
    for a, b, c in vectors:
        sp, p, ep = product(a, b)
        sc, mc, ec = fp32.decode_finite(c)
        e = min(ep, ec)
        total = abs((-1) ** sp * (p << (ep - e)) + (-1) ** sc * (mc << (ec - e)))
        lsb = max(e + total.bit_length() - 24, -149)
        ties += lsb > e and total % (1 << (lsb - e)) == 1 << (lsb - e - 1)
    assert ties >= 60, ties
    check(vectors)


def test_overflow():
    """Results near ``2**128 - 2**103`` (the overflow threshold) and products far beyond it."""
    seed = 106
    rng = random.Random(seed)
    print(f"seed {seed}")
    max_finite = fp32.MAX_FINITE
    vectors = [
        (max_finite, 0x3F80_0000, 0x7380_0000),            # MAX + 2**104 - 2**103... rounds up: Inf
        (max_finite, 0x3F80_0000, 0x7300_0000),            # MAX + 2**103: the threshold, a tie: Inf
        (max_finite, 0x3F80_0000, 0x72FF_FFFF),            # just below the threshold: MAX
        (max_finite, 0xBF80_0000, 0xF300_0000),            # negative threshold: -Inf
        (max_finite, 0x4000_0000, 0xFF7F_FFFF),            # 2 * MAX - MAX = MAX, exact
        (max_finite, 0x4000_0000, 0xFF7F_FFFE),            # just above MAX
        (max_finite, max_finite, 0xFF7F_FFFF),             # 2**256 - MAX: Inf
        (0x5F80_0000, 0x5F80_0000, 0xFF7F_FFFF),           # 2**128 - MAX = 2**104: exact
        (0x5F80_0000, 0x5F80_0000, 0),                     # 2**128: Inf
        (0x5F7F_FFFF, 0x5F7F_FFFF, 0),                     # (2**64 - 2**40)**2 < 2**128: finite
    ]
    for _ in range(150):
        a = finite(rng, 180, 254)
        b = finite(rng, 254 - (a >> 23 & 0xFF) + 124, 254 - (a >> 23 & 0xFF) + 128)
        c = rng.choice([0, finite(rng, 250, 254), finite(rng, 200, 254), finite(rng, 1, 100)])
        vectors.append((a, b, c))
    check(vectors)


def test_random_vectors():
    """Random operands over the whole range, and with ``c`` close to the product (cancellation)."""
    seed = 107
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = []
    for _ in range(400):
        kind = rng.randrange(3)
        if kind == 0:
            a, b, c = (rng.getrandbits(32) for _ in range(3))
        elif kind == 1:
            a, b = finite(rng, 0, 254), finite(rng, 0, 254)
            c = finite(rng, 0, 254)
        else:
            a, b = finite(rng, 60, 190), finite(rng, 60, 190)
            sp, p, ep = product(a, b)
            c = fp32.encode_rne(sp ^ 1, p, ep)        # -round(a * b), then nudged
            c = (c + rng.randint(-3, 3)) & 0xFFFF_FFFF if c & 0x7FFF_FFFF else c
            c = c ^ (rng.randrange(4) == 0) << 31
        vectors.append((a, b, c))
    check(vectors)


@pytest.mark.parametrize("multiplier", ["dsp", "lut"])
def test_enable(multiplier):
    """``en`` toggled randomly (junk operands while low): the pipeline holds and loses nothing."""
    seed = 108
    rng = random.Random(seed)
    print(f"seed {seed}")
    vectors = tie_vectors(rng, 60)
    for _ in range(100):
        a, b = finite(rng, 0, 254), finite(rng, 0, 254)
        sp, p, ep = product(a, b)
        c = rng.choice([finite(rng, 0, 254), fp32.encode_rne(sp ^ 1, p, ep), 0, SIGN])
        vectors.append((a, b, c))
    pattern = random.Random(seed + 1)
    check(vectors, multiplier, enable=lambda cycle: int(pattern.random() < 0.6))


def test_bad_multiplier():
    with pytest.raises(ValueError, match="multiplier"):
        Fp32Fma(multiplier="dsp48")
