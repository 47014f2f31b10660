"""Slow exact-rational reference for the MX model, written independently of ``sim_models``.

Everything here is done with :class:`fractions.Fraction` and the definitions as stated in
``docs/mx_numerics.md`` (nearest value by comparing distances, floor(log2) by comparing powers of two,
binary32 rounding by scaling to the ulp), and binary32 bits come from :mod:`struct`. Nothing is
imported from ``sim_models``, so a shared mistake would have to be made twice.

It covers every OCP MX v1.0 element format (``FORMATS``); the E2M1-only helpers (``e2m1_value``,
``e2m1_nearest``, ``add_scaled``) are the originals the MXFP4 tests were written against.
"""

import functools
import struct
from fractions import Fraction

E8M0_NAN = 0xFF
QNAN = 0x7FC0_0000
POS_INF_BITS = 0x7F80_0000
SIGN = 0x8000_0000

# binary32 parameters
PRECISION = 24
EMIN = -126
EMAX = 127
OVERFLOW = Fraction(2) ** (EMAX + 1)


def fp32_to_fraction(bits: int) -> Fraction:
    """Exact value of a finite binary32 pattern (the sign of zero is lost)."""
    (value,) = struct.unpack("<f", struct.pack("<I", bits))
    return Fraction(value)


def fp32_is_nan(bits: int) -> bool:
    (value,) = struct.unpack("<f", struct.pack("<I", bits))
    return value != value


def fp32_is_inf(bits: int) -> bool:
    (value,) = struct.unpack("<f", struct.pack("<I", bits))
    return value in (float("inf"), float("-inf"))


def fp32_is_negative(bits: int) -> bool:
    return bool(bits >> 31)


def floor_log2(value: Fraction) -> int:
    """Largest integer e with 2**e <= value, for value > 0, by comparison with powers of two."""
    assert value > 0
    e = value.numerator.bit_length() - value.denominator.bit_length()
    while Fraction(2) ** e > value:
        e -= 1
    while Fraction(2) ** (e + 1) <= value:
        e += 1
    return e


def round_to_fp32(value: Fraction, negative_zero: bool = False) -> int:
    """Round an exact rational to binary32 (nearest, ties to even) and return its bit pattern.

    ``negative_zero`` says which zero to return when ``value`` is exactly zero; an inexact value that
    rounds to zero keeps its own sign.
    """
    if value == 0:
        return SIGN if negative_zero else 0
    sign = SIGN if value < 0 else 0
    a = abs(value)
    e = max(floor_log2(a), EMIN)
    ulp = Fraction(2) ** (e - (PRECISION - 1))
    n = a / ulp
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    rounded = whole * ulp
    if rounded >= OVERFLOW:
        return sign | POS_INF_BITS
    # ``rounded`` is a binary32 number, so float() and the float32 packing below are both exact.
    return sign | struct.unpack("<I", struct.pack("<f", float(rounded)))[0]


def e2m1_value(code: int) -> Fraction:
    """Value of an E2M1 code from its bits S E1 E0 M (bias 1, one subnormal exponent)."""
    sign = -1 if code & 0b1000 else 1
    exponent = (code >> 1) & 0b11
    mantissa = code & 1
    if exponent == 0:
        magnitude = Fraction(mantissa, 2)
    else:
        magnitude = (1 + Fraction(mantissa, 2)) * Fraction(2) ** (exponent - 1)
    return sign * magnitude


E2M1_MAGNITUDES = [e2m1_value(c) for c in range(8)]


def e2m1_nearest(y: Fraction) -> int:
    """E2M1 code of the magnitude nearest to ``|y|`` (ties to the even code, saturating), sign of y.

    Zero magnitude with ``y < 0`` gives 8; callers handle -0.0 inputs themselves.
    """
    a = abs(y)
    best = min(range(8), key=lambda c: (abs(E2M1_MAGNITUDES[c] - a), c % 2))
    return best | (8 if y < 0 else 0)


# ---- the OCP MX v1.0 element formats ---------------------------------------------------------------
# name: (exponent bits, mantissa bits, exponent bias, special codes), from the OCP Microscaling
# Formats (MX) v1.0 specification, section 5.3: FP4 and FP6 have no special codes; E4M3 has no
# infinities and S.1111.111 is NaN; E5M2 follows IEEE 754, exponent 11111 being Inf (mantissa 00) or NaN.

FORMATS = {
    "e2m1": (2, 1, 1, "none"),
    "e2m3": (2, 3, 1, "none"),
    "e3m2": (3, 2, 3, "none"),
    "e4m3": (4, 3, 7, "e4m3"),
    "e5m2": (5, 2, 15, "ieee"),
}

NAN = "nan"
POS_INF = "+inf"
NEG_INF = "-inf"


def element_value(code: int, fmt: str):
    """Value of an element code: a Fraction, or NAN / POS_INF / NEG_INF. -0 comes back as 0."""
    ebits, mbits, bias, specials = FORMATS[fmt]
    negative = bool(code >> (ebits + mbits) & 1)
    exponent = (code >> mbits) & ((1 << ebits) - 1)
    mantissa = code & ((1 << mbits) - 1)
    all_ones = (1 << ebits) - 1
    if specials == "e4m3" and exponent == all_ones and mantissa == (1 << mbits) - 1:
        return NAN
    if specials == "ieee" and exponent == all_ones:
        if mantissa:
            return NAN
        return NEG_INF if negative else POS_INF
    if exponent == 0:
        magnitude = Fraction(mantissa, 2 ** mbits) * Fraction(2) ** (1 - bias)
    else:
        magnitude = (1 + Fraction(mantissa, 2 ** mbits)) * Fraction(2) ** (exponent - bias)
    return -magnitude if negative else magnitude


def code_count(fmt: str) -> int:
    ebits, mbits, _, _ = FORMATS[fmt]
    return 2 ** (1 + ebits + mbits)


def is_special(code: int, fmt: str) -> bool:
    return not isinstance(element_value(code, fmt), Fraction)


@functools.cache
def finite_magnitudes(fmt: str) -> tuple[tuple[int, Fraction], ...]:
    """(code, value) of every non-negative finite code, in code order."""
    return tuple((c, element_value(c, fmt)) for c in range(code_count(fmt) // 2) if not is_special(c, fmt))


def max_normal(fmt: str) -> Fraction:
    return max(v for _, v in finite_magnitudes(fmt))


def nearest_code(y: Fraction, fmt: str) -> int:
    """Code of the finite magnitude nearest to ``|y|`` (ties to the even code, so anything beyond the
    largest normal gives the largest normal), with the sign bit of ``y``."""
    a = abs(y)
    best = min(finite_magnitudes(fmt), key=lambda cv: (abs(cv[1] - a), cv[0] % 2))[0]
    return best | (code_count(fmt) // 2 if y < 0 else 0)


def shared_exponent(amax: Fraction, mode: str, fmt: str = "e2m1") -> int:
    """Unclamped shared exponent of a block with largest magnitude ``amax > 0``."""
    top = max_normal(fmt)
    if mode == "floor":
        return floor_log2(amax) - floor_log2(top)
    assert mode == "rceil"
    s = floor_log2(amax) - 40
    while amax / Fraction(2) ** s > top:
        s += 1
    return s


def quantize_block(bits32: list[int], mode: str, fmt: str = "e2m1") -> tuple[list[int], int]:
    """Reference quantization of one block of 32 binary32 patterns: (codes, scale)."""
    negative_zero = code_count(fmt) // 2
    if any(fp32_is_nan(b) or fp32_is_inf(b) for b in bits32):
        return [0] * 32, E8M0_NAN
    values = [fp32_to_fraction(b) for b in bits32]
    amax = max(abs(v) for v in values)
    if amax == 0:
        return [negative_zero if fp32_is_negative(b) else 0 for b in bits32], 0
    shared = min(max(shared_exponent(amax, mode, fmt), -127), 127)
    codes = []
    for b, v in zip(bits32, values, strict=True):
        code = nearest_code(v / Fraction(2) ** shared, fmt)
        if fp32_is_negative(b):
            code |= negative_zero
        codes.append(code)
    return codes, shared + 127


def block_term(a_codes: list[int], b_codes: list[int], sa: int, sb: int, a_fmt: str = "e2m1",
               b_fmt: str = "e2m1") -> Fraction:
    """Exact value of one block's contribution (non-NaN scales, finite codes)."""
    dot = sum(element_value(x, a_fmt) * element_value(y, b_fmt)
              for x, y in zip(a_codes, b_codes, strict=True))
    return dot * Fraction(2) ** (sa - 127) * Fraction(2) ** (sb - 127)


def accumulate(acc_bits: int, term: Fraction) -> int:
    """One IEEE 754 binary32 addition of the exact finite ``term`` (+0 if zero) to ``acc_bits``."""
    if fp32_is_nan(acc_bits):
        return QNAN
    if fp32_is_inf(acc_bits):
        return acc_bits
    exact = fp32_to_fraction(acc_bits) + term
    # IEEE 754 section 6.3: an exact zero sum is +0 in round-to-nearest unless both operands are -0;
    # the block term is never -0.
    return round_to_fp32(exact, negative_zero=False)


def add_scaled(acc_bits: int, dot_quarters: int, exp: int) -> int:
    """Reference for ``fp32_add_scaled``: acc + dot_quarters / 4 * 2**exp."""
    return accumulate(acc_bits, Fraction(dot_quarters, 4) * Fraction(2) ** exp)


def matmul(a_codes, a_scales, b_codes, b_scales, c_bits, a_fmt="e2m1", b_fmt="e2m1") -> list[list[int]]:
    """Reference GEMM on nested lists / arrays of ints; returns output bit patterns.

    A NaN scale, or a NaN or Inf element code, in any block of the row or column gives the NaN."""
    m, k = len(a_codes), len(a_codes[0])
    n = len(b_codes[0])
    out = [[0] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            acc = int(c_bits[i][j])
            nan = False
            for blk in range(k // 32):
                sa, sb = int(a_scales[i][blk]), int(b_scales[blk][j])
                ks = range(32 * blk, 32 * blk + 32)
                a_block = [int(a_codes[i][t]) for t in ks]
                b_block = [int(b_codes[t][j]) for t in ks]
                if (sa == E8M0_NAN or sb == E8M0_NAN or any(is_special(x, a_fmt) for x in a_block)
                        or any(is_special(y, b_fmt) for y in b_block)):
                    nan = True
                    continue
                term = block_term(a_block, b_block, sa, sb, a_fmt, b_fmt)
                acc = accumulate(acc, term)
            out[i][j] = QNAN if nan or fp32_is_nan(acc) else acc
    return out
