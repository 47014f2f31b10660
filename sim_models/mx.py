"""Bit-exact golden model of Poblano's MXFP4 numerics: quantize, dequantize and block-scaled GEMM.

Every RTL block that touches MXFP4 data (hardware quantizer, MAC array, block-dot unit, binary32
accumulate adder) must reproduce this model bit for bit. The contract is written out in prose and
tables in ``docs/mx_numerics.md``; this docstring is the short version.

Formats
-------
* **E2M1 element code** (4 bits, ``S E1 E0 M``, held one per ``uint8``): codes ``0x0..0x7`` are
  ``+{0, 0.5, 1, 1.5, 2, 3, 4, 6}``, codes ``0x8..0xF`` the same magnitudes negated (``0x8`` is -0).
  See :data:`E2M1_VALUES` and :data:`E2M1_HALVES`.
* **E8M0 block scale** (``uint8``): code ``c`` means ``2**(c - 127)``; ``0xFF`` is NaN.
* **Block**: 32 consecutive elements along the reduction (last) axis share one scale.

Quantize (:func:`quantize`)
---------------------------
Per block, from the float32 bit patterns and in integers only: ``amax`` is the largest magnitude;
the shared exponent is ``floor(log2(amax)) - 2`` (``"floor"``, OCP MX v1.0 section 6.3, the default)
or the smallest ``s`` with ``amax / 2**s <= 6`` (``"rceil"``), clamped to ``[-127, 127]``; each
element ``x / 2**shared`` is rounded to the nearest E2M1 value, ties to even, saturating at 6, keeping
the sign. Blocks holding a NaN or an infinity get scale ``0xFF`` and codes 0; all-zero blocks get
scale ``0x00``. The scalar building blocks are :func:`scale_code` and :func:`encode_element`.

GEMM (:func:`matmul`)
---------------------
For each output, blocks are visited in increasing ``k``. A block contributes the exact integer dot
product of its E2M1 values (counted in quarters, :func:`block_dot_quarters`) times the exact power of
two ``2**(sa - 127) * 2**(sb - 127)``, added to a binary32 accumulator (initial value ``c``, default
+0) with exactly one round-to-nearest-even (:func:`fp32_add_scaled`). There is no flush to zero; a
``0xFF`` scale on either side of any block makes that output the canonical NaN ``0x7FC00000``.

All binary32 rounding is done on integers by :mod:`sim_models.fp32`, never with host floating point.
Scalar functions on Python ``int`` state the contract readably; :func:`quantize` and :func:`matmul`
are the vectorized NumPy forms that users call, and the tests check the two against each other and
against an independent exact-rational reference.
"""

import operator

import ml_dtypes
import numpy as np

from sim_models import fp32

__all__ = [
    "BLOCK_SIZE", "E2M1_VALUES", "E2M1_HALVES", "E8M0_BIAS", "E8M0_NAN", "FP32_QNAN", "MODES",
    "MAX_DOT_QUARTERS", "MIN_BLOCK_EXP", "MAX_BLOCK_EXP",
    "MXFormatError", "MXTypeError",
    "quantize", "dequantize", "matmul", "matmul_scalar",
    "scale_code", "encode_element", "block_dot_quarters", "fp32_add_scaled", "fp32_add_scaled_array",
]

BLOCK_SIZE = 32
"""Elements per block (one E8M0 scale each), along the last axis of quantized data."""

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
"""Value of each E2M1 code 0..15, as float32 (code 8 is -0.0)."""
E2M1_VALUES.flags.writeable = False

E2M1_HALVES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int64)
"""Value of each E2M1 code 0..15 times two, as a signed integer (codes 0 and 8 are both 0)."""
E2M1_HALVES.flags.writeable = False

E8M0_BIAS = 127
"""E8M0 code ``c`` (other than 0xFF) encodes ``2**(c - E8M0_BIAS)``."""
E8M0_NAN = 0xFF
"""The E8M0 NaN code."""
FP32_QNAN = fp32.QNAN
"""Bit pattern of every NaN the model outputs (0x7FC00000)."""

MODES = ("floor", "rceil")
"""Shared-exponent rules accepted by :func:`quantize` and :func:`scale_code`."""

MAX_DOT_QUARTERS = BLOCK_SIZE * 12 * 12
"""Largest magnitude of a block dot product in quarters: 32 * 6 * 6 * 4 = 4608."""
MIN_BLOCK_EXP = -2 * E8M0_BIAS
"""Smallest block exponent ``(sa - 127) + (sb - 127)`` for non-NaN scales (-254)."""
MAX_BLOCK_EXP = 2 * (0xFE - E8M0_BIAS)
"""Largest block exponent for non-NaN scales (254)."""

_MIN_SHARED, _MAX_SHARED = -127, 127
# Rounding an element to E2M1 compares y = |x| / 2**shared with the midpoints between neighbouring
# E2M1 magnitudes, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5, which are integers in quarters (4 * y).
# Crossing midpoint i moves from magnitude code i to i + 1. On a tie the even code wins, so ties go up
# exactly when i is odd (0.75 -> 1, 1.75 -> 2, 3.5 -> 4) and stay down otherwise.
_MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)
# Above the last midpoint everything is code 7 (6.0): saturation, no infinity in E2M1.
_ABS_MASK = 0x7FFF_FFFF
_WINDOW_BITS = 60          # accumulate-adder alignment window, see _add_scaled_unchecked
_NO_BITS_TOP = -10_000     # "top bit position" of a zero operand: below anything real


class MXFormatError(ValueError):
    """Malformed input to the MX model (shape, block size, code range, dtype or mode).

    The message is one line and names the offending argument, so command-line tools can print it.
    """


class MXTypeError(MXFormatError, TypeError):
    """An argument has the wrong dtype or type; also a :class:`TypeError`."""


# ==================================================================================================
# Scalar contract (Python int); these are what RTL unit tests compare against
# ==================================================================================================

def scale_code(amax_bits: int, mode: str = "floor") -> int:
    """E8M0 scale code of a block whose largest element magnitude has float32 pattern ``amax_bits``.

    Parameters
    ----------
    amax_bits : int
        Binary32 pattern ``0 <= amax_bits < 2**32`` of the block's largest magnitude; the sign bit
        is ignored. For a hardware quantizer this is ``max(x_bits & 0x7FFFFFFF)`` over the block:
        the magnitudes of binary32 patterns order like their integers, NaNs above infinity.
    mode : {"floor", "rceil"}
        ``"floor"``: ``shared = floor(log2(amax)) - 2``. ``"rceil"``: the smallest ``shared`` with
        ``amax / 2**shared <= 6``, which is ``floor(log2(amax)) - 2`` plus one when the significand
        of ``amax`` (in ``[1, 2)``) exceeds 1.5.

    Returns
    -------
    int
        ``0xFF`` if ``amax`` is NaN or infinite; ``0x00`` if it is zero; otherwise
        ``clamp(shared, -127, 127) + 127``. ``floor(log2(amax))`` is exact (from the exponent field,
        or from the leading one of the fraction for subnormals). For binary32 inputs the upper clamp
        never acts: the largest codes produced are 252 (floor) and 253 (rceil).
    """
    _check_mode(mode)
    bits = _check_uint(amax_bits, 32, "amax_bits") & _ABS_MASK
    if bits >= fp32.POS_INF:
        return E8M0_NAN
    if bits == 0:
        return 0
    _, significand, lsb = fp32.decode_finite(bits)
    width = significand.bit_length()
    shared = lsb + width - 1 - 2
    if mode == "rceil" and 2 * significand > 3 << (width - 1):   # significand / 2**(width-1) > 1.5
        shared += 1
    return min(max(shared, _MIN_SHARED), _MAX_SHARED) + E8M0_BIAS


def encode_element(x_bits: int, scale: int) -> int:
    """E2M1 code of the float32 ``x`` (pattern ``x_bits``) in a block with E8M0 scale code ``scale``.

    Parameters
    ----------
    x_bits : int
        Binary32 pattern of a finite element (any sign, subnormals included).
    scale : int
        E8M0 code 0..255. Any code is accepted, not only the one :func:`scale_code` would choose;
        elements too large for it saturate.

    Returns
    -------
    int
        For ``scale == 0xFF``: 0. Otherwise ``(sign << 3) | magnitude`` where ``sign`` is bit 31 of
        ``x_bits`` (so -0.0 and negative values that round to zero give 0x8) and ``magnitude`` is the
        code of the E2M1 magnitude nearest to ``|x| / 2**(scale - 127)``, ties to the even code,
        values above 6 giving 6 (code 7). The division is exact: it is done on the integer
        significand, so it is right even where ``x / 2**shared`` is not representable in float32.
    """
    bits = _check_uint(x_bits, 32, "x_bits")
    scale = _check_uint(scale, 8, "scale")
    if scale == E8M0_NAN:
        return 0
    if (bits & _ABS_MASK) >= fp32.POS_INF:
        raise MXFormatError(f"x_bits {bits:#010x} is not finite; a block with NaN/Inf has scale 0xFF")
    sign, significand, lsb = fp32.decode_finite(bits)
    # 4 * |x| / 2**shared = significand * 2**k, compared as the fraction num / den.
    k = lsb - (scale - E8M0_BIAS) + 2
    num, den = (significand << k, 1) if k >= 0 else (significand, 1 << -k)
    magnitude = sum(1 for i, t in enumerate(_MIDPOINT_QUARTERS)
                    if num > t * den or (num == t * den and i % 2 == 1))
    return (sign << 3) | magnitude


def block_dot_quarters(a_codes32, b_codes32) -> int:
    """Exact dot product of two 32-element E2M1 blocks, in units of 1/4.

    Parameters
    ----------
    a_codes32, b_codes32 : sequence of int
        32 E2M1 codes each, 0..15 (``uint8`` arrays or any integer sequence).

    Returns
    -------
    int
        ``sum(E2M1_HALVES[a[j]] * E2M1_HALVES[b[j]])``, i.e. ``4 * sum(value(a[j]) * value(b[j]))``,
        a signed integer with magnitude at most :data:`MAX_DOT_QUARTERS` (4608, i.e. 1152 in value).
        Signed zeros do not exist here: a zero dot product is the integer 0.
    """
    a = _check_block_codes(a_codes32, "a_codes32")
    b = _check_block_codes(b_codes32, "b_codes32")
    return sum(int(E2M1_HALVES[x]) * int(E2M1_HALVES[y]) for x, y in zip(a, b, strict=True))


def fp32_add_scaled(acc_bits: int, dot_quarters: int, exp: int) -> int:
    """One accumulation step: ``acc + dot_quarters / 4 * 2**exp``, rounded once to binary32 (RNE).

    This is the contract of the hardware accumulate adder; all arguments and the result are integers
    and the sum is formed exactly before its single rounding.

    Parameters
    ----------
    acc_bits : int
        Binary32 pattern of the accumulator, ``0 <= acc_bits < 2**32``; any value including
        subnormals, signed zeros, infinities and NaNs with any payload.
    dot_quarters : int
        Block dot product in quarters, as from :func:`block_dot_quarters`:
        ``|dot_quarters| <= 4608``.
    exp : int
        Block exponent ``(sa - 127) + (sb - 127)`` of two non-NaN E8M0 scales: ``-254 <= exp <= 254``.
        (NaN scales never reach the adder; :func:`matmul` makes such outputs NaN.)

    Returns
    -------
    int
        Binary32 pattern of the result:

        * ``acc`` NaN: ``0x7FC00000`` (the canonical quiet NaN, whatever the input payload);
        * ``acc`` ±Inf: ``acc`` unchanged (the block term is always finite, so Inf - Inf cannot occur);
        * exact sum zero: +0, including (-0) + 0, (+0) + 0 and x + (-x);
        * otherwise the exact sum rounded to nearest, ties to even: on the subnormal grid below
          ``2**-126`` (no flush to zero; a non-zero sum that rounds to zero keeps its sign), and ±Inf
          when the rounded magnitude reaches ``2**128`` (exact magnitude ``>= 2**128 - 2**103``).

    Raises
    ------
    MXFormatError
        If an argument is outside the ranges above.
    """
    acc = _check_uint(acc_bits, 32, "acc_bits")
    dot = _check_int(dot_quarters, -MAX_DOT_QUARTERS, MAX_DOT_QUARTERS, "dot_quarters")
    exp = _check_int(exp, MIN_BLOCK_EXP, MAX_BLOCK_EXP, "exp")
    if fp32.is_nan(acc):
        return fp32.QNAN
    if fp32.is_inf(acc):
        return acc
    sign, significand, lsb = fp32.decode_finite(acc)
    term_lsb = exp - 2                      # dot_quarters / 4 * 2**exp = dot_quarters * 2**(exp - 2)
    base = min(lsb, term_lsb)
    total = ((-significand if sign else significand) << (lsb - base)) + (dot << (term_lsb - base))
    if total == 0:
        return 0                            # exact zero sum: +0 under round-to-nearest
    return fp32.encode_rne(int(total < 0), abs(total), base)


def fp32_add_scaled_array(acc_bits, dot_quarters, exp) -> np.ndarray:
    """Element-wise :func:`fp32_add_scaled` over broadcastable integer arrays.

    Same contract and ranges; returns the result patterns as a ``uint32`` array of the broadcast
    shape. This is the step :func:`matmul` applies to all outputs at once.
    """
    acc = np.asarray(acc_bits)
    dot = np.asarray(dot_quarters)
    exp = np.asarray(exp)
    for name, arr in (("acc_bits", acc), ("dot_quarters", dot), ("exp", exp)):
        if arr.dtype.kind not in "iu":
            raise MXTypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    acc = acc.astype(np.int64)
    dot = dot.astype(np.int64)
    exp = exp.astype(np.int64)
    if acc.size and (acc.min() < 0 or acc.max() > 0xFFFF_FFFF):
        raise MXFormatError("acc_bits must be binary32 patterns in [0, 2**32)")
    if dot.size and np.abs(dot).max() > MAX_DOT_QUARTERS:
        raise MXFormatError(f"dot_quarters must satisfy |dot_quarters| <= {MAX_DOT_QUARTERS}")
    if exp.size and (exp.min() < MIN_BLOCK_EXP or exp.max() > MAX_BLOCK_EXP):
        raise MXFormatError(f"exp must be in [{MIN_BLOCK_EXP}, {MAX_BLOCK_EXP}]")
    acc, dot, exp = np.broadcast_arrays(acc, dot, exp)
    return _add_scaled_unchecked(acc, dot, exp).astype(np.uint32)


def matmul_scalar(a_codes, a_scales, b_codes, b_scales, c=None) -> np.ndarray:
    """:func:`matmul` written as plain loops over :func:`block_dot_quarters` and :func:`fp32_add_scaled`.

    Same arguments, checks and result as :func:`matmul`, but slow (Python loops over every output and
    block); it exists as the literal statement of the accumulation order and for cross-checking.
    """
    a_codes, a_scales, b_codes, b_scales, c_bits = _check_matmul_args(a_codes, a_scales, b_codes,
                                                                       b_scales, c)
    m, k = a_codes.shape
    n = b_codes.shape[1]
    out = np.empty((m, n), dtype=np.uint32)
    for i in range(m):
        for j in range(n):
            acc = int(c_bits[i, j])
            nan = False
            for blk in range(k // BLOCK_SIZE):
                cols = slice(blk * BLOCK_SIZE, (blk + 1) * BLOCK_SIZE)
                sa, sb = int(a_scales[i, blk]), int(b_scales[blk, j])
                if sa == E8M0_NAN or sb == E8M0_NAN:
                    nan = True
                    continue
                dot = block_dot_quarters(a_codes[i, cols], b_codes[cols, j])
                acc = fp32_add_scaled(acc, dot, (sa - E8M0_BIAS) + (sb - E8M0_BIAS))
            out[i, j] = fp32.QNAN if nan or fp32.is_nan(acc) else acc
    return out.view(np.float32)


# ==================================================================================================
# Vectorized API
# ==================================================================================================

def quantize(x, mode: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` to MXFP4: E2M1 codes and one E8M0 scale per 32 elements of the last axis.

    Parameters
    ----------
    x : array_like, floating
        Shape ``(..., K)`` with ``K`` a positive multiple of 32. float32 is used as is; bfloat16
        (``ml_dtypes.bfloat16``) and float16 are widened to float32, which is exact; float64 is first
        rounded to float32 (nearest-even; magnitudes that overflow float32 become ±Inf, so their
        block becomes a NaN block). Python sequences of floats are taken as float64.
    mode : {"floor", "rceil"}
        Shared-exponent rule, see :func:`scale_code`. ``"floor"`` (OCP MX v1.0) may saturate the
        largest elements of a block to ±6; ``"rceil"`` never saturates (every ``|x| / 2**shared``
        is at most 6) but loses one bit of resolution on blocks whose ``amax`` significand exceeds 1.5.

    Returns
    -------
    codes : numpy.ndarray of uint8, shape ``(..., K)``
        E2M1 codes 0..15, :func:`encode_element` of each element with its block's scale.
    scales : numpy.ndarray of uint8, shape ``(..., K // 32)``
        E8M0 codes, :func:`scale_code` of each block's largest magnitude. A block holding any NaN
        or ±Inf has scale 0xFF and all codes 0; an all-zero block (either sign) has scale 0x00.

    Raises
    ------
    MXFormatError
        Unknown ``mode``, 0-d input, or ``K`` not a positive multiple of 32.
    MXTypeError
        ``x`` is not a floating array (integer, bool, complex, other ml_dtypes formats).
    """
    _check_mode(mode)
    x = _as_float32(x)
    if x.ndim == 0:
        raise MXFormatError("x must have at least one dimension (blocks run along the last axis)")
    k = x.shape[-1]
    _check_k(k, "x")
    bits = np.ascontiguousarray(x).view(np.uint32).astype(np.int64)
    blocks = bits.reshape(x.shape[:-1] + (k // BLOCK_SIZE, BLOCK_SIZE))
    amax = (blocks & _ABS_MASK).max(axis=-1)
    scales = _scale_codes_array(amax, mode)
    codes = _encode_elements_array(blocks, scales[..., None])
    return codes.reshape(x.shape).astype(np.uint8), scales.astype(np.uint8)


def dequantize(codes, scales) -> np.ndarray:
    """Decode MXFP4 ``codes`` and ``scales`` to float32.

    Parameters
    ----------
    codes : numpy.ndarray of uint8, shape ``(..., K)``
        E2M1 codes 0..15; ``K`` a positive multiple of 32.
    scales : numpy.ndarray of uint8, shape ``(..., K // 32)``
        E8M0 codes, one per block of 32 along the last axis.

    Returns
    -------
    numpy.ndarray of float32, shape ``(..., K)``
        ``value(code) * 2**(scale - 127)``. Every such product has at most two significant bits, so
        it is exact whenever it is below ``2**128`` (subnormals included: the smallest non-zero value
        is ``2**-128``) and ±Inf otherwise, which happens only for scales >= 253 (as :func:`quantize`
        in ``"rceil"`` mode produces for ``amax >= 1.75 * 2**127``). Code 8 gives -0.0. Elements of
        a block with scale 0xFF are NaN (0x7FC00000).
    """
    codes = _check_codes(codes, "codes")
    scales = _check_uint8(scales, "scales")
    if codes.ndim == 0:
        raise MXFormatError("codes must have at least one dimension")
    k = codes.shape[-1]
    _check_k(k, "codes")
    want = codes.shape[:-1] + (k // BLOCK_SIZE,)
    if scales.shape != want:
        raise MXFormatError(f"scales has shape {scales.shape}, expected {want} for codes of shape "
                            f"{codes.shape}")
    scale_per_element = np.repeat(scales.astype(np.int64), BLOCK_SIZE, axis=-1)
    c = codes.astype(np.int64)
    bits = fp32.encode_rne_array(c >> 3, np.abs(E2M1_HALVES[c]), scale_per_element - E8M0_BIAS - 1)
    bits = np.where(scale_per_element == E8M0_NAN, fp32.QNAN, bits)
    return bits.astype(np.uint32).view(np.float32)


def matmul(a_codes, a_scales, b_codes, b_scales, c=None) -> np.ndarray:
    """MXFP4 GEMM ``C + A @ B`` with exact block dot products and a binary32 accumulator.

    Parameters
    ----------
    a_codes : numpy.ndarray of uint8, shape ``(M, K)``
        E2M1 codes of A; ``K`` a positive multiple of 32.
    a_scales : numpy.ndarray of uint8, shape ``(M, K // 32)``
        E8M0 scales of A, one per 32 consecutive elements of a row.
    b_codes : numpy.ndarray of uint8, shape ``(K, N)``
        E2M1 codes of B.
    b_scales : numpy.ndarray of uint8, shape ``(K // 32, N)``
        E8M0 scales of B, one per 32 consecutive elements of a column.
    c : numpy.ndarray of float32, broadcastable to ``(M, N)``, optional
        Initial accumulator value; default +0.0. Must already be float32 (a float64 ``c`` would need
        a rounding the model will not guess).

    Returns
    -------
    numpy.ndarray of float32, shape ``(M, N)``
        For each output ``(i, j)``, starting from ``acc = c[i, j]``, for blocks ``b = 0, 1, ...``:
        ``acc = fp32_add_scaled(acc, block_dot_quarters(A[i, block b], B[block b, j]),
        (a_scales[i, b] - 127) + (b_scales[b, j] - 127))``. If any block of the row or column has
        scale 0xFF, or ``acc`` becomes or starts NaN, the output is NaN with pattern 0x7FC00000.
        See :func:`fp32_add_scaled` for signed zeros, subnormals, infinities and overflow.

    Raises
    ------
    MXFormatError
        Shape mismatch, ``K`` not a positive multiple of 32, or a code above 15.
    MXTypeError
        Codes or scales not uint8, ``c`` not float32.
    """
    a_codes, a_scales, b_codes, b_scales, acc = _check_matmul_args(a_codes, a_scales, b_codes,
                                                                   b_scales, c)
    k = a_codes.shape[1]
    a_halves = E2M1_HALVES[a_codes]
    b_halves = E2M1_HALVES[b_codes]
    sa = a_scales.astype(np.int64)
    sb = b_scales.astype(np.int64)
    acc = acc.astype(np.int64)
    nan = np.zeros(acc.shape, dtype=bool)
    for blk in range(k // BLOCK_SIZE):
        cols = slice(blk * BLOCK_SIZE, (blk + 1) * BLOCK_SIZE)
        dot = a_halves[:, cols] @ b_halves[cols, :]            # exact: |dot| <= 4608
        nan |= (sa[:, blk, None] == E8M0_NAN) | (sb[None, blk, :] == E8M0_NAN)
        exp = (sa[:, blk, None] - E8M0_BIAS) + (sb[None, blk, :] - E8M0_BIAS)
        acc = _add_scaled_unchecked(acc, dot, exp)             # NaN-scale lanes are overwritten below
    acc = np.where(nan | ((acc & _ABS_MASK) > fp32.POS_INF), fp32.QNAN, acc)
    return acc.astype(np.uint32).view(np.float32)


# ==================================================================================================
# Vectorized kernels
# ==================================================================================================

def _scale_codes_array(amax_bits: np.ndarray, mode: str) -> np.ndarray:
    """Array form of :func:`scale_code` on ``int64`` magnitudes (sign already cleared)."""
    _, significand, lsb = fp32.decode_finite_array(amax_bits)
    width = fp32.bit_length_array(significand)
    shared = lsb + width - 1 - 2
    if mode == "rceil":
        shared = shared + (2 * significand > (3 << np.maximum(width - 1, 0)))
    codes = np.clip(shared, _MIN_SHARED, _MAX_SHARED) + E8M0_BIAS
    codes = np.where(amax_bits == 0, 0, codes)
    return np.where(amax_bits >= fp32.POS_INF, E8M0_NAN, codes)


def _encode_elements_array(x_bits: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Array form of :func:`encode_element` (broadcasting ``scales``), returning ``int64`` codes."""
    sign, significand, lsb = fp32.decode_finite_array(x_bits)
    # 4 * |x| / 2**shared = significand * 2**k. Only floor(4y) and whether 4y is an integer matter,
    # because every midpoint is an integer in quarters. Clipping k loses nothing: k >= 0 only happens
    # for normal x (subnormals have k <= -20 at every scale), whose significand >= 2**23 saturates
    # either way; and dropping 62 bits of a 24-bit significand leaves 0 either way.
    k = lsb - (scales - E8M0_BIAS) + 2
    left = np.clip(k, 0, 8)
    right = np.clip(-k, 0, 62)
    whole = (significand << left) >> right
    exact = (significand & ((np.int64(1) << right) - 1)) == 0
    magnitude = np.zeros(whole.shape, dtype=np.int64)
    for i, t in enumerate(_MIDPOINT_QUARTERS):
        above = (whole > t) | ((whole == t) & ~exact)
        if i % 2 == 1:
            above |= (whole == t) & exact
        magnitude += above
    codes = (sign << 3) | magnitude
    return np.where(scales == E8M0_NAN, 0, codes)


def _align(magnitude: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``magnitude * 2**shift`` for ``shift >= 0``; for ``shift < 0`` truncate and OR a sticky bit.

    The sticky ("jammed") result lies strictly inside the same open interval ``(2j, 2j + 2)`` as the
    exact value, which is all that rounding needs when the rounding position is at least two bits up.
    """
    left = magnitude << np.clip(shift, 0, 62)
    n = np.clip(-shift, 0, 62)
    right = (magnitude >> n) | ((magnitude & ((np.int64(1) << n) - 1)) != 0)
    return np.where(shift >= 0, left, right)


def _add_scaled_unchecked(acc: np.ndarray, dot: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """Array form of :func:`fp32_add_scaled` on ``int64`` arrays, without range checks.

    Both operands are placed in a window of ``_WINDOW_BITS`` (60) bits below the higher of their two
    leading-bit positions, so the exact sum fits an ``int64``. The operand with the higher leading bit
    always fits (it has at most 24 significant bits); the other one, if its bits run below the
    window, is truncated with a sticky bit OR-ed into the window's lowest bit. This is the classic
    guard/round/sticky argument, exact for any window of at least 27 bits (24 + guard + round +
    sticky): a truncated operand is then below 1/8 of the larger one, so the sum's leading bit is at
    most one position below the larger operand's, its ulp is at least 4 window units, and its rounding
    (half-ulp) bit lies strictly above the sticky bit while the larger operand has no bits there.
    (The tests fail with a 26-bit window.) With 60 bits the truncated operand is below ``2**-35`` of
    the larger one, which is itself exactly representable (or far beyond the overflow threshold), so
    it cannot change the result at all.
    """
    a_sign, a_mag, a_lsb = fp32.decode_finite_array(acc)
    d_sign = (dot < 0).astype(np.int64)
    d_mag = np.abs(dot)
    d_lsb = exp - 2
    a_top = np.where(a_mag > 0, a_lsb + fp32.bit_length_array(a_mag), _NO_BITS_TOP)
    d_top = np.where(d_mag > 0, d_lsb + fp32.bit_length_array(d_mag), _NO_BITS_TOP)
    base = np.maximum(a_top, d_top) - _WINDOW_BITS
    a_val = _align(a_mag, a_lsb - base)
    d_val = _align(d_mag, d_lsb - base)
    total = np.where(a_sign == 1, -a_val, a_val) + np.where(d_sign == 1, -d_val, d_val)
    # total == 0 only for an exact zero sum (a sticky operand is never cancelled), which encodes as +0.
    out = fp32.encode_rne_array((total < 0).astype(np.int64), np.abs(total), base)
    a_abs = acc & _ABS_MASK
    out = np.where(a_abs == fp32.POS_INF, acc, out)
    return np.where(a_abs > fp32.POS_INF, fp32.QNAN, out)


# ==================================================================================================
# Argument checks
# ==================================================================================================

def _check_mode(mode) -> None:
    if not isinstance(mode, str) or mode not in MODES:
        raise MXFormatError(f"unknown quantize mode {mode!r}; expected one of {', '.join(MODES)}")


def _check_k(k: int, name: str) -> None:
    if k == 0 or k % BLOCK_SIZE:
        raise MXFormatError(f"{name} has last-axis length {k}, which is not a positive multiple of "
                            f"{BLOCK_SIZE}")


def _check_uint(value, bits: int, name: str) -> int:
    return _check_int(value, 0, (1 << bits) - 1, name)


def _check_int(value, lo: int, hi: int, name: str) -> int:
    if isinstance(value, bool | float | np.bool_ | np.floating):
        raise MXTypeError(f"{name} must be an integer, got {type(value).__name__}")
    try:
        value = operator.index(value)
    except TypeError:
        raise MXTypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not lo <= value <= hi:
        raise MXFormatError(f"{name}={value} is outside [{lo}, {hi}]")
    return value


def _check_block_codes(codes, name: str) -> list[int]:
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise MXTypeError(f"{name} must hold integer E2M1 codes, got dtype {arr.dtype}")
    if arr.shape != (BLOCK_SIZE,):
        raise MXFormatError(f"{name} must have shape ({BLOCK_SIZE},), got {arr.shape}")
    if arr.min() < 0 or arr.max() > 15:
        raise MXFormatError(f"{name} holds a code outside 0..15")
    return [int(v) for v in arr]


def _check_uint8(arr, name: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise MXTypeError(f"{name} must be a numpy uint8 array, got {type(arr).__name__}")
    if arr.dtype != np.uint8:
        raise MXTypeError(f"{name} must have dtype uint8, got {arr.dtype}")
    return arr


def _check_codes(arr, name: str) -> np.ndarray:
    arr = _check_uint8(arr, name)
    if arr.size and arr.max() > 15:
        raise MXFormatError(f"{name} holds code {int(arr.max())}; E2M1 codes are 0..15")
    return arr


def _as_float32(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == ml_dtypes.bfloat16:
        return arr.astype(np.float32)                  # widening: exact
    if arr.dtype.kind == "f":
        # float16 widens exactly; float64 and wider round to nearest-even, overflowing to ±Inf as
        # documented (hence no overflow warning). A native float32 array is returned as is.
        with np.errstate(over="ignore"):
            return arr.astype(np.float32, copy=False)
    raise MXTypeError(f"x must be a floating array (float32, bfloat16, float16 or float64), "
                      f"got dtype {arr.dtype}")


def _check_matmul_args(a_codes, a_scales, b_codes, b_scales, c):
    """Validate GEMM operands; return them plus the initial accumulator bits, shape (M, N), uint32."""
    a_codes = _check_codes(a_codes, "a_codes")
    b_codes = _check_codes(b_codes, "b_codes")
    a_scales = _check_uint8(a_scales, "a_scales")
    b_scales = _check_uint8(b_scales, "b_scales")
    for name, arr in (("a_codes", a_codes), ("a_scales", a_scales), ("b_codes", b_codes),
                      ("b_scales", b_scales)):
        if arr.ndim != 2:
            raise MXFormatError(f"{name} must be 2-D, got shape {arr.shape}")
    m, k = a_codes.shape
    k_b, n = b_codes.shape
    if k != k_b:
        raise MXFormatError(f"K mismatch: a_codes is {a_codes.shape} but b_codes is {b_codes.shape}")
    _check_k(k, "a_codes")
    if a_scales.shape != (m, k // BLOCK_SIZE):
        raise MXFormatError(f"a_scales has shape {a_scales.shape}, expected {(m, k // BLOCK_SIZE)}")
    if b_scales.shape != (k // BLOCK_SIZE, n):
        raise MXFormatError(f"b_scales has shape {b_scales.shape}, expected {(k // BLOCK_SIZE, n)}")
    if c is None:
        c_bits = np.zeros((m, n), dtype=np.uint32)
    else:
        c_arr = np.asarray(c)
        if c_arr.dtype != np.float32:
            raise MXTypeError(f"c must be float32, got dtype {c_arr.dtype}")
        try:
            c_arr = np.broadcast_to(c_arr, (m, n))
        except ValueError:
            raise MXFormatError(f"c has shape {c_arr.shape}, not broadcastable to {(m, n)}") from None
        c_bits = np.ascontiguousarray(c_arr).view(np.uint32)
    return a_codes, a_scales, b_codes, b_scales, c_bits
