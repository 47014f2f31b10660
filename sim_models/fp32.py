"""Exact IEEE 754 binary32 arithmetic on raw bit patterns, in integers only.

The MX golden model (:mod:`sim_models.mx`) must round exactly once per accumulation step, exactly as
the hardware does. Host floating-point arithmetic cannot be trusted for that (float64 intermediate
results round twice, flush-to-zero modes and x87 excess precision differ between machines), so every
binary32 result in the model is produced here, from integers:

* a finite binary32 value is decoded into ``(sign, significand, lsb_exponent)`` with
  ``value = (-1)**sign * significand * 2**lsb_exponent`` exactly (:func:`decode_finite`);
* an exact real result, given the same way, is rounded once, to nearest with ties to even, and
  encoded as binary32 bits, with gradual underflow (subnormals are produced, never flushed) and
  overflow to infinity (:func:`encode_rne`).

Decoding and rounding each have a scalar form on Python ``int`` (the readable reference) and a
vectorized form on NumPy ``int64`` arrays (what the GEMM model runs); the tests check that they agree.

Bit patterns are always unsigned 32-bit integers: bit 31 is the sign, bits 30..23 the biased exponent
and bits 22..0 the fraction.
"""

import numpy as np

__all__ = [
    "SIGN_BIT", "EXP_MASK", "FRAC_MASK", "POS_INF", "NEG_INF", "QNAN", "MAX_FINITE", "MIN_LSB_EXPONENT",
    "is_nan", "is_inf", "decode_finite", "encode_rne", "floor_log2",
    "bit_length_array", "decode_finite_array", "encode_rne_array",
]

SIGN_BIT = 0x8000_0000
EXP_MASK = 0x7F80_0000
FRAC_MASK = 0x007F_FFFF
POS_INF = 0x7F80_0000
NEG_INF = 0xFF80_0000
QNAN = 0x7FC0_0000
"""The canonical quiet NaN; every NaN the model produces has exactly this pattern."""
MAX_FINITE = 0x7F7F_FFFF
"""Largest finite binary32, (2 - 2**-23) * 2**127."""
MIN_LSB_EXPONENT = -149
"""Weight of the least significant significand bit of subnormals (and of the smallest normals)."""

_SIGNIFICAND_BITS = 24     # including the implicit bit
_EXP_BIAS_LSB = 150        # lsb_exponent = biased_exponent - 150 for normals
_ARRAY_SHIFT_LIMIT = 62    # shifts by more than this are handled explicitly in the array code


# --------------------------------------------------------------------------------------------------
# Scalar forms (Python int)
# --------------------------------------------------------------------------------------------------

def is_nan(bits: int) -> bool:
    """Whether the binary32 pattern ``bits`` is a NaN (any sign, any payload)."""
    return (bits & 0x7FFF_FFFF) > POS_INF


def is_inf(bits: int) -> bool:
    """Whether the binary32 pattern ``bits`` is +Inf or -Inf."""
    return (bits & 0x7FFF_FFFF) == POS_INF


def decode_finite(bits: int) -> tuple[int, int, int]:
    """Split a finite binary32 pattern into ``(sign, significand, lsb_exponent)``.

    Parameters
    ----------
    bits : int
        Binary32 bit pattern, ``0 <= bits < 2**32``, not Inf or NaN.

    Returns
    -------
    sign : int
        0 or 1 (bit 31).
    significand : int
        ``0 <= significand < 2**24``; includes the implicit leading 1 for normal numbers.
    lsb_exponent : int
        Weight of the significand's least significant bit: ``biased_exponent - 150`` for normals,
        ``-149`` for subnormals and zeros. The value is exactly
        ``(-1)**sign * significand * 2**lsb_exponent``.
    """
    sign = bits >> 31
    biased = (bits >> 23) & 0xFF
    frac = bits & FRAC_MASK
    if biased == 0xFF:
        raise ValueError(f"binary32 pattern {bits:#010x} is not finite")
    if biased == 0:
        return sign, frac, MIN_LSB_EXPONENT
    return sign, frac | (1 << 23), biased - _EXP_BIAS_LSB


def encode_rne(sign: int, magnitude: int, exponent: int) -> int:
    """Round ``(-1)**sign * magnitude * 2**exponent`` to binary32, nearest-even, and return its bits.

    This is the single rounding step of every binary32 result in the model.

    Parameters
    ----------
    sign : int
        0 or 1: the sign of the exact result. It is kept when the result rounds to zero (IEEE 754:
        an inexact result that rounds to zero has the sign of the exact result). Callers decide the
        sign of an *exact* zero, so ``magnitude == 0`` returns the zero with this ``sign``.
    magnitude : int
        Non-negative integer, any size.
    exponent : int
        Any integer.

    Returns
    -------
    int
        Binary32 bits. Results below the normal range are rounded on the subnormal grid (``2**-149``)
        and never flushed; results whose rounded magnitude reaches ``2**128`` (that is, exact
        magnitudes ``>= 2**128 - 2**103``) become infinity of the given sign.
    """
    if magnitude < 0:
        raise ValueError("magnitude must be non-negative")
    sign_bits = SIGN_BIT if sign else 0
    if magnitude == 0:
        return sign_bits
    # Weight of the result's least significant bit: 24 significant bits, but never below 2**-149.
    lsb = max(exponent + magnitude.bit_length() - _SIGNIFICAND_BITS, MIN_LSB_EXPONENT)
    drop = lsb - exponent
    if drop <= 0:
        significand = magnitude << -drop
    else:
        significand = magnitude >> drop
        remainder = magnitude - (significand << drop)
        half = 1 << (drop - 1)
        if remainder > half or (remainder == half and significand & 1):
            significand += 1
    # significand is in [2**23, 2**24] for normal results (2**24 when rounding carried into the next
    # binade), or in [0, 2**23] with lsb == -149 for subnormal results. Adding it to the exponent
    # field minus one handles the implicit bit, the carry and the subnormal/normal boundary at once.
    bits = ((lsb + _EXP_BIAS_LSB - 1) << 23) + significand
    return sign_bits | min(bits, POS_INF)


def floor_log2(bits: int) -> int:
    """``floor(log2(|x|))`` of a finite, non-zero binary32 ``x``, exactly, from its bits.

    Returns a value in ``[-149, 127]``. Unlike ``math.floor(math.log2(x))`` this is exact just below
    powers of two and for subnormals.
    """
    _, significand, lsb = decode_finite(bits)
    if significand == 0:
        raise ValueError("floor_log2 of zero")
    return lsb + significand.bit_length() - 1


# --------------------------------------------------------------------------------------------------
# Array forms (NumPy int64), used by the vectorized GEMM
# --------------------------------------------------------------------------------------------------

def bit_length_array(v: np.ndarray) -> np.ndarray:
    """Element-wise ``int.bit_length`` of a non-negative ``int64`` array (exact, no float log)."""
    v = np.asarray(v, dtype=np.int64)
    n = np.zeros(v.shape, dtype=np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (1 << step)
        n += np.where(big, step, 0)
        v = np.where(big, v >> step, v)
    return n + (v > 0)


def decode_finite_array(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Array form of :func:`decode_finite`; ``bits`` are binary32 patterns in any integer dtype.

    Non-finite patterns decode to meaningless values; callers mask them.
    """
    bits = np.asarray(bits).astype(np.int64)
    sign = (bits >> 31) & 1
    biased = (bits >> 23) & 0xFF
    frac = bits & FRAC_MASK
    significand = np.where(biased == 0, frac, frac | (1 << 23))
    lsb = np.where(biased == 0, MIN_LSB_EXPONENT, biased - _EXP_BIAS_LSB)
    return sign, significand, lsb


def encode_rne_array(sign: np.ndarray, magnitude: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Array form of :func:`encode_rne`; ``magnitude`` must satisfy ``0 <= magnitude < 2**62``.

    Returns the binary32 patterns as ``int64``.
    """
    sign = np.asarray(sign, dtype=np.int64)
    magnitude = np.asarray(magnitude, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    lsb = np.maximum(exponent + bit_length_array(magnitude) - _SIGNIFICAND_BITS, MIN_LSB_EXPONENT)
    drop = lsb - exponent
    # Exact results (drop <= 0): shift left; -drop <= 23 there, because the result has fewer than 24
    # significant bits only when its lsb was clamped to -149.
    exact = magnitude << np.clip(-drop, 0, _SIGNIFICAND_BITS)
    # Rounded results (drop >= 1). Dropping more than 62 bits of a magnitude below 2**62 leaves less
    # than half an ulp: the result is zero, which the explicit mask below returns.
    d = np.clip(drop, 1, _ARRAY_SHIFT_LIMIT)
    kept = magnitude >> d
    remainder = magnitude & ((np.int64(1) << d) - 1)
    half = np.int64(1) << (d - 1)
    round_up = (remainder > half) | ((remainder == half) & ((kept & 1) == 1))
    rounded = np.where(drop > _ARRAY_SHIFT_LIMIT, 0, kept + round_up)
    significand = np.where(drop <= 0, exact, rounded)
    bits = ((lsb + _EXP_BIAS_LSB - 1) << 23) + significand
    bits = np.minimum(bits, POS_INF)
    bits = np.where(magnitude == 0, 0, bits)
    return bits | (sign << 31)
