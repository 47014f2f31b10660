"""Bit-exact golden model of Poblano's vector unit: the non-GEMM math of a transformer layer.

Every operation takes float32 arrays and returns float32 arrays whose bits are fixed by integer
arithmetic alone, in the style of :mod:`sim_models.fp32`: no host floating-point operation decides a
result bit. The prose contract, with the algorithm of every function, its constants as exact
integers, the rounding of every step and the special-value table, is ``docs/vpu_numerics.md``; this
docstring is the short version.

Common rules
------------
* binary32 in and out; **subnormals are kept** on input and produced on output (gradual underflow),
  never flushed. Every NaN a function returns is the canonical quiet NaN ``0x7FC00000``.
* ``add, sub, mul, fma, scale, max, min, clamp`` and the float32 <-> bfloat16 conversions are the
  IEEE 754 operations, correctly rounded (nearest, ties to even); ``fma`` rounds once.
* ``reciprocal`` is correctly rounded. ``exp`` and ``rsqrt`` are within 1 ulp, ``sigmoid`` and
  ``silu`` within 2 ulp (measured bounds in ``benchmarks/results/vpu.md``). They are built from
  three integer units that the RTL has too: the exponential core :func:`exp_core` (a 34-bit
  ``log2(e)``, two 256-entry tables of ``2**(i/256)`` and ``2**(i/65536)`` and one linear term), the
  divider :func:`divide_core` (27 quotient bits plus a sticky bit from a 34-bit divisor: restoring
  division) and the integer square root (:func:`isqrt_array`).
* Reductions run along the last axis. ``max_reduce`` is exact. ``sum`` and ``sum_squares``
  accumulate in an extended format (48-bit significand, unbounded exponent, one round to nearest
  even per addition) in a documented order that depends on ``lanes`` and ``slots``: element ``i``
  goes to accumulator ``i % (lanes * slots)``, each accumulator adds its elements in increasing
  ``i`` from +0, and the accumulators are combined by a pairwise tree, then rounded once to float32.
* ``softmax`` sums its exponentials exactly on a 2**-60 grid (order-independent integer sum).

Functions return new float32 arrays; inputs are not modified. Bad arguments (non-float32 data,
mismatched shapes, ``k`` out of range, negative ``eps``) raise :class:`VpuError`.
"""

import builtins
from decimal import Decimal, getcontext

import numpy as np

from sim_models import fp32, mx

__all__ = [
    "VpuError", "QNAN", "UNARY", "BINARY",
    "add", "sub", "mul", "fma", "scale", "max", "min", "clamp",
    "exp", "reciprocal", "rsqrt", "sigmoid", "silu",
    "sum", "sum_squares", "max_reduce",
    "rmsnorm", "softmax", "softmax_update", "swiglu", "rope", "rope_tables", "topk",
    "to_bfloat16", "from_bfloat16", "to_mx",
    "exp_core", "divide_core", "isqrt_array", "accumulate48",
    "LOG2E_Q33", "EXP_TABLE_HI", "EXP_TABLE_LO", "LN2_Q18",
    "DEFAULT_LANES", "DEFAULT_SLOTS", "MAX_LENGTH",
]

QNAN = fp32.QNAN
_ONE = 0x3F80_0000
_ABS = 0x7FFF_FFFF
_NEG_ZERO = fp32.SIGN_BIT

DEFAULT_LANES = 8
"""Lanes of the default vector unit (``rtl.vpu``): binary32 results per cycle."""
DEFAULT_SLOTS = 4
"""Partial sums per lane in ``sum`` / ``sum_squares`` (the depth of the RTL's accumulate loop)."""
MAX_LENGTH = 8192
"""Longest row the composite operations are specified (and tested) for."""


class VpuError(ValueError):
    """A bad argument to a vector-unit operation (dtype, shape, scalar out of range)."""


# ==================================================================================================
# Constants of the function units (exact integers; docs/vpu_numerics.md lists them)
# ==================================================================================================

def _exact_pow2_table(count: int, step_log2: int) -> tuple[int, ...]:
    """``round(2**(i / 2**step_log2) * 2**32)`` for ``i < count``, nearest (50 significant digits)."""
    getcontext().prec = 50
    two = Decimal(2)
    out = []
    for i in range(count):
        value = two ** (Decimal(i) / (two ** step_log2)) * (two ** 32)
        out.append(int(value.to_integral_value()))            # ROUND_HALF_EVEN; never a tie here
    return tuple(out)


LOG2E_Q33 = 0x2_E2A8_ECA5
"""``round(log2(e) * 2**33)``: 34 bits, the range-reduction constant of :func:`exp_core`."""
LN2_Q18 = 0x2_C5C8
"""``round(ln(2) * 2**18)``: 18 bits, the linear term of :func:`exp_core`."""
EXP_TABLE_HI = _exact_pow2_table(256, 8)
"""``round(2**(i/256) * 2**32)``, ``i = 0..255``: 33-bit values in ``[2**32, 2**33)``."""
EXP_TABLE_LO = _exact_pow2_table(256, 16)
"""``round(2**(i/65536) * 2**32)``, ``i = 0..255``: 33-bit values just above ``2**32``."""

_T_FRAC = 40           # fraction bits of t = x * log2(e) in the exponential core
_EXP_LIMIT_BIASED = 134  # |x| >= 2**7 (biased exponent 127 + 7): exp saturates to +Inf or +0
_DIV_BITS = 34         # dividend and divisor significands of the divider
_QUOTIENT_BITS = 27    # quotient bits of the divider (bit 26 down to bit 0)
_ACC_BITS = 48         # significand bits of the sum / sum_squares accumulators
_SOFTMAX_GRID = 60     # softmax sums exp terms exactly on the 2**-60 grid


# ==================================================================================================
# Argument checks and bit views
# ==================================================================================================

def _f32(x, name="x") -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise VpuError(f"{name} must be float32, got dtype {arr.dtype}")
    return arr


def _bits(x, name="x") -> np.ndarray:
    """float32 array -> its binary32 patterns as int64."""
    arr = _f32(x, name)
    return np.ascontiguousarray(arr).view(np.uint32).astype(np.int64).reshape(arr.shape)


def _float(bits) -> np.ndarray:
    """binary32 patterns (any integer dtype) -> float32 array."""
    return np.asarray(bits, dtype=np.int64).astype(np.uint32).view(np.float32)


def _scalar_bits(value, name) -> int:
    arr = np.asarray(value)
    if arr.shape != ():
        raise VpuError(f"{name} must be a scalar, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float32)
    else:
        raise VpuError(f"{name} must be a floating scalar, got dtype {arr.dtype}")
    return int(arr.reshape(1).view(np.uint32)[0])


def _same_shape(a, b, names):
    if a.shape != b.shape:
        raise VpuError(f"{names[0]} and {names[1]} must have the same shape, got {a.shape} and {b.shape}")


def _is_nan(b):
    return (b & _ABS) > fp32.POS_INF


def _is_inf(b):
    return (b & _ABS) == fp32.POS_INF


def _is_zero(b):
    return (b & _ABS) == 0


def _normalize(sig, lsb, width=24):
    """Shift non-zero significands so their top bit is bit ``width - 1``; adjust the exponent."""
    shift = width - fp32.bit_length_array(sig)
    shift = np.where(sig == 0, 0, shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return (sig << left) >> right, lsb - shift


def _order_key(b):
    """Total-order key of non-NaN binary32 patterns: -Inf < ... < -0 < +0 < ... < +Inf."""
    mag = b & _ABS
    return np.where(b >> 31, -mag - 1, mag)


# ==================================================================================================
# Exact IEEE operations
# ==================================================================================================

def _add_bits(a, b):
    """Correctly rounded ``a + b`` on binary32 patterns (int64 arrays, broadcast)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    sa, ma, ea = fp32.decode_finite_array(a)
    sb, mb, eb = fp32.decode_finite_array(b)
    # Order so that operand 1 has the larger (or equal) lsb exponent.
    swap = eb > ea
    s1, m1, e1 = np.where(swap, sb, sa), np.where(swap, mb, ma), np.where(swap, eb, ea)
    s2, m2, e2 = np.where(swap, sa, sb), np.where(swap, ma, mb), np.where(swap, ea, eb)
    d = e1 - e2
    # d <= 26: exact in int64 (at most 24 + 26 + 1 bits). d > 26: operand 1 is normal and operand 2
    # is below 2**-3 of its lsb; it only matters as a sticky bit three places below that lsb.
    near = d <= 26
    big = np.where(near, m1 << np.minimum(d, 26), m1 << 3)
    small = np.where(near, m2, (m2 != 0).astype(np.int64))
    exp = np.where(near, e2, e1 - 3)
    signed = np.where(s1 == 1, -big, big) + np.where(s2 == 1, -small, small)
    sign = (signed < 0).astype(np.int64)
    result = fp32.encode_rne_array(sign, np.abs(signed), exp)
    # Exact zero: -0 only for (-0) + (-0); x + (-x) is +0 under round-to-nearest.
    zero_both_neg = (signed == 0) & (sa == 1) & (sb == 1) & _is_zero(a) & _is_zero(b)
    result = np.where(signed == 0, np.where(zero_both_neg, _NEG_ZERO, 0), result)
    # Special values.
    ia, ib = _is_inf(a), _is_inf(b)
    result = np.where(ia, a, np.where(ib, b, result))
    nan = _is_nan(a) | _is_nan(b) | (ia & ib & ((a ^ b) >> 31 == 1))
    return np.where(nan, QNAN, result)


def _mul_bits(a, b):
    """Correctly rounded ``a * b`` on binary32 patterns (int64 arrays, broadcast)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    sa, ma, ea = fp32.decode_finite_array(a)
    sb, mb, eb = fp32.decode_finite_array(b)
    sign = sa ^ sb
    result = fp32.encode_rne_array(sign, ma * mb, ea + eb)
    inf = _is_inf(a) | _is_inf(b)
    result = np.where(inf, fp32.POS_INF | (sign << 31), result)
    nan = _is_nan(a) | _is_nan(b) | (_is_inf(a) & _is_zero(b)) | (_is_zero(a) & _is_inf(b))
    return np.where(nan, QNAN, result)


def _fma_scalar(a: int, b: int, c: int) -> int:
    """Correctly rounded ``a * b + c`` (one rounding) on binary32 patterns, Python ints."""
    if fp32.is_nan(a) or fp32.is_nan(b) or fp32.is_nan(c):
        return QNAN
    sp = (a ^ b) >> 31
    a_inf, b_inf, c_inf = fp32.is_inf(a), fp32.is_inf(b), fp32.is_inf(c)
    if (a_inf and (b & _ABS) == 0) or (b_inf and (a & _ABS) == 0):
        return QNAN
    if a_inf or b_inf:
        if c_inf and (c >> 31) != sp:
            return QNAN
        return fp32.POS_INF | (sp << 31)
    if c_inf:
        return c
    _, ma, ea = fp32.decode_finite(a)
    _, mb, eb = fp32.decode_finite(b)
    sc, mc, ec = fp32.decode_finite(c)
    p, ep = ma * mb, ea + eb
    e = builtins.min(ep, ec)
    total = (-1) ** sp * (p << (ep - e)) + (-1) ** sc * (mc << (ec - e))
    if total == 0:
        return _NEG_ZERO if (p == 0 and mc == 0 and sp == 1 and sc == 1) else 0
    return fp32.encode_rne(int(total < 0), abs(total), e)


def add(a, b) -> np.ndarray:
    """``a + b``, IEEE 754 binary32, correctly rounded; shapes must match."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    return _float(_add_bits(_bits(a, "a"), _bits(b, "b")))


def sub(a, b) -> np.ndarray:
    """``a - b``, IEEE 754 binary32, correctly rounded (``a + (-b)``; NaN stays NaN)."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    return _float(_add_bits(_bits(a, "a"), _bits(b, "b") ^ fp32.SIGN_BIT))


def mul(a, b) -> np.ndarray:
    """``a * b``, IEEE 754 binary32, correctly rounded; shapes must match."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    return _float(_mul_bits(_bits(a, "a"), _bits(b, "b")))


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once (IEEE 754 fusedMultiplyAdd); shapes must match."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    _same_shape(_f32(a, "a"), _f32(c, "c"), ("a", "c"))
    ab, bb, cb = _bits(a, "a"), _bits(b, "b"), _bits(c, "c")
    out = np.fromiter((_fma_scalar(int(x), int(y), int(z))
                       for x, y, z in zip(ab.ravel(), bb.ravel(), cb.ravel(), strict=True)),
                      dtype=np.int64, count=ab.size)
    return _float(out.reshape(ab.shape))


def scale(x, s) -> np.ndarray:
    """``x * s`` for a float32 scalar ``s``, correctly rounded."""
    return _float(_mul_bits(_bits(x), _scalar_bits(s, "s")))


def _max_bits(a, b):
    ka, kb = _order_key(a), _order_key(b)
    out = np.where(ka >= kb, a, b)
    return np.where(_is_nan(a) | _is_nan(b), QNAN, out)


def _min_bits(a, b):
    ka, kb = _order_key(a), _order_key(b)
    out = np.where(ka <= kb, a, b)
    return np.where(_is_nan(a) | _is_nan(b), QNAN, out)


def max(a, b) -> np.ndarray:  # noqa: A001 - the operation's name
    """Element-wise maximum: NaN if either is NaN, and ``+0 > -0`` (IEEE 754-2019 maximum)."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    return _float(_max_bits(_bits(a, "a"), _bits(b, "b")))


def min(a, b) -> np.ndarray:  # noqa: A001 - the operation's name
    """Element-wise minimum: NaN if either is NaN, and ``-0 < +0`` (IEEE 754-2019 minimum)."""
    _same_shape(_f32(a, "a"), _f32(b, "b"), ("a", "b"))
    return _float(_min_bits(_bits(a, "a"), _bits(b, "b")))


def clamp(x, lo, hi) -> np.ndarray:
    """``min(max(x, lo), hi)`` for float32 scalars ``lo <= hi`` (neither NaN); NaN stays NaN."""
    lo_bits, hi_bits = _scalar_bits(lo, "lo"), _scalar_bits(hi, "hi")
    if fp32.is_nan(lo_bits) or fp32.is_nan(hi_bits):
        raise VpuError("clamp bounds must not be NaN")
    if _order_key(np.int64(lo_bits)) > _order_key(np.int64(hi_bits)):
        raise VpuError("clamp needs lo <= hi")
    return _float(_min_bits(_max_bits(_bits(x), lo_bits), hi_bits))


# ==================================================================================================
# The three integer units behind the functions
# ==================================================================================================

def exp_core(b):
    """Exponential core: ``exp(x) ~= m * 2**(n - 32)`` for binary32 patterns with ``|x| < 128``.

    Returns ``(m, n)``, int64 arrays: ``m`` in ``[2**32, 2**33]`` (33 bits plus a possible carry) and
    ``n`` in ``[-185, 184]``. Values for ``|x| >= 128``, Inf and NaN are meaningless (callers mask).

    Steps (all truncating, see docs/vpu_numerics.md):

    1. ``T = floor(sig * LOG2E_Q33 * 2**(lsb + 7))``: ``|x| * log2(e)`` with 40 fraction bits.
    2. ``t = +-T``; ``n = floor(t)``, ``f = t - n`` in ``[0, 1)`` with 40 bits.
    3. ``f = i1/2**8 + i2/2**16 + r * 2**-34`` (8, 8 and 18 bits; the lowest 6 bits are dropped).
    4. ``ab = A + ((A * (B - 2**32)) >> 32)`` with ``A = EXP_TABLE_HI[i1]``, ``B = EXP_TABLE_LO[i2]``.
    5. ``p = (r * LN2_Q18) >> 4``: ``f_lo * ln 2`` in units of ``2**-48``.
    6. ``m = ab + (((ab >> 16) * (p >> 14)) >> 18)``: ``2**f ~= ab * (1 + p)``.
    """
    b = np.asarray(b, dtype=np.int64)
    sign, sig, lsb = fp32.decode_finite_array(b)
    shift = np.clip(-(lsb + 7), 0, 63)                     # >= 10 whenever |x| < 128
    t_mag = np.where(-(lsb + 7) >= 63, 0, (sig * LOG2E_Q33) >> shift)
    one = np.int64(1) << _T_FRAC
    n = np.where(sign == 1, -((t_mag + one - 1) >> _T_FRAC), t_mag >> _T_FRAC)
    f = np.where(sign == 1, (-t_mag) & (one - 1), t_mag & (one - 1))
    i1 = f >> 32
    i2 = (f >> 24) & 0xFF
    r = (f >> 6) & 0x3FFFF
    a = np.asarray(EXP_TABLE_HI, dtype=np.int64)[i1]
    bfrac = np.asarray(EXP_TABLE_LO, dtype=np.int64)[i2] - (np.int64(1) << 32)
    ab = a + ((a * bfrac) >> 32)
    p = (r * LN2_Q18) >> 4
    m = ab + (((ab >> 16) * (p >> 14)) >> 18)
    return m, n


def _norm(m, e, width=_DIV_BITS):
    """Normalize positive ``m * 2**e`` to a ``width``-bit significand, truncating dropped bits."""
    bl = fp32.bit_length_array(m)
    shift = width - bl
    out = np.where(shift >= 0, m << np.maximum(shift, 0), m >> np.maximum(-shift, 0))
    return out, e - shift


def divide_core(n_sig, n_exp, d_sig, d_exp, sign):
    """Correctly rounded binary32 of ``(n_sig * 2**n_exp) / (d_sig * 2**d_exp)``, signed by ``sign``.

    ``n_sig > 0`` and ``d_sig > 0`` are first normalized to 34 bits (bits beyond 34 are truncated;
    with 34 bits or fewer this is exact). The divider then produces ``Q = floor(N * 2**26 / D)``
    (27 bits) and the sticky bit ``N * 2**26 mod D != 0``, and the result is
    ``encode_rne(sign, 2*Q + sticky, n_exp' - d_exp' - 27)``: correctly rounded for the normalized
    operands (restoring division in the RTL yields the same ``Q`` and remainder).
    """
    nn, ne = _norm(np.asarray(n_sig, np.int64), np.asarray(n_exp, np.int64))
    dd, de = _norm(np.asarray(d_sig, np.int64), np.asarray(d_exp, np.int64))
    num = nn << (_QUOTIENT_BITS - 1)
    q = num // dd
    sticky = (num - q * dd != 0).astype(np.int64)
    return fp32.encode_rne_array(sign, 2 * q + sticky, ne - de - _QUOTIENT_BITS)


def isqrt_array(v):
    """Exact ``floor(sqrt(v))`` of non-negative int64 ``v < 2**62`` (float estimate, integer fix)."""
    v = np.asarray(v, dtype=np.int64)
    s = np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64)
    for _ in range(2):
        s = np.where(s * s > v, s - 1, s)
        s = np.where((s + 1) * (s + 1) <= v, s + 1, s)
    return s


def _exp_masks(b):
    """(nan, saturate_high, saturate_low) of exp's special inputs."""
    nan = _is_nan(b)
    big = ((b >> 23) & 0xFF) >= _EXP_LIMIT_BIASED            # |x| >= 128, including Inf
    return nan, big & ~nan & (b >> 31 == 0), big & ~nan & (b >> 31 == 1)


# ==================================================================================================
# Functions
# ==================================================================================================

def _exp_bits(b):
    nan, high, low = _exp_masks(b)
    m, n = exp_core(np.where(nan | high | low, 0, b))
    out = fp32.encode_rne_array(np.zeros_like(m), m, n - 32)
    out = np.where(high, fp32.POS_INF, np.where(low, 0, out))
    return np.where(nan, QNAN, out)


def exp(x) -> np.ndarray:
    """``e**x`` within 1 ulp (normal results). ``exp(+Inf) = +Inf``, ``exp(-Inf) = +0``,
    ``x >= 128`` gives +Inf and ``x <= -128`` gives +0; subnormal results are produced."""
    return _float(_exp_bits(_bits(x)))


def _reciprocal_bits(b):
    sign, sig, lsb = fp32.decode_finite_array(b)
    safe = np.where(sig == 0, 1, sig)
    out = divide_core(np.ones_like(sig), 0, safe, lsb, sign)
    out = np.where(_is_zero(b), fp32.POS_INF | (sign << 31), out)
    out = np.where(_is_inf(b), sign << 31, out)
    return np.where(_is_nan(b), QNAN, out)


def reciprocal(x) -> np.ndarray:
    """``1 / x``, correctly rounded. ``1/+-0 = +-Inf``, ``1/+-Inf = +-0``."""
    return _float(_reciprocal_bits(_bits(x)))


def _rsqrt_parts(sig, lsb):
    """``1/sqrt(sig * 2**lsb) ~= 1 / (s * 2**h)``: returns ``(s, h)`` for positive finite inputs.

    ``sig`` is normalized to 24 bits; with ``p = lsb' mod 2`` the radicand ``Y = sig' << (36 + p)``
    (at most 61 bits) has an even exponent ``lsb' - 36 - p``, and ``s = isqrt(Y)`` (30 or 31 bits).
    """
    sig, lsb = _normalize(sig, lsb)
    p = lsb & 1
    s = isqrt_array(sig << (36 + p))
    return s, (lsb - 36 - p) // 2


def _rsqrt_bits(b):
    sign, sig, lsb = fp32.decode_finite_array(b)
    safe = np.where(sig == 0, 1, sig)
    s, h = _rsqrt_parts(safe, lsb)
    out = divide_core(np.ones_like(s), 0, s, h, np.zeros_like(s))
    out = np.where(_is_zero(b), fp32.POS_INF | (sign << 31), out)
    out = np.where(b == fp32.POS_INF, 0, out)
    nan = _is_nan(b) | ((sign == 1) & ~_is_zero(b))
    return np.where(nan, QNAN, out)


def rsqrt(x) -> np.ndarray:
    """``1 / sqrt(x)`` within 1 ulp. ``rsqrt(+-0) = +-Inf``, ``rsqrt(+Inf) = +0``, negative -> NaN."""
    return _float(_rsqrt_bits(_bits(x)))


def _one_plus_exp_neg(b):
    """``1 + exp(-x)`` as ``(d_sig, d_exp)`` for ``|x| < 128`` (see docs: 40-bit fixed point below 2)."""
    m, n = exp_core(b ^ fp32.SIGN_BIT)
    # E = m * 2**(n - 32). n >= 0: add 1 in units of 2**(n - 32) (dropped once it is below them).
    # n < 0: E in units of 2**-40, truncated, plus 2**40.
    one_shift = np.clip(32 - n, 0, 63)
    big = m + np.where(n <= 32, np.int64(1) << one_shift, 0)
    e40 = np.where(n + 8 >= 0, m << np.clip(n + 8, 0, 8), m >> np.clip(-(n + 8), 0, 63))
    small = (np.int64(1) << 40) + e40
    return np.where(n >= 0, big, small), np.where(n >= 0, n - 32, -40)


def _sigmoid_bits(b):
    nan, high, low = _exp_masks(b)
    core = np.where(nan | high | low, 0, b)
    d_sig, d_exp = _one_plus_exp_neg(core)
    out = divide_core(np.ones_like(d_sig), 0, d_sig, d_exp, np.zeros_like(d_sig))
    out = np.where(high, _ONE, np.where(low, 0, out))
    return np.where(nan, QNAN, out)


def sigmoid(x) -> np.ndarray:
    """``1 / (1 + e**-x)`` within 2 ulp; ``x >= 128`` (and +Inf) gives 1, ``x <= -128`` gives +0."""
    return _float(_sigmoid_bits(_bits(x)))


def _silu_bits(b):
    nan, high, low = _exp_masks(b)
    core = np.where(nan | high | low, 0, b)
    sign, sig, lsb = fp32.decode_finite_array(core)
    d_sig, d_exp = _one_plus_exp_neg(core)
    out = divide_core(np.where(sig == 0, 1, sig), lsb, d_sig, d_exp, sign)
    out = np.where(_is_zero(b), b, out)
    out = np.where(high, b, np.where(low, _NEG_ZERO, out))
    return np.where(nan, QNAN, out)


def silu(x) -> np.ndarray:
    """``x / (1 + e**-x)`` within 2 ulp; ``x >= 128`` gives ``x``, ``x <= -128`` gives -0."""
    return _float(_silu_bits(_bits(x)))


# ==================================================================================================
# Reductions
# ==================================================================================================

def _acc_round(sign, mag, exp):
    """Round ``(-1)**sign * mag * 2**exp`` (``mag < 2**62``) to a 48-bit significand, RNE.

    Returns a normalized accumulator ``(sign, mag, exp)``: ``mag == 0`` (with sign 0 and exp 0) or
    ``2**47 <= mag < 2**48``.
    """
    bl = fp32.bit_length_array(mag)
    drop = np.maximum(bl - _ACC_BITS, 0)
    kept = mag >> drop
    rem = mag & ((np.int64(1) << drop) - 1)
    half = np.where(drop > 0, np.int64(1) << np.maximum(drop - 1, 0), 0)
    up = (drop > 0) & ((rem > half) | ((rem == half) & ((kept & 1) == 1)))
    kept = kept + up
    carry = kept >> _ACC_BITS
    kept = kept >> carry
    exp = exp + drop + carry
    grow = np.where(kept == 0, 0, _ACC_BITS - fp32.bit_length_array(kept))
    kept = kept << grow
    exp = exp - grow
    zero = kept == 0
    return np.where(zero, 0, sign), kept, np.where(zero, 0, exp)


def _acc_add(a, b):
    """Sum of two normalized accumulators, rounded once to 48 bits (RNE); exact zero is +0."""
    sa, ma, ea = a
    sb, mb, eb = b
    a_zero, b_zero = ma == 0, mb == 0
    swap = ~b_zero & ((eb > ea) | a_zero)
    s1, m1, e1 = np.where(swap, sb, sa), np.where(swap, mb, ma), np.where(swap, eb, ea)
    s2, m2, e2 = np.where(swap, sa, sb), np.where(swap, ma, mb), np.where(swap, ea, eb)
    d = np.where(m2 == 0, 0, e1 - e2)
    # d <= 3: exact. d > 3: operand 2 shifted to 3 bits below operand 1's lsb, sticky ORed in.
    near = d <= 3
    sh = np.clip(d - 3, 0, 62)
    far_small = np.where(d - 3 > 62, (m2 != 0).astype(np.int64),
                         (m2 >> sh) | ((m2 & ((np.int64(1) << sh) - 1)) != 0))
    big = np.where(near, m1 << d, m1 << 3)
    small = np.where(near, m2, far_small)
    exp = np.where(near, e2, e1 - 3)
    exp = np.where(m2 == 0, e1, exp)
    big = np.where(m2 == 0, m1, big)
    small = np.where(m2 == 0, 0, small)
    total = np.where(s1 == 1, -big, big) + np.where(s2 == 1, -small, small)
    both_zero = a_zero & b_zero
    out = _acc_round((total < 0).astype(np.int64), np.abs(total), exp)
    return tuple(np.where(both_zero, 0, v) for v in out)


def accumulate48(sign, mag, exp, lanes=DEFAULT_LANES, slots=DEFAULT_SLOTS):
    """Sum exact terms ``(-1)**sign * mag * 2**exp`` (``mag < 2**48``) along the last axis.

    The documented order: term ``i`` goes to accumulator ``i % (lanes * slots)``; every accumulator
    starts at +0 and adds its terms in increasing ``i``, rounding to 48 bits (RNE) after every
    addition; the ``lanes * slots`` accumulators are then combined pairwise (``0+1, 2+3, ...``, level
    by level; an odd one out passes up unchanged). Returns the accumulator ``(sign, mag, exp)``.
    """
    _check_lanes(lanes, slots)
    width = lanes * slots
    n = mag.shape[-1]
    pad = (-n) % width
    if pad:
        padding = [(0, 0)] * (mag.ndim - 1) + [(0, pad)]
        sign, mag, exp = (np.pad(v, padding) for v in (sign, mag, exp))
    terms = _acc_round(sign, mag, exp)
    shape = mag.shape[:-1] + (width,)
    acc = (np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64))
    for start in range(0, mag.shape[-1], width):
        acc = _acc_add(acc, tuple(v[..., start:start + width] for v in terms))
    while acc[1].shape[-1] > 1:
        count = acc[1].shape[-1]
        pairs = count // 2
        left = tuple(v[..., 0:2 * pairs:2] for v in acc)
        right = tuple(v[..., 1:2 * pairs:2] for v in acc)
        summed = _acc_add(left, right)
        if count % 2:
            summed = tuple(np.concatenate([s, v[..., -1:]], axis=-1)
                           for s, v in zip(summed, acc, strict=True))
        acc = summed
    return tuple(v[..., 0] for v in acc)


def _check_lanes(lanes, slots):
    for name, value in (("lanes", lanes), ("slots", slots)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise VpuError(f"{name} must be a positive integer, got {value!r}")


def _row_specials(b, squares):
    """(nan, inf) masks of a reduction's rows from their special elements."""
    nan = _is_nan(b).any(axis=-1)
    pos_inf = (b == fp32.POS_INF).any(axis=-1)
    neg_inf = (b == fp32.NEG_INF).any(axis=-1)
    if squares:
        return nan, pos_inf | neg_inf
    return nan | (pos_inf & neg_inf), pos_inf | neg_inf


def _reduce_sum(x, squares, lanes, slots):
    b = _bits(x)
    if b.ndim == 0 or b.shape[-1] == 0:
        raise VpuError("reductions need at least one element along the last axis")
    finite = np.where(_is_nan(b) | _is_inf(b), 0, b)
    sign, sig, lsb = fp32.decode_finite_array(finite)
    if squares:
        sign, sig, lsb = np.zeros_like(sign), sig * sig, 2 * lsb
    s, m, e = accumulate48(sign, sig, lsb, lanes, slots)
    out = fp32.encode_rne_array(s, m, e)
    nan, inf = _row_specials(b, squares)
    if squares:
        inf_value = np.full(out.shape, fp32.POS_INF)
    else:
        inf_value = np.where((b == fp32.POS_INF).any(axis=-1), fp32.POS_INF, fp32.NEG_INF)
    out = np.where(inf, inf_value, out)
    return _float(np.where(nan, QNAN, out))


def sum(x, lanes=DEFAULT_LANES, slots=DEFAULT_SLOTS) -> np.ndarray:  # noqa: A001
    """Sum along the last axis in the documented accumulator order, rounded once at the end.

    NaN, or both infinities, in a row give NaN; one kind of infinity gives that infinity; an
    all-zero row gives +0.
    """
    return _reduce_sum(x, False, lanes, slots)


def sum_squares(x, lanes=DEFAULT_LANES, slots=DEFAULT_SLOTS) -> np.ndarray:
    """Sum of squares along the last axis (squares exact), same order and rounding as :func:`sum`."""
    return _reduce_sum(x, True, lanes, slots)


def max_reduce(x) -> np.ndarray:
    """Maximum along the last axis: NaN if any element is NaN; ``+0 > -0``. Exact."""
    b = _bits(x)
    if b.ndim == 0 or b.shape[-1] == 0:
        raise VpuError("reductions need at least one element along the last axis")
    key = _order_key(b)
    idx = np.argmax(key, axis=-1)
    out = np.take_along_axis(b, idx[..., None], axis=-1)[..., 0]
    return _float(np.where(_is_nan(b).any(axis=-1), QNAN, out))


# ==================================================================================================
# Composite operations
# ==================================================================================================

def _check_rows(x, name="x"):
    b = _bits(x, name)
    if b.ndim == 0 or b.shape[-1] == 0:
        raise VpuError(f"{name} needs at least one element along the last axis")
    return b


def _round24x(sign: int, num: int, den: int, exp: int) -> tuple[int, int]:
    """``num / den * 2**exp`` (positive) rounded to a 24-bit significand, RNE, unbounded exponent.

    Returns ``(sig, lsb)`` with ``2**23 <= sig < 2**24`` (sign handled by the caller).
    """
    del sign
    # Scale so the integer quotient has at least 26 bits, then round with the remainder as sticky.
    shift = 26 - (num.bit_length() - den.bit_length())
    q, r = divmod(num << shift if shift >= 0 else num, den if shift >= 0 else den << -shift)
    lsb = exp - shift
    drop = q.bit_length() - 24
    kept, rem = q >> drop, q & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    if rem > half or (rem == half and (r != 0 or kept & 1)):
        kept += 1
    lsb += drop
    if kept >> 24:
        kept >>= 1
        lsb += 1
    return kept, lsb


def _rms_inverse(ss_sign_mag_exp, n: int, eps_bits: int) -> tuple[int, int] | None:
    """``r = 1/sqrt(V)`` with ``V = round24x(S/n + eps)``; returns ``(r_sig, r_lsb)`` or None if V = 0."""
    _, s_mag, s_exp = (int(v) for v in ss_sign_mag_exp)
    _, e_sig, e_lsb = fp32.decode_finite(eps_bits)
    # S/n + eps as one fraction: (s_mag * 2**s_exp) / n + e_sig * 2**e_lsb.
    base = builtins.min(s_exp, e_lsb)
    num = (s_mag << (s_exp - base)) + ((e_sig * n) << (e_lsb - base))
    if num == 0:
        return None
    v_sig, v_lsb = _round24x(0, num, n, base)
    s, h = _rsqrt_parts(np.int64(v_sig), np.int64(v_lsb))
    s, h = int(s), int(h)
    # 1 / (s * 2**h), to 24 bits with the divider's contract: Q from a 34-bit normalized divisor.
    d, de = int(_norm(np.int64(s), np.int64(h))[0]), int(_norm(np.int64(s), np.int64(h))[1])
    n34 = 1 << (_DIV_BITS - 1)
    ne = -(_DIV_BITS - 1)
    q, rem = divmod(n34 << (_QUOTIENT_BITS - 1), d)
    return _round24x(0, 2 * q + (rem != 0), 1, ne - de - _QUOTIENT_BITS)


def rmsnorm(x, gain, eps=1e-6, lanes=DEFAULT_LANES, slots=DEFAULT_SLOTS) -> np.ndarray:
    """RMSNorm along the last axis: ``x / sqrt(mean(x**2) + eps) * gain``.

    Steps (docs/vpu_numerics.md): ``S = sum_squares`` in accumulator form (48 bits, not rounded to
    float32, so no overflow); ``V = S/n + eps`` rounded to 24 bits with unbounded exponent;
    ``r = 1/sqrt(V)`` by the rsqrt units, 24 bits, unbounded exponent; ``h = x * r`` rounded to 24 bits,
    unbounded exponent; ``out = h * gain`` rounded once to binary32. A row holding NaN or Inf gives
    NaN everywhere, as does an all-zero row with ``eps = 0``; a NaN or Inf gain propagates by IEEE
    rules (``0 * Inf`` is NaN). ``gain`` has shape ``(n,)`` or the shape of ``x``; ``eps`` is a finite,
    non-negative scalar.
    """
    b = _check_rows(x)
    g = _bits(gain, "gain")
    n = b.shape[-1]
    if g.shape != (n,) and g.shape != b.shape:
        raise VpuError(f"gain must have shape ({n},) or {b.shape}, got {g.shape}")
    g = np.broadcast_to(g, b.shape)
    eps_bits = _scalar_bits(np.float32(eps) if isinstance(eps, float | int) else eps, "eps")
    if fp32.is_nan(eps_bits) or fp32.is_inf(eps_bits) or (eps_bits >> 31 and eps_bits & _ABS):
        raise VpuError("eps must be finite and non-negative")
    eps_bits &= _ABS
    rows_b = b.reshape(-1, n)
    rows_g = g.reshape(-1, n)
    out = np.empty_like(rows_b)
    finite = np.where(_is_nan(rows_b) | _is_inf(rows_b), 0, rows_b)
    _, sig, lsb = fp32.decode_finite_array(finite)
    ss = accumulate48(np.zeros_like(sig), sig * sig, 2 * lsb, lanes, slots)
    bad = (_is_nan(rows_b) | _is_inf(rows_b)).any(axis=-1)
    for row in range(rows_b.shape[0]):
        inv = None if bad[row] else _rms_inverse(tuple(v[row] for v in ss), n, eps_bits)
        if inv is None:
            out[row] = QNAN
            continue
        r_sig, r_lsb = inv
        sx, mx_, ex = fp32.decode_finite_array(finite[row])
        sg, mg, eg = fp32.decode_finite_array(rows_g[row])
        vals = []
        for i in range(n):
            vals.append(_rms_output(int(sx[i]), int(mx_[i]), int(ex[i]), r_sig, r_lsb,
                                    int(rows_g[row, i]), int(sg[i]), int(mg[i]), int(eg[i])))
        out[row] = vals
    return _float(out.reshape(b.shape))


def _rms_output(sx, mx_, ex, r_sig, r_lsb, g_bits, sg, mg, eg) -> int:
    """``round_fp32(round24x(x * r) * g)`` with IEEE special rules for ``g``."""
    if fp32.is_nan(g_bits):
        return QNAN
    sign = sx ^ sg
    if mx_ == 0:
        return QNAN if fp32.is_inf(g_bits) else (sign << 31)
    h_sig, h_lsb = _round24x(0, mx_ * r_sig, 1, ex + r_lsb)
    if fp32.is_inf(g_bits):
        return fp32.POS_INF | (sign << 31)
    return fp32.encode_rne(sign, h_sig * mg, h_lsb + eg)


def _softmax_terms(b):
    """Per row: (bad rows, exp terms (m, n) of ``fl(x - max)``, zero-term mask)."""
    bad = (_is_nan(b) | (b == fp32.POS_INF)).any(axis=-1) | (b == fp32.NEG_INF).all(axis=-1)
    safe = np.where(bad[..., None], 0, b)
    m = _bits(_float(safe).max(axis=-1))                 # non-NaN rows: ordering only, no rounding
    d = _add_bits(safe, m[..., None] ^ fp32.SIGN_BIT)    # fl(x - max) <= 0
    nan, high, low = _exp_masks(d)
    zero = low | (d == fp32.NEG_INF)
    em, en = exp_core(np.where(zero | nan | high, 0, d))
    return bad, em, en, zero


def softmax(x) -> np.ndarray:
    """Softmax along the last axis, max-subtracted.

    ``d_i = fl(x_i - max(x))``; ``E_i = exp_core(d_i)`` (0 for ``d_i <= -128``); the denominator
    ``S = sum(floor(E_i * 2**60))`` is an exact integer sum (any order gives the same ``S``); each
    output is ``divide_core(E_i, S * 2**-60)``, rounded once. A row holding NaN or +Inf, or only
    -Inf, gives NaN everywhere; -Inf elements give +0.
    """
    b = _check_rows(x)
    bad, em, en, zero = _softmax_terms(b)
    shift = en + (_SOFTMAX_GRID - 32)                    # E * 2**60 = m * 2**(n + 28)
    grid = np.where(shift >= 0, em << np.clip(shift, 0, 28), em >> np.clip(-shift, 0, 63))
    grid = np.where(zero, 0, grid)
    total = [int(v) for v in np.sum(grid.astype(object), axis=-1, keepdims=True).ravel()]
    s_sig = np.empty(len(total), dtype=np.int64)
    s_exp = np.empty(len(total), dtype=np.int64)
    for i, value in enumerate(total):
        drop = builtins.max(value.bit_length() - _DIV_BITS, 0)
        s_sig[i], s_exp[i] = value >> drop, drop - _SOFTMAX_GRID
    s_sig = s_sig.reshape(b.shape[:-1])[..., None]
    s_exp = s_exp.reshape(b.shape[:-1])[..., None]
    out = divide_core(np.where(zero, 1, em), en - 32, s_sig, s_exp, np.zeros_like(em))
    out = np.where(zero, 0, out)
    return _float(np.where(bad[..., None], QNAN, out))


def softmax_update(m, s, acc, x):
    """One step of online (flash-decoding) softmax over a new chunk of scores ``x``.

    State: running max ``m`` and running sum ``s`` (float32 scalars; start at ``-Inf`` and ``+0``)
    and an accumulator vector ``acc`` (the running ``P @ V`` row). Returns ``(m', s', acc', p)``:

    * ``m' = max(m, max_reduce(x))``;
    * ``alpha = exp(fl(m - m'))`` (``0`` when ``m`` is ``-Inf``);
    * ``p_i = exp(fl(x_i - m'))``, float32 (what the ``P @ V`` GEMM consumes);
    * ``s' = round_fp32(s * alpha + sum(floor(p_i * 2**60)) * 2**-60)``: the product exact, the sum
      exact on the 2**-60 grid, one rounding;
    * ``acc'_j = fl(acc_j * alpha)``.

    If ``m'`` is ``-Inf`` (nothing seen yet) the state is returned unchanged and ``p`` is +0. A NaN
    or +Inf in ``x`` or ``m`` makes everything NaN.
    """
    mb, sb = _scalar_bits(m, "m"), _scalar_bits(s, "s")
    ab = _bits(acc, "acc")
    xb = _check_rows(x)
    if xb.ndim != 1 or ab.ndim != 1:
        raise VpuError("softmax_update takes 1-D acc and x")
    if fp32.is_nan(mb) or mb == fp32.POS_INF or _is_nan(xb).any() or (xb == fp32.POS_INF).any() \
            or fp32.is_nan(sb):
        nan = np.float32(np.uint32(QNAN).view(np.float32))
        return nan, nan, _float(np.full(ab.shape, QNAN)), _float(np.full(xb.shape, QNAN))
    m_new = int(_max_bits(np.int64(mb), _bits(max_reduce(x)).reshape(())))
    if m_new == fp32.NEG_INF:
        return (_float(np.int64(mb))[()], _float(np.int64(sb))[()], _float(ab.copy()),
                _float(np.zeros(xb.shape, np.int64)))
    minus_m_new = np.int64(m_new ^ fp32.SIGN_BIT)
    alpha = 0 if mb == fp32.NEG_INF else int(_exp_bits(_add_bits(np.int64(mb), minus_m_new)))
    p = _exp_bits(_add_bits(xb, minus_m_new))
    _, p_sig, p_lsb = fp32.decode_finite_array(p)
    shift = p_lsb + _SOFTMAX_GRID
    grid = np.where(shift >= 0, p_sig << np.clip(shift, 0, 40), p_sig >> np.clip(-shift, 0, 63))
    p_sum = int(np.sum(grid.astype(object)))
    ss, sm, se = fp32.decode_finite(sb) if not fp32.is_inf(sb) else (sb >> 31, 0, 0)
    if fp32.is_inf(sb):
        s_new = sb if alpha != 0 else QNAN
    else:
        _, am, ae = fp32.decode_finite(alpha)
        prod, pe = sm * am, se + ae
        base = builtins.min(pe, -_SOFTMAX_GRID)
        total = (-1) ** ss * (prod << (pe - base)) + (p_sum << (-_SOFTMAX_GRID - base))
        s_new = fp32.encode_rne(int(total < 0), abs(total), base) if total else 0
    acc_new = _mul_bits(ab, np.int64(alpha))
    return (_float(np.int64(m_new))[()], _float(np.int64(s_new))[()], _float(acc_new), _float(p))


def swiglu(gate, up) -> np.ndarray:
    """``fl(silu(gate) * up)``: the SwiGLU gate of LLaMA/Mixtral MLPs (two roundings, like float32 HF)."""
    _same_shape(_f32(gate, "gate"), _f32(up, "up"), ("gate", "up"))
    return _float(_mul_bits(_silu_bits(_bits(gate, "gate")), _bits(up, "up")))


def rope(x, cos, sin) -> np.ndarray:
    """Rotary position embedding, LLaMA/NeoX rotate-half convention, along the last axis (head dim).

    ``out = fl(fl(x * cos) + fl(rotate_half(x) * sin))`` with ``rotate_half([x1, x2]) = [-x2, x1]``:
    exactly the float32 arithmetic of Hugging Face's ``apply_rotary_pos_emb``. ``cos`` and ``sin``
    have the shape of ``x`` (or broadcast to it) and come from :func:`rope_tables`.
    """
    xb = _bits(x)
    if xb.ndim == 0 or xb.shape[-1] % 2:
        raise VpuError("rope needs an even head dimension along the last axis")
    cb, sb = _bits(cos, "cos"), _bits(sin, "sin")
    try:
        cb, sb = np.broadcast_to(cb, xb.shape), np.broadcast_to(sb, xb.shape)
    except ValueError:
        raise VpuError(f"cos and sin must broadcast to x's shape {xb.shape}, got {cb.shape} and "
                       f"{sb.shape}") from None
    half = xb.shape[-1] // 2
    rot = np.concatenate([xb[..., half:] ^ fp32.SIGN_BIT, xb[..., :half]], axis=-1)
    rot = np.where(_is_nan(rot), QNAN, rot)
    return _float(_add_bits(_mul_bits(xb, cb), _mul_bits(rot, sb)))


def rope_tables(positions, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` tables of shape ``(len(positions), head_dim)``, each rounded once.

    Recipe (float64, then one round to float32): ``inv_freq_j = 1 / theta**(2j / head_dim)`` for
    ``j < head_dim/2``; ``angle = position * inv_freq_j``; the table holds ``cos(angle)`` and
    ``sin(angle)`` for both halves (``emb = cat(freqs, freqs)``, as Hugging Face builds it).
    """
    if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise VpuError(f"head_dim must be a positive even integer, got {head_dim!r}")
    pos = np.asarray(positions, dtype=np.float64).reshape(-1)
    inv_freq = 1.0 / (float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(pos, inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def topk(x, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest elements along the last axis, in decreasing order, with their indices.

    Order: NaN above +Inf, then the binary32 total order with ``+0 > -0``; ties go to the lower
    index. Returns ``(values, indices)``: float32 (NaN canonical) and int32, shape ``(..., k)``.
    """
    b = _check_rows(x)
    n = b.shape[-1]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n:
        raise VpuError(f"k must be an integer in [1, {n}], got {k!r}")
    key = np.where(_is_nan(b), np.int64(1) << 40, _order_key(b))
    idx = np.argsort(-key, axis=-1, kind="stable")[..., :k]
    vals = np.take_along_axis(b, idx, axis=-1)
    return _float(np.where(_is_nan(vals), QNAN, vals)), idx.astype(np.int32)


# ==================================================================================================
# Conversions
# ==================================================================================================

def to_bfloat16(x) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (``uint16``), nearest-even, overflow to Inf, NaN -> 0x7FC0."""
    b = _bits(x)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return np.where(_is_nan(b), 0x7FC0, rounded).astype(np.uint16)


def from_bfloat16(bits) -> np.ndarray:
    """bfloat16 bit patterns (``uint16``) -> float32, exact; NaN -> the canonical NaN."""
    arr = np.asarray(bits)
    if arr.dtype != np.uint16:
        raise VpuError(f"bfloat16 data must be uint16 bit patterns, got dtype {arr.dtype}")
    wide = arr.astype(np.int64) << 16
    return _float(np.where(_is_nan(wide), QNAN, wide))


def to_mx(x, mode: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """float32 -> MXFP4 codes and scales through the hardware quantizer's contract
    (:func:`sim_models.mx.quantize`)."""
    _f32(x)
    try:
        return mx.quantize(x, mode)
    except mx.MXFormatError as exc:
        raise VpuError(str(exc)) from None


# ==================================================================================================
# Operation tables for the command line and the testbenches
# ==================================================================================================

UNARY = {"exp": exp, "reciprocal": reciprocal, "rsqrt": rsqrt, "sigmoid": sigmoid, "silu": silu}
"""Element-wise functions of one operand."""
BINARY = {"add": add, "sub": sub, "mul": mul, "max": max, "min": min}
"""Element-wise operations of two operands of the same shape."""
