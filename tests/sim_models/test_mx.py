"""Tests of the MXFP4 golden model (``sim_models.mx``) against its documented contract.

Three independent views are compared: explicit expected bit patterns worked out by hand, the exact
rational reference in ``exact_reference.py`` (``fractions.Fraction``, no code shared with the model),
and ``ml_dtypes.float4_e2m1fn`` for element rounding. The scalar and vectorized forms of the model are
also checked against each other.
"""

import importlib.util
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim_models import fp32, mx


def _load_reference():
    # pytest runs in importlib mode, where test directories are not on sys.path: load the sibling
    # reference module from its file.
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
MAX_FINITE = 0x7F7F_FFFF
MIN_NORMAL = 0x0080_0000
MAX_SUBNORMAL = 0x007F_FFFF
ONE = 0x3F80_0000


def f32(bits):
    """float32 array (or scalar) with the given bit pattern(s)."""
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def pow2(e):
    return Fraction(2) ** e


def quantize_with_pad(values, pad=4.0):
    """Quantize blocks of 31 values plus one ``pad`` element, which pins the FLOOR scale.

    With ``pad = 4 * 2**s`` and every ``|value| < 8 * 2**s`` the shared exponent is ``s`` (for
    ``s >= -127``), so the returned codes are the element rounding of ``value / 2**s`` alone.
    """
    values = np.asarray(values, dtype=np.float32).ravel()
    rows = -(-values.size // 31)
    body = np.zeros(rows * 31, dtype=np.float32)
    body[: values.size] = values
    blocks = np.concatenate([body.reshape(rows, 31), np.full((rows, 1), pad, dtype=np.float32)], axis=1)
    codes, scales = mx.quantize(blocks)
    return codes[:, :31].reshape(-1)[: values.size], scales


# ==================================================================================================
# Tables and formats
# ==================================================================================================

def test_e2m1_tables_match_bit_definition():
    for code in range(16):
        want = ref.e2m1_value(code)
        assert Fraction(float(mx.E2M1_VALUES[code])) == want
        assert Fraction(int(mx.E2M1_HALVES[code]), 2) == want
        assert np.signbit(mx.E2M1_VALUES[code]) == bool(code & 8)
    assert mx.E2M1_VALUES.dtype == np.float32
    assert not mx.E2M1_VALUES.flags.writeable and not mx.E2M1_HALVES.flags.writeable


def test_e2m1_table_matches_ml_dtypes():
    theirs = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert (bits_of(theirs) == bits_of(mx.E2M1_VALUES)).all()


def test_dequantize_every_code_at_every_scale():
    scales = np.arange(256, dtype=np.uint8)[:, None]
    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 2))
    got = bits_of(mx.dequantize(codes, scales))
    for s in range(256):
        for j in range(32):
            code = int(codes[s, j])
            if s == 0xFF:
                want = ref.QNAN
            else:
                want = ref.round_to_fp32(ref.e2m1_value(code) * pow2(s - 127), negative_zero=code == 8)
            assert int(got[s, j]) == want, (s, code)


def test_dequantize_overflow_and_smallest():
    codes = np.array([[7, 1, 4, 6] + [0] * 28], dtype=np.uint8)          # 6, 0.5, 2, 4
    # Scale 253 (2**126): 1.5 * 2**128 -> Inf, 2**125, 2**127, 2**128 -> Inf.
    assert bits_of(mx.dequantize(codes, np.array([[253]], dtype=np.uint8)))[0, :4].tolist() == \
        [POS_INF, 0x7E00_0000, 0x7F00_0000, POS_INF]
    # Scale 0 (2**-127): 1.5 * 2**-125, 2**-128 (subnormal), 2**-126, 2**-125.
    assert bits_of(mx.dequantize(codes, np.array([[0]], dtype=np.uint8)))[0, :4].tolist() == \
        [0x0140_0000, 0x0020_0000, 0x0080_0000, 0x0100_0000]


def test_dequantize_shapes():
    codes = np.zeros((2, 3, 64), dtype=np.uint8)
    assert mx.dequantize(codes, np.zeros((2, 3, 2), dtype=np.uint8)).shape == (2, 3, 64)
    with pytest.raises(mx.MXFormatError, match="scales has shape"):
        mx.dequantize(codes, np.zeros((2, 3, 1), dtype=np.uint8))


@pytest.mark.parametrize("mode", mx.MODES)
def test_every_code_at_every_scale_round_trips(mode):
    # A block holding 6.0 * 2**s pins its scale to s in both modes; every code then survives
    # dequantize -> quantize (including code 8, -0.0). Scales 253 and 254 are left out: 6 * 2**126
    # overflows to Inf on dequantize.
    codes = np.tile(np.concatenate([np.arange(16), np.arange(16)]).astype(np.uint8), (253, 1))
    codes[:, 5] = 7
    scales = np.arange(253, dtype=np.uint8)[:, None]
    back_codes, back_scales = mx.quantize(mx.dequantize(codes, scales), mode)
    assert (back_scales == scales).all()
    assert (back_codes == codes).all()


# ==================================================================================================
# Element rounding
# ==================================================================================================

# (y, code of +y) at and around every midpoint between E2M1 neighbours, and around saturation.
MIDPOINTS = [(0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6)]
LOWER_CODE = {0.25: 0, 0.75: 1, 1.25: 2, 1.75: 3, 2.5: 4, 3.5: 5, 5.0: 6}


def midpoint_cases():
    """(y, expected magnitude code) for each midpoint, one float32 ulp either side, and saturation."""
    cases = []
    for y, tie_code in MIDPOINTS:
        below = float(np.nextafter(np.float32(y), np.float32(0)))
        above = float(np.nextafter(np.float32(y), np.float32(np.inf)))
        cases += [(below, LOWER_CODE[y]), (y, tie_code), (above, LOWER_CODE[y] + 1)]
    for y in (6.0, float(np.nextafter(np.float32(6), np.float32(np.inf))), 6.5, 7.0, 7.5,
              float(np.nextafter(np.float32(8), np.float32(0)))):
        cases.append((y, 7))
    cases += [(0.0, 0), (0.5, 1), (1.0, 2), (1.5, 3), (2.0, 4), (3.0, 5), (4.0, 6)]
    return cases


@pytest.mark.parametrize("shared", [0, -127, -126, -100, 1, 60, 125])
def test_midpoints_and_neighbours(shared):
    cases = midpoint_cases()
    ys = np.array([y for y, _ in cases], dtype=np.float32)
    want = np.array([c for _, c in cases], dtype=np.uint8)
    scale = np.float32(2.0 ** shared)
    with np.errstate(under="ignore"):
        xs = ys * scale
    # Scaling by 2**shared is exact unless x lands in the subnormal range with too many bits; the
    # hand-written expectations hold where it is exact, the reference checks every case.
    scaled_exactly = all(Fraction(float(x)) == Fraction(float(y)) * pow2(shared)
                         for x, y in zip(xs, ys, strict=True))
    assert scaled_exactly == (shared >= -100)
    for sign, bit in ((1, 0), (-1, 8)):
        codes, scales = quantize_with_pad(sign * xs, pad=4 * scale)
        assert (scales == shared + 127).all()
        exact = np.array([ref.e2m1_nearest(Fraction(float(x)) / pow2(shared)) | bit
                          for x in sign * xs], dtype=np.uint8)
        assert (codes == exact).all()
        assert codes.tolist() == [mx.encode_element(int(b), shared + 127) for b in bits_of(sign * xs)]
        if scaled_exactly:
            assert (codes == (want | bit)).all()


def test_midpoints_one_ulp_at_subnormal_scale():
    # shared = -127: x = y * 2**-127 is subnormal for y < 4, so its one-ulp neighbours are
    # x +- 2**-149, i.e. y +- 2**-22. The neighbours are taken in x, the quantizer's actual input.
    for y, tie_code in MIDPOINTS:
        x = np.float32(y * 2.0 ** -127)
        below = np.nextafter(x, np.float32(0))
        above = np.nextafter(x, np.float32(1))
        codes, scales = quantize_with_pad([below, x, above], pad=np.float32(2.0 ** -125))
        assert scales.tolist() == [[0]]
        assert codes.tolist() == [LOWER_CODE[y], tie_code, LOWER_CODE[y] + 1]


def test_negative_values_rounding_to_zero_keep_the_sign():
    codes, _ = quantize_with_pad([-0.0, -0.1, -0.25, -2.0 ** -149, 0.0, 0.25])
    assert codes.tolist() == [8, 8, 8, 8, 0, 0]
    codes, scales = mx.quantize(np.full((1, 32), -0.0, dtype=np.float32))
    assert scales.tolist() == [[0]] and (codes == 8).all()


def _dense_patterns():
    """Float32 patterns covering |y| in [2**-4, 8): all top-8 fraction bits, varied low bits."""
    exps = np.arange(123, 130, dtype=np.uint32)           # binades 2**-4 .. 2**2
    tops = np.arange(256, dtype=np.uint32) << 15
    lows = np.array([0, 1, 2, 0x3FFF, 0x4000, 0x4001, 0x7FFE, 0x7FFF], dtype=np.uint32)
    grid = (exps[:, None, None] << 23) | tops[None, :, None] | lows[None, None, :]
    return grid.ravel()


def test_element_rounding_matches_ml_dtypes():
    rng = np.random.default_rng(20240917)
    random_bits = rng.integers(0, 2 ** 32, size=300_000, dtype=np.uint64).astype(np.uint32)
    patterns = np.concatenate([_dense_patterns(), random_bits])
    patterns = np.concatenate([patterns, patterns ^ 0x8000_0000])
    ys = f32(patterns)
    ys = ys[np.isfinite(ys) & (np.abs(ys) < 8)]          # pad 4.0 pins shared = 0
    codes, scales = quantize_with_pad(ys)
    assert (scales == 127).all()
    theirs = ys.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert (codes == theirs).all()
    # Beyond the block range, encode_element saturates the same way ml_dtypes does.
    for y in (8.0, 1e6, 3.4e38, -12.0):
        assert mx.encode_element(int(bits_of(y)), 127) == \
            int(np.float32(y).astype(ml_dtypes.float4_e2m1fn).view(np.uint8))


def test_ml_dtypes_differs_only_on_non_finite():
    # Not a model property but worth pinning: ml_dtypes casts NaN to -0 (0x8) and Inf to +-6,
    # while an MX block holding either is a NaN block (scale 0xFF, codes 0).
    theirs = np.array([np.nan, np.inf, -np.inf], dtype=np.float32).astype(ml_dtypes.float4_e2m1fn)
    assert theirs.view(np.uint8).tolist() == [8, 7, 15]
    codes, scales = mx.quantize(np.array([[np.inf] + [1.0] * 31], dtype=np.float32))
    assert scales.tolist() == [[0xFF]] and (codes == 0).all()


finite_f32_bits = st.integers(0, 2 ** 32 - 1).filter(lambda b: (b & 0x7FFF_FFFF) < POS_INF)


@DETERMINISTIC
@given(x_bits=finite_f32_bits, scale=st.integers(0, 255))
def test_encode_element_matches_reference(x_bits, scale):
    got = mx.encode_element(x_bits, scale)
    if scale == 0xFF:
        assert got == 0
        return
    want = ref.e2m1_nearest(ref.fp32_to_fraction(x_bits) / pow2(scale - 127)) | ((x_bits >> 31) << 3)
    assert got == want
    # The array kernel behind quantize agrees for any scale, not only the one quantize would pick.
    assert int(mx._encode_elements_array(np.int64(x_bits), np.int64(scale))) == want


# ==================================================================================================
# Quantize: blocks
# ==================================================================================================

@st.composite
def block_bits(draw, allow_special=True):
    """32 float32 patterns with a common exponent neighbourhood, so the block is not trivial."""
    base = draw(st.integers(0, 254))
    out = []
    for _ in range(32):
        kind = draw(st.sampled_from(["near", "near", "near", "zero", "subnormal", "any", "special"]
                                    if allow_special else ["near", "near", "near", "zero", "subnormal"]))
        sign = draw(st.integers(0, 1)) << 31
        if kind == "near":
            e = min(max(base - draw(st.integers(0, 26)), 0), 254)
            out.append(sign | (e << 23) | draw(st.integers(0, 0x7F_FFFF)))
        elif kind == "zero":
            out.append(sign)
        elif kind == "subnormal":
            out.append(sign | draw(st.integers(1, 0x7F_FFFF)))
        elif kind == "any":
            out.append(draw(finite_f32_bits))
        else:
            out.append(draw(st.sampled_from([POS_INF, NEG_INF, 0x7FC0_0000, 0xFFC0_0001, 0x7F80_0001]))
                       if draw(st.integers(0, 7)) == 0 else sign | (min(base, 254) << 23))
    return out


@DETERMINISTIC
@given(blocks=st.lists(block_bits(), min_size=1, max_size=3), mode=st.sampled_from(mx.MODES))
def test_quantize_matches_reference(blocks, mode):
    x = f32(np.array(blocks, dtype=np.uint32).reshape(1, -1))
    codes, scales = mx.quantize(x, mode)
    for b, block in enumerate(blocks):
        want_codes, want_scale = ref.quantize_block(block, mode)
        assert int(scales[0, b]) == want_scale
        assert codes[0, 32 * b: 32 * b + 32].tolist() == want_codes


@DETERMINISTIC
@given(block=block_bits(), mode=st.sampled_from(mx.MODES))
def test_quantize_matches_scalar_functions(block, mode):
    codes, scales = mx.quantize(f32(np.array([block], dtype=np.uint32)), mode)
    scale = mx.scale_code(max(b & 0x7FFF_FFFF for b in block), mode)
    assert int(scales[0, 0]) == scale
    if scale != 0xFF:
        assert codes[0].tolist() == [mx.encode_element(b, scale) for b in block]


@DETERMINISTIC
@given(block=block_bits(allow_special=False), mode=st.sampled_from(mx.MODES))
def test_quantization_error_bound_and_saturation(block, mode):
    codes, scales = mx.quantize(f32(np.array([block], dtype=np.uint32)), mode)
    shared = int(scales[0, 0]) - 127
    for b, code in zip(block, codes[0].tolist(), strict=True):
        x = ref.fp32_to_fraction(b)
        y = abs(x) / pow2(shared)
        q = abs(ref.e2m1_value(code))
        if mode == "rceil":
            assert y <= 6                                # RCEIL never needs to saturate
        assert y < 8                                     # FLOOR: amax / 2**shared < 8
        if y > 6:
            assert code & 7 == 7                         # saturated to 6
        else:
            spacing = Fraction(1, 2) if y < 2 else (1 if y < 4 else 2)
            assert abs(q - y) <= spacing / 2             # round to nearest
        if y > 5:
            assert code & 7 == 7
        assert (code >> 3) == (b >> 31)                  # sign kept, also for zeros


@DETERMINISTIC
@given(block=block_bits(allow_special=False), where=st.integers(0, 31),
       special=st.sampled_from([POS_INF, NEG_INF, 0x7FC0_0000, 0xFFFF_FFFF, 0x7F80_0001]),
       mode=st.sampled_from(mx.MODES))
def test_nan_and_inf_make_nan_blocks(block, where, special, mode):
    other = [b & 0x7FFF_FFFF for b in block]
    special_block = list(block)
    special_block[where] = special
    x = f32(np.array([special_block + other], dtype=np.uint32))
    codes, scales = mx.quantize(x, mode)
    assert int(scales[0, 0]) == 0xFF and (codes[0, :32] == 0).all()
    alone_codes, alone_scales = mx.quantize(f32(np.array([other], dtype=np.uint32)), mode)
    assert int(scales[0, 1]) == int(alone_scales[0, 0])
    assert (codes[0, 32:] == alone_codes[0]).all()
    assert bits_of(mx.dequantize(codes, scales))[0, :32].tolist() == [ref.QNAN] * 32


def test_all_zero_blocks_have_scale_zero():
    x = np.zeros((3, 64), dtype=np.float32)
    x[1] = -0.0
    x[2, ::2] = -0.0
    codes, scales = mx.quantize(x)
    assert (scales == 0).all()
    assert (codes == np.where(np.signbit(x), 8, 0)).all()


# ==================================================================================================
# Quantize: shared exponent
# ==================================================================================================

def amax_samples():
    """Magnitude patterns for every biased exponent: 1.0, just above and below 1.5, just below 2."""
    out = []
    for biased in range(0, 255):
        for frac in (0, 1, 0x3F_FFFF, 0x40_0000, 0x40_0001, 0x7F_FFFF):
            if biased or frac:
                out.append((biased << 23) | frac)
    return out


@pytest.mark.parametrize("mode", mx.MODES)
def test_scale_code_matches_reference_for_every_binade(mode):
    for bits in amax_samples():
        shared = ref.shared_exponent(ref.fp32_to_fraction(bits), mode)
        assert mx.scale_code(bits, mode) == min(max(shared, -127), 127) + 127, hex(bits)
        assert mx.scale_code(bits | 0x8000_0000, mode) == mx.scale_code(bits, mode)


def test_floor_log2_is_exact_below_powers_of_two_and_for_subnormals():
    for e in range(-149, 128):
        p = np.float32(2.0 ** e)
        below = np.nextafter(p, np.float32(0))
        above = np.nextafter(p, np.float32(np.inf))
        if below != 0:
            assert ref.floor_log2(Fraction(float(below))) == e - 1
        for x in (below, p, above):
            if x == 0:
                continue
            want = ref.floor_log2(Fraction(float(x)))
            assert fp32.floor_log2(int(bits_of(x))) == want
            assert mx.scale_code(int(bits_of(x)), "floor") == max(want - 2, -127) + 127
    # Why this matters: float32 log2 rounds up just below a power of two.
    below = np.nextafter(np.float32(2.0 ** 24), np.float32(0))
    assert np.floor(np.log2(below)) == 24 and fp32.floor_log2(int(bits_of(below))) == 23


def test_scale_clamping_at_both_ends():
    # Lower clamp: every amax below 2**-124 (all subnormals and the two lowest normal binades) is scale 0.
    for bits in (1, 0x40_0000, MAX_SUBNORMAL, MIN_NORMAL, 0x00FF_FFFF, 0x0100_0000, 0x017F_FFFF):
        assert mx.scale_code(bits, "floor") == 0
        assert mx.scale_code(bits, "rceil") == (1 if bits == 0x017F_FFFF else 0)   # 1.99 * 2**-125
    assert mx.scale_code(0x0180_0000, "floor") == 1               # 2**-124 -> shared = -126
    assert mx.scale_code(0x0180_0000, "rceil") == 1
    assert mx.scale_code(0x01C0_0001, "rceil") == 2               # significand > 1.5 bumps RCEIL
    # Upper clamp: unreachable from binary32. The largest finite amax gives 252 (floor) and 253
    # (rceil); 254 is never produced.
    assert mx.scale_code(MAX_FINITE, "floor") == 252
    assert mx.scale_code(MAX_FINITE, "rceil") == 253
    assert max(mx.scale_code(b, m) for b in amax_samples() for m in mx.MODES) == 253
    # A subnormal block at the clamped scale loses everything below 2**-129 to zero.
    codes, scales = mx.quantize(f32(np.array([[1, 0x0010_0000, 0x0020_0000, 0x0030_0000] + [0] * 28],
                                             dtype=np.uint32)))
    assert scales.tolist() == [[0]]
    # x * 2**127 = 2**-22, 0.25 (tie -> 0), 0.5, 0.75 (tie -> 1.0).
    assert codes[0, :4].tolist() == [0, 0, 1, 2]


def rceil_minus_floor(bits):
    """The derived relation: RCEIL is FLOOR plus one iff amax's significand exceeds 1.5, except where
    the lower clamp absorbs it (floor(log2(amax)) <= -126)."""
    x = ref.fp32_to_fraction(bits)
    e = ref.floor_log2(x)
    return 1 if (x / pow2(e) > Fraction(3, 2) and e >= -125) else 0


@DETERMINISTIC
@given(bits=st.integers(1, POS_INF - 1))
def test_rceil_versus_floor(bits):
    diff = mx.scale_code(bits, "rceil") - mx.scale_code(bits, "floor")
    assert diff in (0, 1)
    assert diff == rceil_minus_floor(bits)
    # Equivalent bit-level statement for normals: fraction field > 0x400000.
    if bits >= 0x0100_0000:
        assert diff == int((bits & 0x7F_FFFF) > 0x40_0000)


def test_rceil_versus_floor_every_binade():
    for bits in amax_samples():
        assert mx.scale_code(bits, "rceil") - mx.scale_code(bits, "floor") == rceil_minus_floor(bits)


def test_rceil_large_blocks_can_dequantize_to_inf():
    # Documented consequence of RCEIL at the top of the range: amax >= 1.75 * 2**127 gets scale 253
    # and element 4 * 2**126 = 2**128, which is +Inf in float32. FLOOR stays finite.
    x = np.full((1, 32), np.float32(1.75 * 2.0 ** 127), dtype=np.float32)
    codes, scales = mx.quantize(x, "rceil")
    assert scales.tolist() == [[253]] and (codes == 6).all()
    assert np.isposinf(mx.dequantize(codes, scales)).all()
    codes, scales = mx.quantize(x, "floor")
    assert np.isfinite(mx.dequantize(codes, scales)).all()


# ==================================================================================================
# Quantize: inputs
# ==================================================================================================

def test_bfloat16_and_float16_inputs_are_widened_exactly():
    rng = np.random.default_rng(7)
    x32 = (rng.standard_normal((4, 64)) * 10).astype(np.float32)
    for dtype in (ml_dtypes.bfloat16, np.float16):
        x = x32.astype(dtype)
        for mode in mx.MODES:
            got = mx.quantize(x, mode)
            want = mx.quantize(x.astype(np.float32), mode)
            assert (got[0] == want[0]).all() and (got[1] == want[1]).all()


def test_float64_inputs_are_rounded_to_float32_first():
    # 0.75 - 2**-40 rounds to the float32 0.75, a tie, which goes to 1.0 (code 2); rounding the
    # float64 directly would give 0.5 (code 1). The contract is the two-step one, stated in the docs.
    x = np.full((1, 32), 4.0)
    x[0, 0] = 0.75 - 2.0 ** -40
    assert ref.e2m1_nearest(Fraction(x[0, 0])) == 1
    codes, scales = mx.quantize(x)
    assert scales.tolist() == [[127]] and codes[0, 0] == 2
    x[0, 1] = 1e300                                   # overflows float32 to +Inf, without a warning
    codes, scales = mx.quantize(x)
    assert scales.tolist() == [[0xFF]] and (codes == 0).all()
    codes, scales = mx.quantize([[1.0] * 32])         # a Python list is taken as float64
    assert scales.tolist() == [[125]] and (codes == 6).all()


@pytest.mark.parametrize("bad, error, match", [
    (np.zeros((2, 32), dtype=np.int32), mx.MXTypeError, "floating"),
    (np.zeros((2, 32), dtype=bool), mx.MXTypeError, "floating"),
    (np.zeros((2, 32), dtype=np.complex64), mx.MXTypeError, "floating"),
    (np.zeros((2, 32), dtype=ml_dtypes.float8_e4m3fn), mx.MXTypeError, "floating"),
    (np.zeros((2, 33), dtype=np.float32), mx.MXFormatError, "multiple of 32"),
    (np.zeros((2, 0), dtype=np.float32), mx.MXFormatError, "multiple of 32"),
    (np.float32(1.0), mx.MXFormatError, "at least one dimension"),
])
def test_quantize_rejects_bad_input(bad, error, match):
    with pytest.raises(error, match=match):
        mx.quantize(bad)


def test_quantize_rejects_unknown_mode():
    with pytest.raises(mx.MXFormatError, match="unknown quantize mode 'ceil'"):
        mx.quantize(np.zeros(32, dtype=np.float32), mode="ceil")
    with pytest.raises(mx.MXFormatError, match="unknown quantize mode"):
        mx.scale_code(ONE, "FLOOR")


def test_errors_are_one_line_and_catchable_as_value_or_type_errors():
    assert issubclass(mx.MXFormatError, ValueError)
    assert issubclass(mx.MXTypeError, mx.MXFormatError) and issubclass(mx.MXTypeError, TypeError)
    with pytest.raises(TypeError) as info:
        mx.quantize(np.zeros(32, dtype=np.int8))
    assert "\n" not in str(info.value)


# ==================================================================================================
# Block dot product
# ==================================================================================================

@DETERMINISTIC
@given(a=st.lists(st.integers(0, 15), min_size=32, max_size=32),
       b=st.lists(st.integers(0, 15), min_size=32, max_size=32))
def test_block_dot_quarters_matches_reference(a, b):
    want = sum(ref.e2m1_value(x) * ref.e2m1_value(y) for x, y in zip(a, b, strict=True)) * 4
    assert mx.block_dot_quarters(np.array(a, dtype=np.uint8), b) == want


def test_block_dot_quarters_extremes_and_errors():
    assert mx.block_dot_quarters([7] * 32, [7] * 32) == 4608 == mx.MAX_DOT_QUARTERS
    assert mx.block_dot_quarters([7] * 32, [15] * 32) == -4608
    assert mx.block_dot_quarters([8] * 32, [15] * 32) == 0
    assert mx.block_dot_quarters([1] + [0] * 31, [1] + [0] * 31) == 1     # 0.5 * 0.5 = 1/4
    with pytest.raises(mx.MXFormatError, match="shape"):
        mx.block_dot_quarters([1] * 31, [1] * 31)
    with pytest.raises(mx.MXFormatError, match="outside 0..15"):
        mx.block_dot_quarters([16] * 32, [1] * 32)
    with pytest.raises(mx.MXTypeError):
        mx.block_dot_quarters([1.0] * 32, [1] * 32)


# ==================================================================================================
# The accumulate step, fp32_add_scaled
# ==================================================================================================

ADD_CASES = [
    # acc, dot_quarters, exp, expected                       why
    (0, 0, 0, 0),                                          # (+0) + 0 = +0
    (NEG_ZERO, 0, 0, 0),                                   # (-0) + 0 = +0 (RNE)
    (NEG_ZERO, 0, -254, 0),
    (NEG_ZERO, 4, 0, ONE),                                 # -0 + 1 = 1
    (ONE, -4, 0, 0),                                       # x + (-x) = +0
    (0xBF80_0000, 4, 0, 0),                                # (-1) + 1 = +0
    (0, 4, -149, 0x0000_0001),                             # 2**-149: smallest subnormal
    (0, 2, -149, 0),                                       # 2**-150: tie -> even (0), sign +
    (0, -2, -149, NEG_ZERO),                               # -2**-150 rounds to -0
    (0, -1, -254, NEG_ZERO),                               # tiny negative rounds to -0
    (0, 1, -254, 0),
    (0, 3, -149, 0x0000_0001),                             # 0.75 * 2**-149 -> 2**-149
    (0x0000_0001, 2, -149, 0x0000_0002),                   # 1.5 ulp -> 2 (tie to even)
    (0x0000_0002, 2, -149, 0x0000_0002),                   # 2.5 ulp -> 2 (tie to even)
    (MAX_SUBNORMAL, 2, -149, MIN_NORMAL),                  # tie carries into the normal range
    (MAX_SUBNORMAL, 4, -149, MIN_NORMAL),                  # exact
    (MIN_NORMAL, -2, -149, MIN_NORMAL),                    # 2**-126 - 2**-150: tie -> even 2**-126
    (MIN_NORMAL, -3, -149, MAX_SUBNORMAL),
    (MIN_NORMAL, -4, -149, MAX_SUBNORMAL),                 # back into subnormals, exactly
    (0x8080_0000, 4, -149, 0x807F_FFFF),                   # -2**-126 + 2**-149
    (0x3FFF_FFFF, 1, -22, 0x4000_0000),                    # 2 - 2**-23 + 2**-24: tie, odd -> carry
    (0x3F7F_FFFF, 1, -23, 0x3F80_0000),                    # 1 - 2**-24 + 2**-25: tie, odd -> up
    (0x3F7F_FFFE, 1, -23, 0x3F7F_FFFE),                    # tie, even -> stays
    (ONE, 1, -22, ONE),                                    # 1 + 2**-24: tie -> even (1)
    (ONE, 3, -23, 0x3F80_0001),                            # 1 + 1.5 * 2**-24: just above half
    (ONE, -1, -22, 0x3F7F_FFFF),                           # 1 - 2**-24 is exact below 1
    (ONE, -1, -23, ONE),                                   # 1 - 2**-25: tie -> even (1)
    (ONE, 4608, 254, POS_INF),                             # huge term overflows
    (ONE, -4608, 254, NEG_INF),
    (MAX_FINITE, 4, 103, POS_INF),                         # max + 2**103: tie, odd -> Inf
    (MAX_FINITE, 3, 103, MAX_FINITE),                      # max + 0.75 * 2**103: below the tie
    (MAX_FINITE, 5, 103, POS_INF),
    (MAX_FINITE, 4, 104, POS_INF),
    (MAX_FINITE | NEG_ZERO, -4, 103, NEG_INF),
    (MAX_FINITE, -4, 103, 0x7F7F_FFFE),                    # max - 2**103: tie -> even, down
    (0, 4, 127, 0x7F00_0000),                              # 2**127
    (0, 8, 127, POS_INF),                                  # 2**128
    (0, 7, 127, 0x7F60_0000),                              # 1.75 * 2**127, exact
]


@pytest.mark.parametrize("acc, dot, exp, want", ADD_CASES)
def test_fp32_add_scaled_directed(acc, dot, exp, want):
    assert ref.add_scaled(acc, dot, exp) == want
    assert mx.fp32_add_scaled(acc, dot, exp) == want
    assert int(mx.fp32_add_scaled_array(acc, dot, exp)) == want


@pytest.mark.parametrize("acc", [POS_INF, NEG_INF])
def test_fp32_add_scaled_infinity_absorbs_finite_terms(acc):
    for dot, exp in ((0, 0), (4608, 254), (-4608, 254), (-1, -254)):
        assert mx.fp32_add_scaled(acc, dot, exp) == acc


@pytest.mark.parametrize("acc", [0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0x7FFF_FFFF, 0xFFFF_FFFF])
def test_fp32_add_scaled_nan_is_canonical(acc):
    assert mx.fp32_add_scaled(acc, 4, 0) == 0x7FC0_0000
    assert int(mx.fp32_add_scaled_array(acc, 4, 0)) == 0x7FC0_0000


ACCS = [0, NEG_ZERO, 1, 0x8000_0003, 0x0012_3456, MAX_SUBNORMAL, MIN_NORMAL, 0x80FF_FFFF, 0x0D2A_5F11,
        ONE, 0xBFC0_0001, 0x4B7F_FFFF, 0x6ACA_FE01, 0xF5A5_A5A5, 0x7F00_0001, MAX_FINITE]
DOTS = [1, -3, 4097, 4608, -4607]


def test_fp32_add_scaled_every_block_exponent():
    # For each accumulator (every kind of binade) every block exponent, hence every exponent
    # difference between the two operands from "term entirely below the sticky bit" to "accumulator
    # entirely below it", with small, odd and maximal dot products.
    accs, dots, exps = np.meshgrid(ACCS, DOTS, np.arange(-254, 255), indexing="ij")
    fast = mx.fp32_add_scaled_array(accs.astype(np.uint32), dots, exps)
    for acc, dot, exp, got in zip(accs.ravel(), dots.ravel(), exps.ravel(), fast.ravel(), strict=True):
        want = ref.add_scaled(int(acc), int(dot), int(exp))
        assert mx.fp32_add_scaled(int(acc), int(dot), int(exp)) == want, (hex(acc), dot, exp)
        assert int(got) == want, (hex(acc), dot, exp)


def _lsb_exponent(acc):
    e = (acc >> 23) & 0xFF
    return max(e, 1) - 150


@DETERMINISTIC
@given(acc=finite_f32_bits, offset=st.sampled_from([-1, 0, 1]), negate=st.booleans(),
       width=st.integers(0, 12))
def test_fp32_add_scaled_ties_and_neighbours(acc, offset, negate, width):
    # term = half an ulp of acc (+- the smallest step a 13-bit dot can add below it): exact ties and
    # the sticky-bit cases on either side of them, in both directions.
    lsb = _lsb_exponent(acc)
    dot = ((1 << width) + offset) * (-1 if negate else 1)
    exp = lsb - 1 - width + 2                   # dot * 2**(exp - 2) = (2**width + offset) * 2**(lsb-1-width)
    assume(-254 <= exp <= 254)
    want = ref.add_scaled(acc, dot, exp)
    assert mx.fp32_add_scaled(acc, dot, exp) == want
    assert int(mx.fp32_add_scaled_array(acc, dot, exp)) == want


def test_fp32_add_scaled_carry_into_next_binade():
    # All-ones significands plus half an ulp: the tie goes up (odd) and carries into the next binade,
    # which in bit patterns is just acc + 1; at the top that is +Inf.
    for biased in range(0, 255):
        acc = (biased << 23) | 0x7F_FFFF
        exp = _lsb_exponent(acc) - 1 + 2 - 2           # dot = 4 -> 4 * 2**(exp - 2) = 2**(lsb - 1)
        if exp < -254:
            continue
        for sign in (0, NEG_ZERO):
            got = mx.fp32_add_scaled(acc | sign, -4 if sign else 4, exp)
            assert got == (acc + 1) | sign
            assert got == ref.add_scaled(acc | sign, -4 if sign else 4, exp)


@DETERMINISTIC
@given(acc=st.integers(0, 2 ** 32 - 1), dot=st.integers(-4608, 4608), exp=st.integers(-254, 254))
def test_fp32_add_scaled_matches_reference(acc, dot, exp):
    want = ref.add_scaled(acc, dot, exp)
    assert mx.fp32_add_scaled(acc, dot, exp) == want
    assert int(mx.fp32_add_scaled_array(acc, dot, exp)) == want


def test_fp32_add_scaled_array_matches_scalar_in_bulk():
    rng = np.random.default_rng(11)
    n = 60_000
    # Accumulators: random patterns, but half of them with exponents near the term's, where the
    # interesting alignments happen.
    exp = rng.integers(-254, 255, size=n)
    dot = rng.integers(-4608, 4609, size=n)
    acc = rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32)
    near = rng.random(n) < 0.5
    biased = np.clip(exp + 127 + rng.integers(-30, 30, size=n), 0, 254).astype(np.uint32)
    acc = np.where(near, (acc & 0x807F_FFFF) | (biased << 23), acc).astype(np.uint32)
    got = mx.fp32_add_scaled_array(acc, dot, exp)
    for i in range(n):
        assert int(got[i]) == mx.fp32_add_scaled(int(acc[i]), int(dot[i]), int(exp[i])), i


@pytest.mark.parametrize("args, match", [
    ((2 ** 32, 0, 0), "acc_bits"), ((-1, 0, 0), "acc_bits"),
    ((0, 4609, 0), "dot_quarters"), ((0, -4609, 0), "dot_quarters"),
    ((0, 0, 255), "exp"), ((0, 0, -255), "exp"),
])
def test_fp32_add_scaled_rejects_out_of_contract_arguments(args, match):
    with pytest.raises(mx.MXFormatError, match=match):
        mx.fp32_add_scaled(*args)
    with pytest.raises(mx.MXFormatError, match=match):
        mx.fp32_add_scaled_array(*args)


def test_fp32_add_scaled_rejects_floats():
    with pytest.raises(mx.MXTypeError):
        mx.fp32_add_scaled(1.0, 0, 0)
    with pytest.raises(mx.MXTypeError):
        mx.fp32_add_scaled_array(np.float32(1.0), 0, 0)


# ==================================================================================================
# Matmul
# ==================================================================================================

def u8(x):
    return np.asarray(x, dtype=np.uint8)


def check_against_reference(a_codes, a_scales, b_codes, b_scales, c=None):
    """matmul == matmul_scalar == the Fraction reference, bit for bit; returns the output bits."""
    got = bits_of(mx.matmul(a_codes, a_scales, b_codes, b_scales, c))
    slow = bits_of(mx.matmul_scalar(a_codes, a_scales, b_codes, b_scales, c))
    m, n = a_codes.shape[0], b_codes.shape[1]
    c_bits = np.zeros((m, n), np.uint32) if c is None else np.broadcast_to(bits_of(c), (m, n))
    want = np.array(ref.matmul(a_codes.tolist(), a_scales.tolist(), b_codes.tolist(), b_scales.tolist(),
                               c_bits.tolist()), dtype=np.uint32).reshape(m, n)
    assert (slow == want).all(), (slow, want)
    assert (got == want).all(), (got, want)
    return got


def one_hot_block(code, nblocks, which, at=0):
    """K = 32 * nblocks codes, all zero except ``code`` at position ``at`` of block ``which``."""
    v = np.zeros(32 * nblocks, dtype=np.uint8)
    v[32 * which + at] = code
    return v


def gemm_1x1(a_vec, a_scales, b_vec, b_scales, c=None):
    a = u8(a_vec)[None, :]
    b = u8(b_vec)[:, None]
    c_arr = None if c is None else f32(np.array([[c]], dtype=np.uint32))
    return int(check_against_reference(a, u8(a_scales)[None, :], b, u8(b_scales)[:, None], c_arr)[0, 0])


def test_matmul_single_block_equals_rounded_float64_dot():
    # With one block the result is the exact dot product rounded once; float64 holds that dot
    # exactly, so NumPy's float64 -> float32 cast is an independent oracle here.
    rng = np.random.default_rng(3)
    a_codes = rng.integers(0, 16, size=(16, 32), dtype=np.uint8)
    b_codes = rng.integers(0, 16, size=(32, 16), dtype=np.uint8)
    a_scales = rng.integers(0, 255, size=(16, 1), dtype=np.uint8)
    b_scales = rng.integers(0, 255, size=(1, 16), dtype=np.uint8)
    exact = (mx.E2M1_VALUES[a_codes].astype(np.float64) @ mx.E2M1_VALUES[b_codes].astype(np.float64)) \
        * np.exp2(a_scales.astype(np.float64) - 127) * np.exp2(b_scales.astype(np.float64) - 127)
    with np.errstate(over="ignore", under="ignore"):
        want = exact.astype(np.float32)
    want = np.where(exact == 0, np.float32(0), want)      # exact zeros are +0; tiny ones keep the sign
    got = mx.matmul(a_codes, a_scales, b_codes, b_scales)
    assert (bits_of(got) == bits_of(want)).all()


def test_matmul_overflow_to_inf_and_inf_is_sticky():
    # Block 0: 1152 * 2**254 -> +Inf. Block 1 is hugely negative but finite: Inf stays.
    a = np.concatenate([np.full(32, 7), np.full(32, 7)])
    b = np.concatenate([np.full(32, 7), np.full(32, 15)])
    assert gemm_1x1(a, [254, 254], b, [254, 254]) == POS_INF
    assert gemm_1x1(a, [254, 254], b[::-1], [254, 254]) == NEG_INF


def test_matmul_finite_blocks_overflow_the_accumulator():
    # Each block is 3 * 1 * 2**126 = 1.5 * 2**127 (finite); their sum 3 * 2**127 overflows.
    a = one_hot_block(5, 2, 0) + one_hot_block(5, 2, 1)
    b = one_hot_block(2, 2, 0) + one_hot_block(2, 2, 1)
    assert gemm_1x1(a, [190, 190], b, [190, 190]) == POS_INF
    assert gemm_1x1(a, [190, 190], b | 8, [190, 190]) == NEG_INF
    # With the second block tiny, the sum stays at 1.5 * 2**127.
    assert gemm_1x1(a, [190, 190], b, [190, 1]) == 0x7F40_0000


def test_matmul_underflow_into_subnormals():
    a = one_hot_block(1, 1, 0)      # 0.5
    # 0.5 * 0.5 * 2**(sa + sb - 254) = 2**-149 when sa + sb = 107.
    assert gemm_1x1(a, [50], a, [57]) == 0x0000_0001
    assert gemm_1x1(a, [50], a, [56]) == 0                            # 2**-150: tie -> +0
    assert gemm_1x1(a, [50], a | 8, [56]) == NEG_ZERO                 # -2**-150 -> -0
    one_and_half = one_hot_block(3, 1, 0)   # 0.5 * 1.5 * 2**-148 = 1.5 * 2**-149: tie -> 2 * 2**-149
    assert gemm_1x1(a, [50], one_and_half, [56]) == 0x0000_0002
    assert gemm_1x1(a, [50], one_and_half, [55]) == 0x0000_0001      # 0.75 * 2**-149 -> 2**-149
    # Two subnormal blocks of 1152 * 2**(117 - 254) = 1.125 * 2**-127 sum into the normal range.
    sixes = np.full(64, 7)
    assert gemm_1x1(sixes, [58, 58], sixes, [59, 59]) == 0x0090_0000   # 1.125 * 2**-126
    assert gemm_1x1(sixes, [0, 0], sixes, [0, 0]) == 0                 # 1152 * 2**-254 -> +0


def test_matmul_cancellation_gives_plus_zero():
    a = np.concatenate([np.full(32, 3), np.full(32, 3)])                # +1.5 in both blocks
    b = np.concatenate([np.full(32, 6), np.full(32, 14)])               # +4, then -4
    assert gemm_1x1(a, [130, 130], b, [120, 120]) == 0
    assert gemm_1x1(a, [130, 130], b, [120, 120], c=NEG_ZERO) == 0
    # Cancelling c itself: c = -(block).
    block = ref.round_to_fp32(32 * Fraction(3, 2) * 4 * pow2(3 - 7))
    assert gemm_1x1(a[:32], [130], b[:32], [120], c=block | NEG_ZERO) == 0


def test_matmul_negative_zero_c():
    zero = np.zeros(32, dtype=np.uint8)
    assert gemm_1x1(zero, [127], zero, [127], c=NEG_ZERO) == 0          # (-0) + (+0) = +0
    assert gemm_1x1(np.full(32, 8), [127], np.full(32, 8), [127], c=NEG_ZERO) == 0   # (-0)*(-0) blocks
    tiny = one_hot_block(1, 1, 0)
    assert gemm_1x1(tiny, [0], tiny | 8, [0], c=NEG_ZERO) == NEG_ZERO  # -0 + (-2**-256) -> -0
    assert gemm_1x1(tiny, [0], tiny, [0], c=NEG_ZERO) == 0             # -0 + 2**-256 -> +0
    assert gemm_1x1(tiny, [127], tiny, [127], c=NEG_ZERO) == 0x3E80_0000   # -0 + 0.25


@pytest.mark.parametrize("c", [POS_INF, NEG_INF])
def test_matmul_infinite_c(c):
    a = np.full(64, 7)
    assert gemm_1x1(a, [254, 254], a | 8, [254, 254], c=c) == c
    assert gemm_1x1(a, [200, 1], a, [3, 254], c=c) == c


@pytest.mark.parametrize("c", [0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0x7FFF_FFFF, 0xFFC0_1234])
def test_matmul_nan_c_gives_canonical_nan(c):
    assert gemm_1x1(np.full(32, 2), [127], np.full(32, 2), [127], c=c) == 0x7FC0_0000


def test_matmul_nan_scales():
    rng = np.random.default_rng(5)
    a_codes = rng.integers(0, 16, size=(3, 96), dtype=np.uint8)
    b_codes = rng.integers(0, 16, size=(96, 4), dtype=np.uint8)
    a_scales = rng.integers(100, 150, size=(3, 3), dtype=np.uint8)
    b_scales = rng.integers(100, 150, size=(3, 4), dtype=np.uint8)
    a_scales[1, 2] = 0xFF            # last block of row 1
    b_scales[0, 3] = 0xFF            # first block of column 3
    a_codes[1, 64:] = 0              # NaN even though that block's dot product is zero
    got = check_against_reference(a_codes, a_scales, b_codes, b_scales)
    nan_mask = np.zeros((3, 4), dtype=bool)
    nan_mask[1, :] = True
    nan_mask[:, 3] = True
    assert (got[nan_mask] == 0x7FC0_0000).all()
    assert not np.isnan(f32(got[~nan_mask])).any()


SCALES = st.one_of(st.integers(0, 254), st.sampled_from([0, 1, 2, 63, 64, 127, 190, 191, 253, 254, 255]))
C_BITS = st.one_of(finite_f32_bits, st.sampled_from([0, NEG_ZERO, POS_INF, NEG_INF, 0x7FC0_0000, 0xFFC0_0001,
                                                     1, 0x8000_0001, MAX_FINITE, 0xFF7F_FFFF]))


@st.composite
def gemm_operands(draw):
    m = draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    nb = draw(st.integers(1, 3))
    k = 32 * nb
    codes = st.integers(0, 15)
    sparse = draw(st.booleans())          # sparse blocks make small dots and exact cancellation likely
    def code_list(size):
        if sparse:
            return [draw(codes) if draw(st.integers(0, 7)) == 0 else 0 for _ in range(size)]
        return draw(st.lists(codes, min_size=size, max_size=size))
    a_codes = u8(code_list(m * k)).reshape(m, k)
    b_codes = u8(code_list(k * n)).reshape(k, n)
    near = draw(st.integers(0, 254))      # scales clustered around one value, or anywhere
    cluster = st.integers(max(near - 3, 0), min(near + 3, 254))
    scale = draw(st.sampled_from([SCALES, cluster]))
    a_scales = u8(draw(st.lists(scale, min_size=m * nb, max_size=m * nb))).reshape(m, nb)
    b_scales = u8(draw(st.lists(scale, min_size=nb * n, max_size=nb * n))).reshape(nb, n)
    c = None
    if draw(st.booleans()):
        c = f32(np.array(draw(st.lists(C_BITS, min_size=m * n, max_size=m * n)), dtype=np.uint32)
                ).reshape(m, n)
    return a_codes, a_scales, b_codes, b_scales, c


@settings(DETERMINISTIC, max_examples=300)
@given(operands=gemm_operands())
def test_matmul_matches_exact_reference(operands):
    check_against_reference(*operands)


@DETERMINISTIC
@given(operands=gemm_operands())
def test_matmul_c_plus_minus_first_block_cancels(operands):
    # Adversarial c: minus the rounded first block, so the first accumulation is a near or exact
    # cancellation (exact when the block is representable), down to signed zeros and subnormals.
    a_codes, a_scales, b_codes, b_scales, _ = operands
    first = mx.matmul(a_codes[:, :32], a_scales[:, :1], b_codes[:32, :], b_scales[:1, :])
    check_against_reference(a_codes, a_scales, b_codes, b_scales, -first)


def test_matmul_matches_scalar_on_a_larger_random_problem():
    rng = np.random.default_rng(9)
    m, k, n = 6, 512, 5
    a_codes = rng.integers(0, 16, size=(m, k), dtype=np.uint8)
    b_codes = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    a_scales = rng.integers(0, 256, size=(m, k // 32), dtype=np.uint8)
    b_scales = rng.integers(0, 255, size=(k // 32, n), dtype=np.uint8)
    a_scales[a_scales == 255] = 127
    c = f32(rng.integers(0, 2 ** 32, size=(m, n), dtype=np.uint64).astype(np.uint32))
    fast = bits_of(mx.matmul(a_codes, a_scales, b_codes, b_scales, c))
    slow = bits_of(mx.matmul_scalar(a_codes, a_scales, b_codes, b_scales, c))
    assert (fast == slow).all()


def test_matmul_c_broadcasts_and_is_not_modified():
    a = np.full((2, 32), 2, dtype=np.uint8)
    b = np.full((32, 3), 2, dtype=np.uint8)
    c = np.array([1.0, -0.0, 2.0], dtype=np.float32)
    out = mx.matmul(a, np.full((2, 1), 127, np.uint8), b, np.full((1, 3), 127, np.uint8), c)
    assert out.tolist() == [[33.0, 32.0, 34.0]] * 2
    assert bits_of(c).tolist() == [ONE, NEG_ZERO, 0x4000_0000]


def test_matmul_gemm_64x1024x64():
    # The size the vectorized path is meant for (about 0.05 s; the scalar path would take minutes).
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 1024)).astype(np.float32)
    b = rng.standard_normal((64, 1024)).astype(np.float32)     # quantized along K, then transposed
    a_codes, a_scales = mx.quantize(a)
    bt_codes, bt_scales = mx.quantize(b)
    b_codes, b_scales = np.ascontiguousarray(bt_codes.T), np.ascontiguousarray(bt_scales.T)
    out = mx.matmul(a_codes, a_scales, b_codes, b_scales)
    rows = [0, 31, 63]
    cols = [0, 40, 63]
    slow = mx.matmul_scalar(a_codes[rows], a_scales[rows], b_codes[:, cols], b_scales[:, cols])
    assert (bits_of(out[np.ix_(rows, cols)]) == bits_of(slow)).all()
    # Sanity: close to the float64 product of the dequantized operands.
    exact = mx.dequantize(a_codes, a_scales).astype(np.float64) @ \
        mx.dequantize(bt_codes, bt_scales).astype(np.float64).T
    assert np.allclose(out, exact, rtol=1e-5, atol=1e-3)


def matmul_args(m=2, k=64, n=3):
    return (np.zeros((m, k), np.uint8), np.zeros((m, k // 32), np.uint8),
            np.zeros((k, n), np.uint8), np.zeros((k // 32, n), np.uint8))


def with_arg(index, value):
    args = list(matmul_args())
    args[index] = value
    return args


@pytest.mark.parametrize("args, kwargs, error, match", [
    (with_arg(2, np.zeros((32, 3), np.uint8)), {}, mx.MXFormatError, "K mismatch"),
    (with_arg(1, np.zeros((2, 1), np.uint8)), {}, mx.MXFormatError, "a_scales has shape"),
    (with_arg(3, np.zeros((2, 2), np.uint8)), {}, mx.MXFormatError, "b_scales has shape"),
    (with_arg(3, np.zeros((3, 2), np.uint8)), {}, mx.MXFormatError, "b_scales has shape"),
    ([np.zeros((2, 48), np.uint8), np.zeros((2, 1), np.uint8), np.zeros((48, 3), np.uint8),
      np.zeros((1, 3), np.uint8)], {}, mx.MXFormatError, "multiple of 32"),
    (with_arg(0, np.full((2, 64), 16, np.uint8)), {}, mx.MXFormatError, "code 16"),
    (with_arg(2, np.full((64, 3), 255, np.uint8)), {}, mx.MXFormatError, "code 255"),
    (with_arg(0, np.zeros((2, 64), np.int8)), {}, mx.MXTypeError, "a_codes must have dtype uint8"),
    (with_arg(1, np.zeros((2, 2), np.int64)), {}, mx.MXTypeError, "a_scales must have dtype uint8"),
    (with_arg(2, [[0] * 3] * 64), {}, mx.MXTypeError, "b_codes must be a numpy uint8 array"),
    (with_arg(0, np.zeros(64, np.uint8)), {}, mx.MXFormatError, "must be 2-D"),
    (matmul_args(), {"c": np.zeros((2, 3), np.float64)}, mx.MXTypeError, "c must be float32"),
    (matmul_args(), {"c": 0.0}, mx.MXTypeError, "c must be float32"),
    (matmul_args(), {"c": np.zeros((3, 2), np.float32)}, mx.MXFormatError, "not broadcastable"),
])
def test_matmul_rejects_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        mx.matmul(*args, **kwargs)
    with pytest.raises(error, match=match):
        mx.matmul_scalar(*args, **kwargs)


@pytest.mark.parametrize("codes, scales, error, match", [
    (np.zeros(64, np.uint8), np.zeros(2, np.int8), mx.MXTypeError, "scales must have dtype uint8"),
    (np.full(64, 99, np.uint8), np.zeros(2, np.uint8), mx.MXFormatError, "code 99"),
    (np.zeros(40, np.uint8), np.zeros(1, np.uint8), mx.MXFormatError, "multiple of 32"),
    (np.zeros(64, np.uint16), np.zeros(2, np.uint8), mx.MXTypeError, "codes must have dtype uint8"),
])
def test_dequantize_rejects_bad_input(codes, scales, error, match):
    with pytest.raises(error, match=match):
        mx.dequantize(codes, scales)
