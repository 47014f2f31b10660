"""Tests of the MX golden model (``sim_models.mx``) on every OCP MX v1.0 element format.

``test_mx.py`` pins the MXFP4 (E2M1) contract in depth; this file covers the other formats and every
format pair with three independent views: tables written by hand from the OCP MX v1.0 specification,
``ml_dtypes`` (float4_e2m1fn, float6_e2m3fn, float6_e3m2fn, float8_e4m3fn, float8_e5m2), and the
exact-rational reference in ``exact_reference.py``. The scalar and vectorized forms of the model are
also checked against each other, on the same operands.
"""

import importlib.util
import itertools
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_models import mx


def _load_reference():
    # pytest runs in importlib mode: load the sibling reference module from its file.
    spec = importlib.util.spec_from_file_location("mx_exact_reference",
                                                  Path(__file__).with_name("exact_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()

DETERMINISTIC = settings(derandomize=True, deadline=None)

POS_INF = 0x7F80_0000
NEG_INF = 0xFF80_0000
NEG_ZERO = 0x8000_0000
QNAN = 0x7FC0_0000

FORMATS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2")
PAIRS = list(itertools.product(FORMATS, FORMATS))
ML_DTYPES = {"e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn,
             "e3m2": ml_dtypes.float6_e3m2fn, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2}


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def u8(x):
    return np.asarray(x, dtype=np.uint8)


def pow2(e):
    return Fraction(2) ** e


# ==================================================================================================
# The formats, from the specification
# ==================================================================================================

# OCP MX v1.0, tables 1 and 2 (section 5.3): per format the exponent bias, emin and emax, the largest
# normal, the smallest normal and subnormal, and the special codes (sign included).
SPEC = {
    #        bias emin emax  max normal        min normal        min subnormal     NaN codes / Inf codes
    "e2m1": (1, 0, 2, Fraction(6), Fraction(1), Fraction(1, 2), [], []),
    "e2m3": (1, 0, 2, Fraction(15, 2), Fraction(1), Fraction(1, 8), [], []),
    "e3m2": (3, -2, 4, Fraction(28), Fraction(1, 4), Fraction(1, 16), [], []),
    "e4m3": (7, -6, 8, Fraction(448), pow2(-6), pow2(-9), [0x7F, 0xFF], []),
    "e5m2": (15, -14, 15, Fraction(57344), pow2(-14), pow2(-16),
             [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF], [0x7C, 0xFC]),
}

# Every non-negative code's value, written out by binade for FP4 and FP6.
HAND_TABLES = {
    "e2m1": [0, 0.5, 1, 1.5, 2, 3, 4, 6],
    "e2m3": [0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875,
             1, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
             2, 2.25, 2.5, 2.75, 3, 3.25, 3.5, 3.75,
             4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5],
    "e3m2": [0, 0.0625, 0.125, 0.1875, 0.25, 0.3125, 0.375, 0.4375,
             0.5, 0.625, 0.75, 0.875, 1, 1.25, 1.5, 1.75,
             2, 2.5, 3, 3.5, 4, 5, 6, 7,
             8, 10, 12, 14, 16, 20, 24, 28],
}

# FP8 corners from the specification's table 2 (and the values around 1.0).
FP8_CORNERS = {
    "e4m3": {0x00: 0, 0x01: pow2(-9), 0x07: Fraction(7, 8) * pow2(-6), 0x08: pow2(-6), 0x38: 1,
             0x39: Fraction(9, 8), 0x3F: Fraction(15, 8), 0x40: 2, 0x77: 240, 0x78: 256, 0x7E: 448,
             0x80: 0, 0x81: -pow2(-9), 0xB8: -1, 0xFE: -448},
    "e5m2": {0x00: 0, 0x01: pow2(-16), 0x03: Fraction(3, 4) * pow2(-14), 0x04: pow2(-14), 0x3C: 1,
             0x3D: Fraction(5, 4), 0x3F: Fraction(7, 4), 0x40: 2, 0x78: 32768, 0x7B: 57344,
             0x80: 0, 0x83: -Fraction(3, 4) * pow2(-14), 0xBC: -1, 0xFB: -57344},
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_parameters_match_the_specification(fmt):
    bias, emin, emax, top, min_normal, min_subnormal, nan_codes, inf_codes = SPEC[fmt]
    f = mx.element_format(fmt)
    assert (f.bias, f.emin, f.emax) == (bias, emin, emax)
    assert Fraction(f.max_normal) == top == f.max_units * pow2(f.lsb_exponent)
    assert pow2(f.lsb_exponent) == min_subnormal
    assert pow2(f.emin) == min_normal
    assert f.bits == 1 + f.exponent_bits + f.mantissa_bits == {"e2m1": 4, "e2m3": 6, "e3m2": 6}.get(fmt, 8)
    assert f.code_count == 2 ** f.bits and f.sign_bit == f.code_count // 2
    assert np.flatnonzero(f.nan).tolist() == nan_codes
    assert np.flatnonzero(f.inf).tolist() == inf_codes
    assert (f.special == (f.nan | f.inf)).all()
    assert mx.ELEMENT_FORMATS[fmt] is f and mx.FORMATS == FORMATS
    for table in (f.units, f.nan, f.inf, f.special, f.values):
        assert not table.flags.writeable


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_decodes_exactly(fmt):
    f = mx.element_format(fmt)
    hand = HAND_TABLES.get(fmt)
    for code in range(f.code_count):
        value = ref.element_value(code, fmt)
        negative = bool(code & f.sign_bit)
        got = f.values[code]
        assert bool(np.signbit(got)) == negative or np.isnan(got), code
        if value == ref.NAN:
            assert f.nan[code] and np.isnan(got) and f.units[code] == 0
        elif value in (ref.POS_INF, ref.NEG_INF):
            assert f.inf[code] and np.isinf(got) and (got < 0) == negative and f.units[code] == 0
        else:
            assert not f.special[code]
            assert Fraction(float(got)) == value == f.units[code] * pow2(f.lsb_exponent), code
            if hand is not None:
                magnitude = Fraction(hand[code & (f.sign_bit - 1)])
                assert value == (-magnitude if negative else magnitude), code
            if fmt in FP8_CORNERS and code in FP8_CORNERS[fmt]:
                assert value == FP8_CORNERS[fmt][code], code
    assert mx.element_format(fmt).max_units == max(abs(int(u)) for u in f.units)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_matches_ml_dtypes(fmt):
    f = mx.element_format(fmt)
    theirs = np.arange(f.code_count, dtype=np.uint8).view(ML_DTYPES[fmt]).astype(np.float32)
    nan = np.isnan(theirs)
    assert (nan == f.nan).all()
    assert (bits_of(theirs)[~nan] == bits_of(f.values)[~nan]).all()
    assert float(ml_dtypes.finfo(ML_DTYPES[fmt]).max) == f.max_normal


def test_e2m1_tables_are_the_e2m1_format():
    f = mx.element_format("e2m1")
    assert mx.E2M1_HALVES is f.units and mx.E2M1_VALUES is f.values
    assert mx.MAX_DOT_QUARTERS == mx.max_block_dot() == mx.max_block_dot("e2m1", "e2m1") == 4608
    assert mx.dot_unit_exponent() == -2


# Width of the exact block dot product (two's complement, in the pair's unit) for every pair; the
# table is symmetric. Worked out by hand as bit_length(32 * max_units_a * max_units_b) + 1, with
# max_units 12, 60, 448, 229376 = 7 * 2**15 and 3758096384 = 7 * 2**29.
DOT_BITS = {
    ("e2m1", "e2m1"): 14, ("e2m1", "e2m3"): 16, ("e2m1", "e3m2"): 19, ("e2m1", "e4m3"): 28,
    ("e2m1", "e5m2"): 42, ("e2m3", "e2m3"): 18, ("e2m3", "e3m2"): 21, ("e2m3", "e4m3"): 30,
    ("e2m3", "e5m2"): 44, ("e3m2", "e3m2"): 24, ("e3m2", "e4m3"): 33, ("e3m2", "e5m2"): 47,
    ("e4m3", "e4m3"): 42, ("e4m3", "e5m2"): 56, ("e5m2", "e5m2"): 70,
}


@pytest.mark.parametrize("fa, fb", PAIRS)
def test_block_dot_width_and_unit(fa, fb):
    want = DOT_BITS.get((fa, fb)) or DOT_BITS[(fb, fa)]
    assert mx.block_dot_bits(fa, fb) == want
    biggest = 32 * max(abs(ref.element_value(c, fa)) for c, _ in ref.finite_magnitudes(fa)) \
        * max(abs(ref.element_value(c, fb)) for c, _ in ref.finite_magnitudes(fb))
    assert biggest == mx.max_block_dot(fa, fb) * pow2(mx.dot_unit_exponent(fa, fb))
    assert 1 << (want - 2) <= mx.max_block_dot(fa, fb) < 1 << (want - 1)
    # Every product of two finite elements is an integer number of units.
    unit = pow2(mx.dot_unit_exponent(fa, fb))
    for (_, x), (_, y) in itertools.product(ref.finite_magnitudes(fa)[:3], ref.finite_magnitudes(fb)[:3]):
        assert (x * y / unit).denominator == 1


# ==================================================================================================
# Quantize
# ==================================================================================================

def quantize_with_pad(ys, fmt, shared=0, mode="floor"):
    """Quantize float32 ``ys * 2**shared`` in blocks of 31 plus one pad that pins the scale to ``shared``.

    The pad is the largest normal times ``2**shared``: FLOOR and RCEIL both give ``shared`` for it,
    and no other element may exceed it in magnitude. Returns the codes of ``ys`` and the scales.
    """
    f = mx.element_format(fmt)
    ys = np.asarray(ys, dtype=np.float32).ravel()
    rows = -(-ys.size // 31)
    body = np.zeros(rows * 31, dtype=np.float32)
    body[: ys.size] = ys
    body = (body.astype(np.float64) * 2.0 ** shared).astype(np.float32)
    pad = np.float32(f.max_normal * 2.0 ** shared)
    blocks = np.concatenate([body.reshape(rows, 31), np.full((rows, 1), pad, np.float32)], axis=1)
    codes, scales = mx.quantize(blocks, mode, fmt)
    assert (scales == shared + 127).all()
    return codes[:, :31].reshape(-1)[: ys.size], scales


def neighbours_of_midpoints(fmt):
    """float32 values at, one ulp below and one ulp above every midpoint between neighbouring
    magnitudes of ``fmt``, every magnitude itself, and values beyond the largest normal."""
    values = [float(v) for _, v in ref.finite_magnitudes(fmt)]
    points = values + [(lo + hi) / 2 for lo, hi in itertools.pairwise(values)]
    out = []
    for p in points:
        x = np.float32(p)
        out += [np.nextafter(x, np.float32(0)), x, np.nextafter(x, np.float32(np.inf))]
    f = mx.element_format(fmt)
    # Beyond the largest normal, up to 2**(emax + 1), where the scale would change.
    out += [np.float32(f.max_normal * r) for r in (1.001, 1.01, 1.03, 1.05, 1.0625)]
    out.append(np.nextafter(np.float32(2.0 ** (f.emax + 1)), np.float32(0)))
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shared", [0, -100, 37, 110])
def test_element_rounding_matches_ml_dtypes(fmt, shared):
    # ml_dtypes converts float32 to each format with round-to-nearest-even. Beyond the largest normal
    # it differs by design: float8_e4m3fn gives NaN, float8_e5m2 gives Inf once past the midpoint to
    # 2**16, the FP4/FP6 types saturate. The model always saturates (the MX rule).
    f = mx.element_format(fmt)
    rng = np.random.default_rng(7)
    top = f.max_normal
    limit = 2.0 ** (f.emax + 1)                          # the pad's scale holds for |y| below this
    random = (rng.random(20_000) * limit).astype(np.float32)
    tiny = (rng.random(5_000) * 2.0 ** f.emin).astype(np.float32)     # the format's subnormal range
    ys = np.concatenate([neighbours_of_midpoints(fmt), random, tiny])
    ys = ys[(ys < limit) & (ys >= 2.0 ** (-126 - shared))]       # keep ys * 2**shared a normal float32
    ys = np.concatenate([ys, -ys])
    codes, _ = quantize_with_pad(ys, fmt, shared)
    theirs = ys.astype(ML_DTYPES[fmt]).view(np.uint8)
    in_range = np.abs(ys) <= top
    assert (codes[in_range] == theirs[in_range]).all()
    largest = int(np.flatnonzero(f.units == f.max_units)[0])
    want_saturated = np.where(ys < 0, largest | f.sign_bit, largest)
    assert (codes[~in_range] == want_saturated[~in_range]).all()
    assert (~in_range).sum() >= 10


@DETERMINISTIC
@given(x_bits=st.integers(0, 2 ** 32 - 1).filter(lambda b: (b & 0x7FFF_FFFF) < POS_INF),
       scale=st.integers(0, 255), fmt=st.sampled_from(FORMATS))
def test_encode_element_matches_reference(x_bits, scale, fmt):
    got = mx.encode_element(x_bits, scale, fmt)
    vector = int(mx._encode_elements_array(np.int64(x_bits), np.int64(scale), fmt))
    if scale == 0xFF:
        assert got == vector == 0
        return
    want = ref.nearest_code(ref.fp32_to_fraction(x_bits) / pow2(scale - 127), fmt)
    if x_bits >> 31:
        want |= ref.code_count(fmt) // 2
    assert got == vector == want


@DETERMINISTIC
@given(data=st.data(), offset=st.sampled_from([-1, 0, 1]), shared=st.integers(-127, 127),
       fmt=st.sampled_from(FORMATS))
def test_encode_element_at_and_next_to_every_midpoint(data, offset, shared, fmt):
    # y is a midpoint between neighbouring magnitudes of the format (a tie) or a hair either side of
    # it, scaled by 2**shared; or the same around the largest normal, where it saturates.
    f = mx.element_format(fmt)
    magnitudes = [v for _, v in ref.finite_magnitudes(fmt)]
    i = data.draw(st.integers(0, len(magnitudes) - 1))
    above = magnitudes[i + 1] if i + 1 < len(magnitudes) else 2 * magnitudes[i]
    y = (magnitudes[i] + above) / 2 + offset * pow2(f.lsb_exponent - 12)
    x = y * pow2(shared)
    bits = ref.round_to_fp32(x)
    if ref.fp32_is_inf(bits) or ref.fp32_to_fraction(bits) != x:
        return                                      # not a float32 (subnormal with too many bits)
    want = ref.nearest_code(y, fmt)
    assert mx.encode_element(bits, shared + 127, fmt) == want
    assert mx.encode_element(bits | NEG_ZERO, shared + 127, fmt) == want | f.sign_bit
    assert int(mx._encode_elements_array(np.int64(bits), np.int64(shared + 127), fmt)) == want


def amax_samples():
    """Magnitude patterns in every binade: 1.0, and just below, at and above the largest normal's
    significand of every format (1.5, 1.75, 1.875), and just below 2."""
    fracs = [0, 1, 0x7F_FFFF]
    for sig in (0x40_0000, 0x60_0000, 0x70_0000):
        fracs += [sig - 1, sig, sig + 1]
    return [(biased << 23) | frac for biased in range(0, 255) for frac in fracs if biased or frac]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", mx.MODES)
def test_scale_code_matches_reference_for_every_binade(fmt, mode):
    samples = amax_samples()
    vector = mx._scale_codes_array(np.array(samples, dtype=np.int64), mode, fmt)
    for bits, fast in zip(samples, vector, strict=True):
        shared = ref.shared_exponent(ref.fp32_to_fraction(bits), mode, fmt)
        want = min(max(shared, -127), 127) + 127
        assert mx.scale_code(bits, mode, fmt) == want == int(fast), hex(bits)
    # The RCEIL rule in bits: one more than FLOOR exactly when amax's significand exceeds the largest
    # normal's (where the lower clamp does not absorb it).
    f = mx.element_format(fmt)
    top = Fraction(f.max_normal) / pow2(f.emax)
    for bits in samples:
        x = ref.fp32_to_fraction(bits)
        bump = x / pow2(ref.floor_log2(x)) > top and ref.floor_log2(x) - f.emax >= -127
        assert mx.scale_code(bits, "rceil", fmt) - mx.scale_code(bits, "floor", fmt) == int(bump)


@st.composite
def block_bits(draw):
    """32 float32 patterns around a common exponent, with zeros, subnormals and rare NaN/Inf."""
    base = draw(st.integers(0, 254))
    out = []
    for _ in range(32):
        kind = draw(st.sampled_from(["near", "near", "near", "near", "zero", "subnormal", "any",
                                     "special"]))
        sign = draw(st.integers(0, 1)) << 31
        if kind == "near":
            e = min(max(base - draw(st.integers(0, 40)), 0), 254)
            out.append(sign | (e << 23) | draw(st.integers(0, 0x7F_FFFF)))
        elif kind == "zero":
            out.append(sign)
        elif kind == "subnormal":
            out.append(sign | draw(st.integers(1, 0x7F_FFFF)))
        elif kind == "any":
            out.append(sign | draw(st.integers(0, POS_INF - 1)))
        else:
            out.append(draw(st.sampled_from([POS_INF, NEG_INF, QNAN, 0xFFC0_0001]))
                       if draw(st.integers(0, 9)) == 0 else sign | (base << 23))
    return out


@settings(DETERMINISTIC, max_examples=60)
@given(blocks=st.lists(block_bits(), min_size=1, max_size=2), mode=st.sampled_from(mx.MODES),
       fmt=st.sampled_from(FORMATS))
def test_quantize_matches_reference_and_scalar_functions(blocks, mode, fmt):
    x = f32(np.array(blocks, dtype=np.uint32).reshape(1, -1))
    codes, scales = mx.quantize(x, mode, fmt)
    for b, block in enumerate(blocks):
        want_codes, want_scale = ref.quantize_block(block, mode, fmt)
        got = codes[0, 32 * b: 32 * b + 32].tolist()
        assert int(scales[0, b]) == want_scale
        assert got == want_codes
        assert want_scale == mx.scale_code(max(v & 0x7FFF_FFFF for v in block), mode, fmt)
        if want_scale != 0xFF:
            assert got == [mx.encode_element(v, want_scale, fmt) for v in block]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", mx.MODES)
def test_every_finite_code_at_every_scale_round_trips(fmt, mode):
    # Blocks of 31 finite codes plus the largest normal, which pins the scale in both modes; every
    # code survives dequantize -> quantize wherever the largest normal dequantizes finitely.
    f = mx.element_format(fmt)
    top = int(np.flatnonzero(f.units == f.max_units)[0])
    finite = [c for c in range(f.code_count) if not f.special[c]]
    chunks = [finite[i:i + 31] for i in range(0, len(finite), 31)]
    row = np.concatenate([[top] + chunk + [0] * (31 - len(chunk)) for chunk in chunks]).astype(np.uint8)
    nscales = 255 - f.emax
    codes = np.tile(row, (nscales, 1))
    scales = np.repeat(np.arange(nscales, dtype=np.uint8)[:, None], len(chunks), axis=1)
    values = mx.dequantize(codes, scales, fmt)
    assert np.isfinite(values).all()
    back_codes, back_scales = mx.quantize(values, mode, fmt)
    assert (back_scales == scales).all()
    assert (back_codes == codes).all()


def test_quantize_saturates_and_never_produces_special_codes():
    # 3e38 = 1.76... * 2**127 sets shared = 127 - emax; it then exceeds every largest normal but E2M3's
    # (1.875 * 2**2), so it saturates except in E2M3, where it rounds to 7. Never Inf, never NaN.
    x = np.array([[3.0e38, -3.0e38, 1e30, 1.0] + [0.0] * 28], dtype=np.float32)
    for fmt in FORMATS:
        f = mx.element_format(fmt)
        for mode in mx.MODES:
            codes, scales = mx.quantize(x, mode, fmt)
            assert not f.special[codes].any()
            want_codes, want_scale = ref.quantize_block(bits_of(x[0]).tolist(), mode, fmt)
            assert codes[0].tolist() == want_codes and scales.tolist() == [[want_scale]]
        codes, scales = mx.quantize(x, "floor", fmt)
        assert scales.tolist() == [[127 + 127 - f.emax]]
        largest = int(np.flatnonzero(f.units == f.max_units)[0])
        assert (codes[0, 0] == largest) == (fmt != "e2m3")
        assert codes[0, 1] == codes[0, 0] | f.sign_bit
    codes, scales = mx.quantize(np.array([[np.nan] + [1.0] * 31], np.float32), "rceil", "e4m3")
    assert scales.tolist() == [[0xFF]] and (codes == 0).all()
    codes, scales = mx.quantize(np.full((1, 32), -0.0, np.float32), "floor", "e5m2")
    assert scales.tolist() == [[0]] and (codes == 0x80).all()


# ==================================================================================================
# Dequantize
# ==================================================================================================

@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_every_code_at_corner_scales(fmt):
    f = mx.element_format(fmt)
    scale_list = [0, 1, 2, 20, 100, 127, 128, 200, 240, 250, 251, 252, 253, 254, 255]
    codes = np.arange(f.code_count, dtype=np.uint8)
    codes = np.tile(np.resize(codes, -(-f.code_count // 32) * 32), (len(scale_list), 1))
    scales = np.repeat(np.array(scale_list, dtype=np.uint8)[:, None], codes.shape[1] // 32, axis=1)
    got = bits_of(mx.dequantize(codes, scales, fmt))
    for row, s in enumerate(scale_list):
        for j, code in enumerate(codes[row]):
            value = ref.element_value(int(code), fmt)
            if s == 0xFF or value == ref.NAN:
                want = QNAN
            elif value == ref.POS_INF:
                want = POS_INF
            elif value == ref.NEG_INF:
                want = NEG_INF
            else:
                want = ref.round_to_fp32(value * pow2(s - 127), negative_zero=bool(code & f.sign_bit))
            assert int(got[row, j]) == want, (s, int(code))


# ==================================================================================================
# GEMM
# ==================================================================================================

def check_against_reference(a_codes, a_scales, b_codes, b_scales, c, fa, fb):
    """matmul == matmul_scalar == the Fraction reference, bit for bit; returns the output bits."""
    got = bits_of(mx.matmul(a_codes, a_scales, b_codes, b_scales, c, fa, fb))
    slow = bits_of(mx.matmul_scalar(a_codes, a_scales, b_codes, b_scales, c, a_format=fa, b_format=fb))
    m, n = a_codes.shape[0], b_codes.shape[1]
    c_bits = np.zeros((m, n), np.uint32) if c is None else np.broadcast_to(bits_of(c), (m, n))
    want = np.array(ref.matmul(a_codes.tolist(), a_scales.tolist(), b_codes.tolist(), b_scales.tolist(),
                               c_bits.tolist(), fa, fb), dtype=np.uint32).reshape(m, n)
    assert (slow == want).all(), (slow, want)
    assert (got == want).all(), (got, want)
    return got


def corner_codes(fmt):
    """Zeros, the smallest and largest subnormals, the smallest normal, one, the largest normal."""
    f = mx.element_format(fmt)
    m = f.mantissa_bits
    one = (f.bias << m)
    top = int(np.flatnonzero(f.units == f.max_units)[0])
    positive = [0, 1, (1 << m) - 1, 1 << m, one, top - 1, top]
    return positive + [c | f.sign_bit for c in positive]


SCALES = st.one_of(st.integers(0, 254), st.sampled_from([0, 1, 64, 127, 190, 253, 254, 0xFE, 0xFF]))
C_BITS = st.one_of(st.integers(0, 2 ** 32 - 1),
                   st.sampled_from([0, NEG_ZERO, POS_INF, NEG_INF, QNAN, 1, 0x8000_0001, 0x7F7F_FFFF]))


@st.composite
def gemm_operands(draw, fa, fb):
    m, n, nb = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = 32 * nb

    def codes(fmt, size):
        f = mx.element_format(fmt)
        finite = st.integers(0, f.code_count - 1).filter(lambda c: not f.special[c])
        kind = draw(st.sampled_from(["dense", "sparse", "corners"]))
        if kind == "dense":
            out = draw(st.lists(finite, min_size=size, max_size=size))
        elif kind == "sparse":          # small and sparse dots make cancellation and wide spans likely
            out = [draw(finite) if draw(st.integers(0, 7)) == 0 else 0 for _ in range(size)]
        else:
            out = draw(st.lists(st.sampled_from(corner_codes(fmt)), min_size=size, max_size=size))
        if f.special.any() and draw(st.integers(0, 5)) == 0:
            out[draw(st.integers(0, size - 1))] = draw(st.sampled_from(np.flatnonzero(f.special).tolist()))
        return out

    a_codes = u8(codes(fa, m * k)).reshape(m, k)
    b_codes = u8(codes(fb, k * n)).reshape(k, n)
    near = draw(st.integers(0, 254))
    scale = draw(st.sampled_from([SCALES, st.integers(max(near - 3, 0), min(near + 3, 254))]))
    a_scales = u8(draw(st.lists(scale, min_size=m * nb, max_size=m * nb))).reshape(m, nb)
    b_scales = u8(draw(st.lists(scale, min_size=nb * n, max_size=nb * n))).reshape(nb, n)
    c = None
    if draw(st.booleans()):
        c_bits = draw(st.lists(C_BITS, min_size=m * n, max_size=m * n))
        c = f32(np.array(c_bits, dtype=np.uint32)).reshape(m, n)
    return a_codes, a_scales, b_codes, b_scales, c


@pytest.mark.parametrize("fa, fb", PAIRS)
def test_matmul_matches_exact_reference(fa, fb):
    @settings(DETERMINISTIC, max_examples=25)
    @given(operands=gemm_operands(fa, fb), cancel=st.booleans())
    def check(operands, cancel):
        a_codes, a_scales, b_codes, b_scales, c = operands
        if cancel:
            # Adversarial c: minus the rounded first block, so the first step is a near or exact
            # cancellation (exact when the block is representable), down to signed zeros.
            c = -mx.matmul(a_codes[:, :32], a_scales[:, :1], b_codes[:32], b_scales[:1], None, fa, fb)
        check_against_reference(a_codes, a_scales, b_codes, b_scales, c, fa, fb)

    check()


def gemm_1x1(a_vec, a_scales, b_vec, b_scales, fa, fb, c=None):
    c_arr = None if c is None else f32(np.array([[c]], dtype=np.uint32))
    return int(check_against_reference(u8(a_vec)[None, :], u8(a_scales)[None, :], u8(b_vec)[:, None],
                                       u8(b_scales)[:, None], c_arr, fa, fb)[0, 0])


def one_hot(codes, nblocks=1):
    """K = 32 * nblocks codes: ``codes`` is {position: code}, zeros elsewhere."""
    v = np.zeros(32 * nblocks, dtype=np.uint8)
    for at, code in codes.items():
        v[at] = code
    return v


@pytest.mark.parametrize("fa, fb", PAIRS)
def test_matmul_corners_of_every_pair(fa, fb):
    A, B = mx.element_format(fa), mx.element_format(fb)
    a_top = int(np.flatnonzero(A.units == A.max_units)[0])
    b_top = int(np.flatnonzero(B.units == B.max_units)[0])
    unit = A.lsb_exponent + B.lsb_exponent
    full_a, full_b = np.full(64, a_top), np.full(64, b_top)
    # Overflow: the largest block at the largest scales is +-Inf; a later finite block keeps it.
    assert gemm_1x1(full_a, [254, 254], full_b, [254, 254], fa, fb) == POS_INF
    b_mixed = np.concatenate([full_b[:32], full_b[32:] | B.sign_bit])
    assert gemm_1x1(full_a, [254, 254], b_mixed, [254, 254], fa, fb) == POS_INF
    assert gemm_1x1(full_a, [254, 254], b_mixed[::-1], [254, 254], fa, fb) == NEG_INF
    # Cancellation: +x then -x is +0, also from c = -0.
    assert gemm_1x1(full_a, [130, 130], b_mixed, [120, 120], fa, fb) == 0
    assert gemm_1x1(full_a, [130, 130], b_mixed, [120, 120], fa, fb, c=NEG_ZERO) == 0
    # Subnormal results: smallest x smallest element at scales giving exactly 2**-149, and half of that
    # (a tie to +0, or -0 for a negative product).
    total = -149 - unit + 254                      # sa + sb with (sa - 127) + (sb - 127) + unit = -149
    sa, sb = total // 2, total - total // 2
    a1, b1 = one_hot({0: 1}), one_hot({0: 1})
    assert gemm_1x1(a1, [sa], b1, [sb], fa, fb) == 0x0000_0001
    assert gemm_1x1(a1, [sa], b1, [sb - 1], fa, fb) == 0
    assert gemm_1x1(a1, [sa], b1 | B.sign_bit, [sb - 1], fa, fb) == NEG_ZERO
    assert gemm_1x1(a1, [0], b1, [0], fa, fb) == 0          # far below the subnormals: +0
    # Both ends of the scale range and the NaN scale.
    assert gemm_1x1(one_hot({3: a_top}), [0xFE], one_hot({3: 1}), [0x00], fa, fb) == \
        ref.round_to_fp32(A.max_units * pow2(unit + 127 - 127))
    assert gemm_1x1(full_a, [0xFF, 127], full_b, [127, 127], fa, fb) == QNAN
    assert gemm_1x1(np.zeros(64), [127, 127], full_b, [127, 0xFF], fa, fb) == QNAN


@pytest.mark.parametrize("fa, fb", PAIRS)
def test_matmul_widest_dot_products_cancel_exactly(fa, fb):
    # One block holds the largest product and the smallest (a product of two smallest subnormals): its
    # dot product spans every bit of the pair's width. c is minus the largest product, so the output
    # is the smallest product alone: exact, no sticky bit may swallow it.
    A, B = mx.element_format(fa), mx.element_format(fb)
    a_top = int(np.flatnonzero(A.units == A.max_units)[0])
    b_top = int(np.flatnonzero(B.units == B.max_units)[0])
    unit = A.lsb_exponent + B.lsb_exponent
    a = one_hot({0: a_top, 31: 1})
    b = one_hot({0: b_top, 31: 1})
    big = A.max_units * B.max_units * pow2(unit)          # at scales 127, 127; at most 6 significant bits
    small = pow2(unit)
    for sign in (0, 1):
        c = ref.round_to_fp32(-big if sign == 0 else big)
        b_signed = b if sign == 0 else b ^ np.where(b != 0, B.sign_bit, 0).astype(np.uint8)
        want = ref.round_to_fp32(small if sign == 0 else -small)
        assert gemm_1x1(a, [127], b_signed, [127], fa, fb, c=c) == want
        # One unit off the largest product: the smallest product decides the rounding direction.
        assert gemm_1x1(a, [127], b_signed, [127], fa, fb, c=c ^ 1) == \
            ref.accumulate(c ^ 1, (big + small) * (-1 if sign else 1))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_special_codes_make_their_row_or_column_nan(fmt):
    f = mx.element_format(fmt)
    rng = np.random.default_rng(4)
    finite = np.flatnonzero(~f.special).astype(np.uint8)
    for code in np.flatnonzero(f.special):
        a = rng.choice(finite, size=(3, 96)).astype(np.uint8)
        b = rng.choice(finite, size=(96, 4)).astype(np.uint8)
        a[1, 70] = code                       # last block of row 1
        b[5, 2] = code                        # first block of column 2
        b[64:, 3] = 0                         # output (1, 3): a zero block meets the NaN code, still NaN
        scales_a = np.full((3, 3), 120, np.uint8)
        scales_b = np.full((3, 4), 120, np.uint8)
        got = check_against_reference(a, scales_a, b, scales_b, None, fmt, fmt)
        nan = np.zeros((3, 4), bool)
        nan[1, :] = True
        nan[:, 2] = True
        assert (got[nan] == QNAN).all()
        assert not np.isnan(f32(got[~nan])).any()
        with pytest.raises(mx.MXFormatError, match="NaN or Inf in " + fmt):
            mx.block_dot_quarters(a[1, 64:], b[64:, 0], fmt, fmt)


@pytest.mark.parametrize("fa, fb", PAIRS)
def test_matmul_matches_scalar_on_a_larger_random_problem(fa, fb):
    A, B = mx.element_format(fa), mx.element_format(fb)
    rng = np.random.default_rng(len(FORMATS) * FORMATS.index(fa) + FORMATS.index(fb))
    m, k, n = 3, 256, 3
    a_codes = rng.choice(np.flatnonzero(~A.special), size=(m, k)).astype(np.uint8)
    b_codes = rng.choice(np.flatnonzero(~B.special), size=(k, n)).astype(np.uint8)
    a_codes[:, 32:64] = np.where(rng.random((m, 32)) < 0.8, 0, a_codes[:, 32:64])    # sparse blocks
    a_scales = rng.integers(100, 150, size=(m, k // 32), dtype=np.uint8)
    b_scales = rng.integers(100, 150, size=(k // 32, n), dtype=np.uint8)
    a_scales[0, 3] = 0
    b_scales[5, 1] = 254
    c = f32(rng.integers(0, 2 ** 32, size=(m, n), dtype=np.uint64).astype(np.uint32))
    fast = bits_of(mx.matmul(a_codes, a_scales, b_codes, b_scales, c, fa, fb))
    slow = bits_of(mx.matmul_scalar(a_codes, a_scales, b_codes, b_scales, c, fa, fb))
    assert (fast == slow).all()


@pytest.mark.parametrize("fa, fb", [("e4m3", "e2m1"), ("e2m3", "e2m1"), ("e4m3", "e4m3"), ("e5m2", "e5m2")])
def test_matmul_gemm_64x1024x64(fa, fb):
    # The size the vectorized path is meant for; spot-checked against the scalar form and, loosely,
    # against float64 on the dequantized operands.
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 1024)).astype(np.float32)
    b = rng.standard_normal((64, 1024)).astype(np.float32)
    a_codes, a_scales = mx.quantize(a, format=fa)
    bt_codes, bt_scales = mx.quantize(b, format=fb)
    b_codes, b_scales = np.ascontiguousarray(bt_codes.T), np.ascontiguousarray(bt_scales.T)
    out = mx.matmul(a_codes, a_scales, b_codes, b_scales, a_format=fa, b_format=fb)
    rows, cols = [0, 63], [0, 40]
    slow = mx.matmul_scalar(a_codes[rows], a_scales[rows], b_codes[:, cols], b_scales[:, cols],
                            a_format=fa, b_format=fb)
    assert (bits_of(out[np.ix_(rows, cols)]) == bits_of(slow)).all()
    exact = mx.dequantize(a_codes, a_scales, fa).astype(np.float64) @ \
        mx.dequantize(bt_codes, bt_scales, fb).astype(np.float64).T
    assert np.allclose(out, exact, rtol=1e-5, atol=1e-3)


# ==================================================================================================
# The accumulate step for every pair
# ==================================================================================================

@st.composite
def add_arguments(draw, fa, fb):
    """(acc, dot, exp): random, sparse (two far-apart bits) and near-cancelling dot products."""
    limit = mx.max_block_dot(fa, fb)
    width = limit.bit_length()
    kind = draw(st.sampled_from(["random", "sparse", "cancel"]))
    exp = draw(st.integers(-254, 254))
    if kind == "random":
        dot = draw(st.integers(-limit, limit))
    else:
        hi = draw(st.integers(0, width - 2))
        dot = (1 << hi) + draw(st.sampled_from([0, 1, -1, 1 << draw(st.integers(0, max(hi - 1, 0)))]))
        dot = min(dot, limit) * draw(st.sampled_from([1, -1]))
    if kind == "cancel":
        term = Fraction(dot) * pow2(exp + mx.dot_unit_exponent(fa, fb))
        acc = ref.round_to_fp32(-term) ^ draw(st.sampled_from([0, 1, 2, 3]))
        if ref.fp32_is_nan(acc) or ref.fp32_is_inf(acc):
            acc = 0
    else:
        acc = draw(st.integers(0, 2 ** 32 - 1))
    return acc, dot, exp


@pytest.mark.parametrize("fa, fb", [("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e3m2", "e2m3"), ("e4m3", "e2m1")])
def test_fp32_add_scaled_matches_reference(fa, fb):
    unit = mx.dot_unit_exponent(fa, fb)

    @settings(DETERMINISTIC, max_examples=150)
    @given(args=add_arguments(fa, fb))
    def check(args):
        acc, dot, exp = args
        want = ref.accumulate(acc, Fraction(dot) * pow2(exp + unit))
        assert mx.fp32_add_scaled(acc, dot, exp, fa, fb) == want
        dots = np.array([dot], dtype=object if abs(dot) >= 2 ** 63 else np.int64)
        assert int(mx.fp32_add_scaled_array(acc, dots, exp, fa, fb)[0]) == want

    check()


@pytest.mark.parametrize("span", range(50, 70))
def test_fp32_add_scaled_wide_dots_next_to_a_tie(span):
    # E5M2 x E5M2 dot products with `span` significant bits, one unit off a rounding tie of their own
    # (2**(span-1) + 2**(span-25) is halfway between two binary32 neighbours), plus an accumulator of
    # a unit or two: whether the sum lands below, on or above the tie depends on every bit of both.
    # This pins the adder's window at the width where the dot product's lowest bit is its last bit.
    tie = (1 << (span - 1)) + (1 << (span - 25))
    unit = mx.dot_unit_exponent("e5m2", "e5m2")
    accs, dots, exps = [], [], []
    for exp in (0, -100, 100):
        for dot in (tie - 1, tie + 1, tie):
            for acc in (Fraction(3, 2), Fraction(1, 2), Fraction(1), Fraction(5, 2), Fraction(1, 4)):
                for sign in (1, -1):
                    accs.append(ref.round_to_fp32(sign * acc * pow2(exp + unit)))
                    dots.append(dot if sign == 1 else -dot)
                    accs.append(ref.round_to_fp32(-sign * acc * pow2(exp + unit)))
                    dots.append(dot if sign == 1 else -dot)
                    exps += [exp, exp]
    got = mx.fp32_add_scaled_array(np.array(accs, dtype=np.uint32), np.array(dots, dtype=object), exps,
                                   "e5m2", "e5m2")
    for acc, dot, exp, fast in zip(accs, dots, exps, got, strict=True):
        want = ref.accumulate(acc, Fraction(dot) * pow2(exp + unit))
        assert mx.fp32_add_scaled(acc, dot, exp, "e5m2", "e5m2") == want
        assert int(fast) == want, (span, hex(acc), dot, exp)


def test_fp32_add_scaled_array_wide_pair_in_bulk():
    # E5M2 x E5M2 dot products beyond int64, as Python ints in an object array; half of them sparse,
    # which takes the exact per-lane path.
    rng = np.random.default_rng(12)
    limit = mx.max_block_dot("e5m2", "e5m2")
    n = 3000
    dots = [int(rng.integers(-2 ** 62, 2 ** 62)) << int(rng.integers(0, 7)) for _ in range(n // 2)]
    dots += [((1 << int(rng.integers(40, 68))) + int(rng.integers(-3, 4))) * int(rng.choice([-1, 1]))
             for _ in range(n - n // 2)]
    dots = [max(min(d, limit), -limit) for d in dots]
    exp = rng.integers(-254, 255, size=n)
    acc = rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32)
    got = mx.fp32_add_scaled_array(acc, np.array(dots, dtype=object), exp, "e5m2", "e5m2")
    for i in range(n):
        assert int(got[i]) == mx.fp32_add_scaled(int(acc[i]), dots[i], int(exp[i]), "e5m2", "e5m2"), i


def test_fp32_add_scaled_range_is_per_pair():
    limit = mx.max_block_dot("e4m3", "e2m1")
    assert mx.fp32_add_scaled(0, limit, 0, "e4m3", "e2m1") == ref.round_to_fp32(Fraction(limit) * pow2(-10))
    with pytest.raises(mx.MXFormatError, match="dot_quarters"):
        mx.fp32_add_scaled(0, limit + 1, 0, "e4m3", "e2m1")
    with pytest.raises(mx.MXFormatError, match="dot_quarters"):
        mx.fp32_add_scaled_array(0, -limit - 1, 0, "e4m3", "e2m1")
    with pytest.raises(mx.MXTypeError):
        mx.fp32_add_scaled_array(0, np.array([1.5], dtype=object), 0, "e5m2", "e5m2")


# ==================================================================================================
# Errors
# ==================================================================================================

def _calls_with_format(fmt):
    zeros = np.zeros((1, 32), np.uint8)
    scales = np.zeros((1, 1), np.uint8)
    return [
        lambda: mx.quantize(np.zeros(32, np.float32), "floor", fmt),
        lambda: mx.dequantize(zeros, scales, fmt),
        lambda: mx.matmul(zeros, scales, zeros.T.copy(), scales, a_format=fmt),
        lambda: mx.matmul(zeros, scales, zeros.T.copy(), scales, b_format=fmt),
        lambda: mx.matmul_scalar(zeros, scales, zeros.T.copy(), scales, b_format=fmt),
        lambda: mx.scale_code(0x3F80_0000, "floor", fmt),
        lambda: mx.encode_element(0x3F80_0000, 127, fmt),
        lambda: mx.block_dot_quarters([0] * 32, [0] * 32, fmt, "e2m1"),
        lambda: mx.fp32_add_scaled(0, 0, 0, "e2m1", fmt),
        lambda: mx.fp32_add_scaled_array(0, 0, 0, fmt, "e2m1"),
        lambda: mx.element_format(fmt),
        lambda: mx.block_dot_bits(fmt, "e2m1"),
    ]


@pytest.mark.parametrize("fmt", ["E4M3", "fp8", "e3m3", "", None, 4])
def test_unknown_formats_are_one_line_errors(fmt):
    for call in _calls_with_format(fmt):
        with pytest.raises(mx.MXFormatError, match="unknown element format") as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("fmt, bad", [("e2m1", 16), ("e2m3", 64), ("e3m2", 64), ("e2m3", 255)])
def test_codes_out_of_range_for_the_format(fmt, bad):
    codes = np.zeros((2, 32), np.uint8)
    codes[1, 7] = bad
    scales = np.zeros((2, 1), np.uint8)
    top = 15 if fmt == "e2m1" else 63
    with pytest.raises(mx.MXFormatError, match=f"code {bad}; {fmt.upper()} codes are 0..{top}$"):
        mx.dequantize(codes, scales, fmt)
    with pytest.raises(mx.MXFormatError, match=f"a_codes holds code {bad}"):
        mx.matmul(codes, scales, np.zeros((32, 1), np.uint8), np.zeros((1, 1), np.uint8), a_format=fmt)
    with pytest.raises(mx.MXFormatError, match=f"b_codes holds code {bad}"):
        mx.matmul_scalar(np.zeros((1, 32), np.uint8), np.zeros((1, 1), np.uint8), codes.T.copy(),
                         scales.T.copy(), b_format=fmt)
    with pytest.raises(mx.MXFormatError, match="outside 0.."):
        mx.block_dot_quarters(codes[1], codes[0], fmt, fmt)
    # The same codes are fine in an 8-bit format.
    mx.dequantize(codes, scales, "e4m3")
