"""Tests of the vector-unit golden model (``sim_models.vpu``) against its documented contract.

Independent views: NumPy's own float32 arithmetic (IEEE, correctly rounded) for the exact operations,
the exact-rational reference of ``exact_reference.py`` for ``fma``, ``reciprocal`` and the
accumulation order, ``ml_dtypes`` for bfloat16 rounding, float64 evaluation for the accuracy bounds
(``sim_models.vpu_reference``), and hand-written tables for the special values.
"""

import importlib.util
from decimal import Decimal, getcontext
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from sim_models import mx, vpu
from sim_models import vpu_reference as accuracy


def _load_reference():
    spec = importlib.util.spec_from_file_location("vpu_exact_reference",
                                                  Path(__file__).with_name("exact_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()

QNAN = 0x7FC0_0000
POS_INF, NEG_INF = 0x7F80_0000, 0xFF80_0000
NEG_ZERO = 0x8000_0000
ONE = 0x3F80_0000
HALF = 0x3F00_0000
NAN_IN = (0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0xFFFF_FFFF)


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def canonical(x):
    """float32 -> bits, every NaN as the canonical NaN (the model's convention)."""
    b = bits_of(x).copy()
    b[np.isnan(np.asarray(x, dtype=np.float32))] = QNAN
    return b


def random_bits(seed, count):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2 ** 32, count, dtype=np.uint64).astype(np.uint32)


# --------------------------------------------------------------------------------------------------
# Exact IEEE operations
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, numpy_op", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_exact_ops_match_numpy_float32(name, numpy_op):
    """Correctly rounded IEEE results: equal to NumPy's float32 arithmetic except NaN payloads."""
    a = random_bits(1, 200_000)
    b = random_bits(2, 200_000)
    # Near-cancellation and equal-exponent cases, where adders go wrong.
    b[:50_000] = a[:50_000] ^ np.uint32(0x8000_0000) ^ (random_bits(3, 50_000) & np.uint32(0xFF))
    specials = accuracy.special_patterns()
    a = np.concatenate([a, np.repeat(specials, specials.size)])
    b = np.concatenate([b, np.tile(specials, specials.size)])
    with np.errstate(all="ignore"):
        want = canonical(numpy_op(f32(a), f32(b)))
    got = bits_of(getattr(vpu, name)(f32(a), f32(b)))
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_exact_zero_signs():
    add = lambda x, y: int(bits_of(vpu.add(f32([x]), f32([y])))[0])  # noqa: E731
    assert add(NEG_ZERO, NEG_ZERO) == NEG_ZERO
    assert add(NEG_ZERO, 0) == 0
    assert add(ONE, ONE | NEG_ZERO) == 0                 # x + (-x) is +0 under round-to-nearest
    assert add(POS_INF, NEG_INF) == QNAN
    mul = lambda x, y: int(bits_of(vpu.mul(f32([x]), f32([y])))[0])  # noqa: E731
    assert mul(NEG_ZERO, ONE) == NEG_ZERO
    assert mul(0, POS_INF) == QNAN
    assert mul(0x0000_0001, 0x0000_0001 | NEG_ZERO) == NEG_ZERO   # underflow keeps the sign


def test_fma_rounds_once():
    a, b, c = random_bits(4, 3000), random_bits(5, 3000), random_bits(6, 3000)
    # Products near c's magnitude, so cancellation and single rounding matter.
    a[:1000] = bits_of(np.float32(1.0) + np.arange(1000, dtype=np.float32) * np.float32(2 ** -20))
    b[:1000] = a[:1000]
    c[:1000] = bits_of(-(f32(a[:1000]).astype(np.float64) ** 2).astype(np.float32))
    got = bits_of(vpu.fma(f32(a), f32(b), f32(c)))
    for x, y, z, r in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=True):
        if any(ref.fp32_is_nan(v) or ref.fp32_is_inf(v) for v in (x, y, z)):
            continue
        exact = ref.fp32_to_fraction(x) * ref.fp32_to_fraction(y) + ref.fp32_to_fraction(z)
        neg_zero = exact == 0 and bool(x >> 31 ^ y >> 31) and bool(z >> 31) \
            and (x & 0x7FFF_FFFF == 0 or y & 0x7FFF_FFFF == 0) and z & 0x7FFF_FFFF == 0
        assert r == ref.round_to_fp32(exact, negative_zero=neg_zero), (hex(x), hex(y), hex(z))


def test_fma_specials():
    fma = lambda x, y, z: int(bits_of(vpu.fma(f32([x]), f32([y]), f32([z])))[0])  # noqa: E731
    assert fma(0, POS_INF, ONE) == QNAN
    assert fma(ONE, POS_INF, NEG_INF) == QNAN
    assert fma(ONE, POS_INF, POS_INF) == POS_INF
    assert fma(ONE, ONE, NEG_INF) == NEG_INF
    assert fma(NEG_ZERO, ONE, NEG_ZERO) == NEG_ZERO
    assert fma(ONE, ONE, ONE | NEG_ZERO) == 0
    assert fma(0x7F7F_FFFF, 0x4000_0000, 0xFF7F_FFFF) == 0x7F7F_FFFF   # no intermediate overflow


def test_max_min_clamp():
    a = np.concatenate([random_bits(7, 20_000), accuracy.special_patterns()])
    b = np.concatenate([random_bits(8, 20_000), accuracy.special_patterns()[::-1]])
    fa, fb = f32(a), f32(b)
    got_max, got_min = bits_of(vpu.max(fa, fb)), bits_of(vpu.min(fa, fb))
    for x, y, gmax, gmin in zip(a.tolist(), b.tolist(), got_max.tolist(), got_min.tolist(), strict=True):
        if ref.fp32_is_nan(x) or ref.fp32_is_nan(y):
            assert gmax == gmin == QNAN
            continue
        vx, vy = float(f32(x)), float(f32(y))             # Python floats order +-Inf exactly
        if vx == vy:                       # equal values: only the zeros differ, and +0 > -0
            assert gmax == (y if x >> 31 else x) and gmin == (x if x >> 31 else y)
        else:
            assert gmax == (x if vx > vy else y) and gmin == (x if vx < vy else y)
    x = f32([0xBF80_0000, 0x4080_0000, QNAN, NEG_ZERO])
    out = bits_of(vpu.clamp(x, np.float32(-0.5), np.float32(2.0)))
    assert out.tolist() == [0xBF00_0000, 0x4000_0000, QNAN, NEG_ZERO]
    assert bits_of(vpu.clamp(f32([NEG_ZERO]), np.float32(0.0), np.float32(1.0))).tolist() == [0]
    with pytest.raises(vpu.VpuError, match="lo <= hi"):
        vpu.clamp(x, np.float32(1.0), np.float32(0.0))
    with pytest.raises(vpu.VpuError, match="NaN"):
        vpu.clamp(x, np.float32("nan"), np.float32(0.0))


def test_scale_is_mul_by_a_scalar():
    x = f32(random_bits(9, 10_000))
    s = np.float32(-3.75)
    with np.errstate(all="ignore"):
        assert (bits_of(vpu.scale(x, s)) == canonical(x * s)).all()


# --------------------------------------------------------------------------------------------------
# Functions: accuracy bounds and special values
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(vpu.UNARY))
def test_unary_accuracy_bound(name):
    """The ulp bound of the contract, on 400k patterns: uniform bits, [-128, 128], and specials."""
    patterns = accuracy.random_patterns(np.random.default_rng(11), 400_000)
    result = accuracy.measure_unary(name, vpu.UNARY[name], patterns)
    assert result["in_scope"] > 150_000            # rsqrt: half the inputs are negative
    assert result["max_ulp"] <= accuracy.ULP_BOUNDS[name], result


def test_reciprocal_is_correctly_rounded():
    bits = np.concatenate([random_bits(12, 3000), accuracy.special_patterns()])
    got = bits_of(vpu.reciprocal(f32(bits)))
    for x, r in zip(bits.tolist(), got.tolist(), strict=True):
        if ref.fp32_is_nan(x) or ref.fp32_is_inf(x) or x & 0x7FFF_FFFF == 0:
            continue
        assert r == ref.round_to_fp32(1 / ref.fp32_to_fraction(x)), hex(x)


# Special-value table of docs/vpu_numerics.md: input -> expected output, per function.
SPECIALS = {
    "exp": {0: ONE, NEG_ZERO: ONE, POS_INF: POS_INF, NEG_INF: 0, 0x4300_0000: POS_INF,
            0xC300_0000: 0, 0x0000_0001: ONE, 0x42B2_0000: POS_INF, 0xC2D0_0000: 0x0000_0000},
    "reciprocal": {0: POS_INF, NEG_ZERO: NEG_INF, POS_INF: 0, NEG_INF: NEG_ZERO, ONE: ONE,
                   0x0000_0001: POS_INF, 0x7F7F_FFFF: 0x0020_0000, 0x4000_0000: HALF},
    "rsqrt": {0: POS_INF, NEG_ZERO: NEG_INF, POS_INF: 0, NEG_INF: QNAN, 0xBF80_0000: QNAN,
              ONE: ONE, 0x4080_0000: HALF, 0x0000_0001: 0x64B5_04F3},
    "sigmoid": {0: HALF, NEG_ZERO: HALF, POS_INF: ONE, NEG_INF: 0, 0x4300_0000: ONE, 0xC300_0000: 0},
    "silu": {0: 0, NEG_ZERO: NEG_ZERO, POS_INF: POS_INF, NEG_INF: NEG_ZERO, 0x4300_0000: 0x4300_0000,
             0xC300_0000: NEG_ZERO, 0x7F7F_FFFF: 0x7F7F_FFFF, 0xFF7F_FFFF: NEG_ZERO},
}


@pytest.mark.parametrize("name", sorted(SPECIALS))
def test_special_values(name):
    table = SPECIALS[name]
    inputs = list(table) + list(NAN_IN)
    want = list(table.values()) + [QNAN] * len(NAN_IN)
    got = bits_of(vpu.UNARY[name](f32(inputs))).tolist()
    assert got == want, [(hex(i), hex(g), hex(w)) for i, g, w in zip(inputs, got, want, strict=True)
                         if g != w]


def test_subnormals_are_kept():
    """Gradual underflow: subnormal results are produced, subnormal inputs used (no flush)."""
    x = f32([0xC2B0_0000])                                         # exp(-88) ~ 6.05e-39, subnormal
    assert 0 < bits_of(vpu.exp(x))[0] < 0x0080_0000
    assert bits_of(vpu.reciprocal(f32([0x7F00_0000])))[0] == 0x0040_0000   # 1/2**127 = 2**-127
    assert bits_of(vpu.reciprocal(f32([0x0040_0000])))[0] == 0x7F00_0000   # and back
    assert bits_of(vpu.add(f32([0x0000_0001]), f32([0x0000_0001])))[0] == 0x0000_0002
    assert bits_of(vpu.silu(f32([0x0000_0100])))[0] == 0x0000_0080        # silu(x) = x/2 near 0


def test_exp_core_constants():
    getcontext().prec = 60
    assert vpu.LOG2E_Q33 == int((Decimal(2) ** 33 / Decimal(2).ln()).to_integral_value())
    assert vpu.LN2_Q18 == int((Decimal(2) ** 18 * Decimal(2).ln()).to_integral_value())
    assert len(vpu.EXP_TABLE_HI) == len(vpu.EXP_TABLE_LO) == 256
    assert vpu.EXP_TABLE_HI[0] == vpu.EXP_TABLE_LO[0] == 2 ** 32
    assert vpu.EXP_TABLE_HI[128] == round(2 ** 0.5 * 2 ** 32)
    assert all(2 ** 32 <= v < 2 ** 33 for v in vpu.EXP_TABLE_HI + vpu.EXP_TABLE_LO)


# --------------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------------

def _round_acc(value: Fraction) -> Fraction:
    """Round to 48 significant bits, nearest-even, unbounded exponent (independent of the model)."""
    if value == 0:
        return Fraction(0)
    mag = abs(value)
    e = ref.floor_log2(mag) - 47
    n = mag / Fraction(2) ** e
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    return (1 if value > 0 else -1) * whole * Fraction(2) ** e


def _sum_reference(terms, lanes, slots):
    width = lanes * slots
    accs = [Fraction(0)] * width
    for i, t in enumerate(terms):
        accs[i % width] = _round_acc(accs[i % width] + t)
    while len(accs) > 1:
        nxt = [_round_acc(accs[j] + accs[j + 1]) for j in range(0, len(accs) - 1, 2)]
        if len(accs) % 2:
            nxt.append(accs[-1])
        accs = nxt
    return ref.round_to_fp32(accs[0])


@pytest.mark.parametrize("n, lanes, slots", [(1, 8, 4), (37, 8, 4), (300, 8, 4), (300, 4, 2),
                                             (300, 1, 1), (96, 3, 1)])
def test_sum_follows_the_documented_order(n, lanes, slots):
    rng = np.random.default_rng(n * 100 + lanes * 10 + slots)
    # Wide dynamic range and both signs, so the 48-bit roundings and the order matter.
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(np.float32)
    terms = [ref.fp32_to_fraction(int(b)) for b in bits_of(x)]
    assert bits_of(vpu.sum(x, lanes, slots))[()] == _sum_reference(terms, lanes, slots)
    squares = [t * t for t in terms]
    assert bits_of(vpu.sum_squares(x, lanes, slots))[()] == _sum_reference(squares, lanes, slots)


def test_sum_order_matters_and_is_documented():
    """1 + 2**-60 - 1: sequential accumulation loses the small term; 48-bit rounding is visible."""
    x = np.array([1.0, 2.0 ** -60, -1.0, 0.0], dtype=np.float32)
    assert vpu.sum(x, lanes=1, slots=1) == 0.0
    assert vpu.sum(x, lanes=2, slots=1) == np.float32(2.0 ** -60)   # 1 and -1 land in one accumulator


def test_reduction_specials():
    rows = f32([[ONE, QNAN, 0, 0], [POS_INF, ONE, 0, 0], [POS_INF, NEG_INF, 0, 0],
                [NEG_INF, ONE, 0, 0], [NEG_ZERO, NEG_ZERO, NEG_ZERO, NEG_ZERO], [0x7F7F_FFFF] * 4])
    assert bits_of(vpu.sum(rows)).tolist() == [QNAN, POS_INF, QNAN, NEG_INF, 0, POS_INF]
    assert bits_of(vpu.sum_squares(rows)).tolist() == [QNAN, POS_INF, POS_INF, POS_INF, 0, POS_INF]
    assert bits_of(vpu.max_reduce(rows)).tolist() == [QNAN, POS_INF, POS_INF, ONE, NEG_ZERO, 0x7F7F_FFFF]
    assert bits_of(vpu.max_reduce(f32([[NEG_ZERO, 0]])))[0] == 0


def test_max_reduce_matches_numpy():
    x = f32(random_bits(13, 64 * 100)).reshape(100, 64)
    x = np.where(np.isnan(x), np.float32(1.0), x)
    assert (vpu.max_reduce(x) == x.max(axis=-1)).all()


# --------------------------------------------------------------------------------------------------
# Composite operations
# --------------------------------------------------------------------------------------------------

def _rows(rng, n, count=4):
    """Rows of very different scales: normal, wide dynamic range, large and tiny magnitudes."""
    out = [rng.standard_normal(n) * 3,
           rng.standard_normal(n) * np.exp(rng.uniform(-40, 40, n)),
           rng.standard_normal(n) * 1e30,
           rng.standard_normal(n) * 1e-30]
    return np.stack(out[:count]).astype(np.float32)


@pytest.mark.parametrize("n", [1, 64, 1024, 8192])
def test_softmax_accuracy(n):
    x = _rows(np.random.default_rng(n), n)
    err = accuracy.row_relative_error(vpu.softmax(x), accuracy.softmax_reference(x))
    assert err <= accuracy.ROW_REL_BOUND, err


@pytest.mark.parametrize("n", [1, 64, 1024, 8192])
def test_rmsnorm_accuracy(n):
    rng = np.random.default_rng(n + 1)
    x = _rows(rng, n)
    gain = (rng.standard_normal(n) * np.exp(rng.uniform(-5, 5, n))).astype(np.float32)
    for eps in (np.float32(1e-6), np.float32(0.0)):
        err = accuracy.row_relative_error(vpu.rmsnorm(x, gain, eps), accuracy.rmsnorm_reference(x, gain, eps))
        assert err <= accuracy.ROW_REL_BOUND, (eps, err)


def test_softmax_specials():
    rows = f32([[ONE, QNAN], [POS_INF, ONE], [NEG_INF, NEG_INF], [NEG_INF, ONE], [0x7F7F_FFFF, 0xFF7F_FFFF]])
    got = bits_of(vpu.softmax(rows)).tolist()
    assert got[:3] == [[QNAN, QNAN]] * 3
    assert got[3] == [0, ONE]
    assert got[4] == [ONE, 0]                                     # x - max overflows to -Inf: exp = 0
    assert abs(float(vpu.softmax(np.zeros(8192, np.float32))[0]) * 8192 - 1) < 1e-6


def test_rmsnorm_specials():
    x = f32([[ONE, QNAN], [POS_INF, ONE], [0, 0], [0x7F7F_FFFF, 0x7F7F_FFFF]])
    g = np.ones(2, np.float32)
    got = bits_of(vpu.rmsnorm(x, g, np.float32(0.0))).tolist()
    assert got[0] == got[1] == got[2] == [QNAN, QNAN]             # all-zero row with eps = 0: 0 * Inf
    assert got[3] == [ONE, ONE]                                   # no overflow of the sum of squares
    assert bits_of(vpu.rmsnorm(f32([[0, 0]]), g, np.float32(1e-6))).tolist() == [[0, 0]]
    out = bits_of(vpu.rmsnorm(f32([[ONE, ONE]]), f32([QNAN, POS_INF]), np.float32(0.0))).tolist()
    assert out == [[QNAN, POS_INF]]


def test_softmax_update_chains_to_softmax():
    """Online softmax over chunks: acc / s equals softmax(x) @ v within the row bound."""
    rng = np.random.default_rng(21)
    n, d = 256, 8
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    v = rng.standard_normal((n, d)).astype(np.float32)
    m, s, acc = np.float32(-np.inf), np.float32(0.0), np.zeros(d, np.float32)
    for start in range(0, n, 64):
        m, s, acc, p = vpu.softmax_update(m, s, acc, x[start:start + 64])
        acc = (acc.astype(np.float64) + p.astype(np.float64) @ v[start:start + 64]).astype(np.float32)
    assert m == x.max()
    want = accuracy.softmax_reference(x) @ v.astype(np.float64)
    np.testing.assert_allclose(acc / s, want, rtol=1e-5, atol=1e-6)


def test_softmax_update_first_chunk_and_nan():
    m, s, acc, p = vpu.softmax_update(np.float32(-np.inf), np.float32(0), np.ones(2, np.float32),
                                      np.array([0.0, -np.inf], np.float32))
    assert (m, s) == (0.0, 1.0) and acc.tolist() == [0.0, 0.0] and p.tolist() == [1.0, 0.0]
    m, s, acc, p = vpu.softmax_update(m, s, acc, np.array([np.nan], np.float32))
    assert np.isnan(m) and np.isnan(s) and np.isnan(acc).all() and np.isnan(p).all()


def test_swiglu_is_silu_times_up():
    g = f32(random_bits(22, 5000))
    u = f32(random_bits(23, 5000))
    with np.errstate(all="ignore"):
        assert (bits_of(vpu.swiglu(g, u)) == canonical(vpu.silu(g) * u)).all()


def test_rope_is_hugging_face_float32_arithmetic():
    rng = np.random.default_rng(24)
    cos, sin = vpu.rope_tables(np.arange(16), 64, theta=10000.0)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    rotated = np.concatenate([-x[:, 32:], x[:, :32]], axis=-1)
    assert (bits_of(vpu.rope(x, cos, sin)) == bits_of(x * cos + rotated * sin)).all()
    pos = np.arange(16, dtype=np.float64)[:, None]
    angles = pos * (1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64.0))
    assert (bits_of(cos[:, :32]) == bits_of(np.cos(angles).astype(np.float32))).all()
    assert (bits_of(cos[:, 32:]) == bits_of(cos[:, :32])).all()


def test_topk():
    x = f32([ONE, 0x4000_0000, 0x4000_0000, QNAN, NEG_ZERO, 0, NEG_INF])
    values, idx = vpu.topk(x, 5)
    assert idx.tolist() == [3, 1, 2, 0, 5]
    assert bits_of(values).tolist() == [QNAN, 0x4000_0000, 0x4000_0000, ONE, 0]
    rng = np.random.default_rng(25)
    y = rng.integers(-4, 4, (50, 64)).astype(np.float32)        # many ties
    values, idx = vpu.topk(y, 8)
    want = np.argsort(-y, axis=-1, kind="stable")[:, :8]
    assert (idx == want).all() and (values == np.take_along_axis(y, want, -1)).all()
    assert idx.dtype == np.int32
    for k in (0, 8, True, 2.0):
        with pytest.raises(vpu.VpuError, match="k must be"):
            vpu.topk(x, k)


# --------------------------------------------------------------------------------------------------
# Conversions and argument checks
# --------------------------------------------------------------------------------------------------

def test_bfloat16_conversions_match_ml_dtypes():
    bits = np.concatenate([random_bits(26, 500_000), accuracy.special_patterns()])
    x = f32(bits)
    got = vpu.to_bfloat16(x)
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(x)
    assert (got[~nan] == want[~nan]).all()
    assert (got[nan] == 0x7FC0).all()
    back = vpu.from_bfloat16(got)
    assert (bits_of(back)[~nan] == got[~nan].astype(np.uint32) << 16).all()
    assert (bits_of(back)[nan] == QNAN).all()


def test_to_mx_is_the_quantizer_contract():
    x = np.random.default_rng(27).standard_normal((4, 64)).astype(np.float32)
    codes, scales = vpu.to_mx(x, "rceil")
    want_codes, want_scales = mx.quantize(x, "rceil")
    assert (codes == want_codes).all() and (scales == want_scales).all()
    with pytest.raises(vpu.VpuError, match="multiple of 32"):
        vpu.to_mx(np.zeros(5, np.float32))


@pytest.mark.parametrize("call, match", [
    (lambda: vpu.exp(np.zeros(3)), "must be float32"),
    (lambda: vpu.add(np.zeros(3, np.float32), np.zeros(4, np.float32)), "same shape"),
    (lambda: vpu.rmsnorm(np.zeros((2, 4), np.float32), np.ones(3, np.float32)), "gain must have shape"),
    (lambda: vpu.rmsnorm(np.zeros(4, np.float32), np.ones(4, np.float32), -1.0), "eps must be"),
    (lambda: vpu.softmax(np.zeros((2, 0), np.float32)), "at least one element"),
    (lambda: vpu.rope(np.zeros(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32)), "even"),
    (lambda: vpu.sum(np.zeros(4, np.float32), lanes=0), "lanes must be"),
    (lambda: vpu.from_bfloat16(np.zeros(2, np.int32)), "uint16"),
])
def test_bad_arguments(call, match):
    with pytest.raises(vpu.VpuError, match=match):
        call()
