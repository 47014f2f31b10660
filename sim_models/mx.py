"""Bit-exact golden model of Poblano's MX numerics (OCP MX v1.0): quantize, dequantize, block-scaled GEMM.

Every RTL block that touches MX data (hardware quantizer, MAC array, block-dot unit, binary32
accumulate adder) must reproduce this model bit for bit. The contract is written out in prose and
tables in ``docs/mx_numerics.md``; this docstring is the short version.

Formats
-------
* **Element formats** (:data:`FORMATS`), named by these strings everywhere (API, ``.npz`` files,
  command line): ``"e2m1"`` (FP4), ``"e2m3"`` and ``"e3m2"`` (FP6), ``"e4m3"`` and ``"e5m2"`` (FP8).
  Codes are held one per ``uint8``; :data:`ELEMENT_FORMATS` gives each format's bias, exponent range,
  largest normal and the exact value of every code. FP4 and FP6 have no special codes; in E4M3
  ``S.1111.111`` is NaN (no infinities); in E5M2 exponent ``11111`` is ±Inf (mantissa 0) or NaN.
  The default everywhere is ``"e2m1"``, with the tables :data:`E2M1_VALUES` and :data:`E2M1_HALVES`.
* **E8M0 block scale** (``uint8``): code ``c`` means ``2**(c - 127)``; ``0xFF`` is NaN.
* **Block**: 32 consecutive elements along the reduction (last) axis share one scale.

Quantize (:func:`quantize`)
---------------------------
Per block, from the float32 bit patterns and in integers only: ``amax`` is the largest magnitude;
the shared exponent is ``floor(log2(amax)) - emax`` (``"floor"``, OCP MX v1.0 section 6.3, the
default; ``emax`` is the exponent of the format's largest normal, 2 for E2M1) or the smallest ``s``
with ``amax / 2**s <= max_normal`` (``"rceil"``), clamped to ``[-127, 127]``; each element
``x / 2**shared`` is rounded to the nearest value of the format, ties to even, saturating at the
largest normal (never to Inf or NaN), keeping the sign. Blocks holding a NaN or an infinity get scale
``0xFF`` and codes 0; all-zero blocks get scale ``0x00``. The scalar building blocks are
:func:`scale_code` and :func:`encode_element`.

GEMM (:func:`matmul`)
---------------------
For each output, blocks are visited in increasing ``k``. A block contributes the exact integer dot
product of its element values, counted in the pair's unit ``2**dot_unit_exponent(a_format, b_format)``
(quarters for E2M1 x E2M1, :func:`block_dot_quarters`), times the exact power of two
``2**(sa - 127) * 2**(sb - 127)``, added to a binary32 accumulator (initial value ``c``, default +0)
with exactly one round-to-nearest-even (:func:`fp32_add_scaled`). There is no flush to zero. A
``0xFF`` scale, or an element code that is NaN or Inf in its format, on either side of any block makes
that output the canonical NaN ``0x7FC00000``.

All binary32 rounding is done on integers by :mod:`sim_models.fp32`, never with host floating point.
Scalar functions on Python ``int`` state the contract readably; :func:`quantize`, :func:`dequantize`
and :func:`matmul` are the vectorized NumPy forms that users call, and the tests check the two against
each other and against an independent exact-rational reference.
"""

import math
import operator
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from sim_models import fp32

__all__ = [
    "BLOCK_SIZE", "E2M1_VALUES", "E2M1_HALVES", "E8M0_BIAS", "E8M0_NAN", "FP32_QNAN", "MODES",
    "FORMATS", "ELEMENT_FORMATS", "ElementFormat",
    "MAX_DOT_QUARTERS", "MIN_BLOCK_EXP", "MAX_BLOCK_EXP",
    "MXFormatError", "MXTypeError",
    "quantize", "dequantize", "matmul", "matmul_scalar",
    "element_format", "dot_unit_exponent", "max_block_dot", "block_dot_bits",
    "scale_code", "encode_element", "block_dot_quarters", "fp32_add_scaled", "fp32_add_scaled_array",
]

BLOCK_SIZE = 32
"""Elements per block (one E8M0 scale each), along the last axis of quantized data."""

E8M0_BIAS = 127
"""E8M0 code ``c`` (other than 0xFF) encodes ``2**(c - E8M0_BIAS)``."""
E8M0_NAN = 0xFF
"""The E8M0 NaN code."""
FP32_QNAN = fp32.QNAN
"""Bit pattern of every NaN the model outputs (0x7FC00000)."""

MODES = ("floor", "rceil")
"""Shared-exponent rules accepted by :func:`quantize` and :func:`scale_code`."""

FORMATS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2")
"""Element format names, as accepted by every function that takes a ``format`` argument."""


class MXFormatError(ValueError):
    """Malformed input to the MX model (shape, block size, code range, dtype, mode or format).

    The message is one line and names the offending argument, so command-line tools can print it.
    """


class MXTypeError(MXFormatError, TypeError):
    """An argument has the wrong dtype or type; also a :class:`TypeError`."""


# ==================================================================================================
# Element formats
# ==================================================================================================

@dataclass(frozen=True)
class ElementFormat:
    """One OCP MX v1.0 element format: its bit fields and, derived from them, every code's value.

    A code has the fields ``S E...E M...M`` (sign, ``exponent_bits``, ``mantissa_bits``). Exponent
    field 0 is subnormal, ``value = M * 2**lsb_exponent``; a normal field ``E`` gives
    ``(2**mantissa_bits + M) * 2**(E - 1 + lsb_exponent)``. ``specials`` says which codes are not
    numbers: ``"none"`` (FP4, FP6), ``"nan"`` (E4M3: exponent and mantissa all ones is NaN, there is no
    infinity) or ``"ieee"`` (E5M2: exponent all ones is ±Inf with mantissa 0, NaN otherwise).

    Derived attributes (all exact): ``bits``; ``code_count`` (``2**bits``; codes above it are
    malformed); ``emin = 1 - bias``; ``emax``, the exponent of the largest normal; ``lsb_exponent =
    emin - mantissa_bits``, so the smallest subnormal is ``2**lsb_exponent``; ``units``, an ``int64``
    table of every code's signed value in units of that smallest subnormal (0 for special codes);
    ``max_units``, the largest normal in those units; ``nan`` and ``inf``, boolean tables of the
    special codes, and ``special = nan | inf``; ``values``, a float32 table (special codes give NaN
    or ±Inf; code ``sign_bit`` is -0.0). Tables are read-only.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str
    bits: int = field(init=False, repr=False)
    code_count: int = field(init=False, repr=False)
    sign_bit: int = field(init=False, repr=False)
    emin: int = field(init=False, repr=False)
    emax: int = field(init=False, repr=False)
    lsb_exponent: int = field(init=False, repr=False)
    max_units: int = field(init=False, repr=False)
    units: np.ndarray = field(init=False, repr=False, compare=False)
    nan: np.ndarray = field(init=False, repr=False, compare=False)
    inf: np.ndarray = field(init=False, repr=False, compare=False)
    special: np.ndarray = field(init=False, repr=False, compare=False)
    values: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        e, m = self.exponent_bits, self.mantissa_bits
        top = (1 << e) - 1
        codes = np.arange(1 << (1 + e + m), dtype=np.int64)
        sign = codes >> (e + m)
        exponent = (codes >> m) & top
        mantissa = codes & ((1 << m) - 1)
        if self.specials == "none":
            nan = inf = np.zeros(codes.shape, dtype=bool)
            emax_field = top
        elif self.specials == "nan":
            nan = (exponent == top) & (mantissa == (1 << m) - 1)
            inf = np.zeros(codes.shape, dtype=bool)
            emax_field = top
        elif self.specials == "ieee":
            nan = (exponent == top) & (mantissa != 0)
            inf = (exponent == top) & (mantissa == 0)
            emax_field = top - 1
        else:
            raise ValueError(f"specials must be 'none', 'nan' or 'ieee', got {self.specials!r}")
        special = nan | inf
        magnitude = np.where(exponent == 0, mantissa,
                             ((1 << m) + mantissa) << np.maximum(exponent - 1, 0))
        units = np.where(special, 0, np.where(sign == 1, -magnitude, magnitude))
        lsb = 1 - self.bias - m
        value_bits = np.array([fp32.QNAN if n else (fp32.POS_INF | (int(s) << 31)) if i
                               else fp32.encode_rne(int(s), abs(int(u)), lsb)
                               for s, u, n, i in zip(sign, units, nan, inf, strict=True)], dtype=np.uint32)
        derived = {
            "bits": 1 + e + m, "code_count": 1 << (1 + e + m), "sign_bit": 1 << (e + m),
            "emin": 1 - self.bias, "emax": emax_field - self.bias, "lsb_exponent": lsb,
            "max_units": int(units.max()), "units": units, "nan": nan, "inf": inf, "special": special,
            "values": value_bits.view(np.float32),
        }
        for name, value in derived.items():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            object.__setattr__(self, name, value)

    @property
    def max_normal(self) -> float:
        """The largest finite magnitude (6, 7.5, 28, 448 or 57344; exact as a float)."""
        return math.ldexp(self.max_units, self.lsb_exponent)


ELEMENT_FORMATS = {
    "e2m1": ElementFormat("e2m1", 2, 1, 1, "none"),
    "e2m3": ElementFormat("e2m3", 2, 3, 1, "none"),
    "e3m2": ElementFormat("e3m2", 3, 2, 3, "none"),
    "e4m3": ElementFormat("e4m3", 4, 3, 7, "nan"),
    "e5m2": ElementFormat("e5m2", 5, 2, 15, "ieee"),
}
"""Every element format by name (the keys are :data:`FORMATS`)."""

E2M1_VALUES = ELEMENT_FORMATS["e2m1"].values
"""Value of each E2M1 code 0..15, as float32 (code 8 is -0.0)."""

E2M1_HALVES = ELEMENT_FORMATS["e2m1"].units
"""Value of each E2M1 code 0..15 times two, as a signed integer (codes 0 and 8 are both 0)."""

MAX_DOT_QUARTERS = BLOCK_SIZE * 12 * 12
"""Largest magnitude of an E2M1 x E2M1 block dot product in quarters: 32 * 6 * 6 * 4 = 4608.
:func:`max_block_dot` gives the bound for any format pair."""
MIN_BLOCK_EXP = -2 * E8M0_BIAS
"""Smallest block exponent ``(sa - 127) + (sb - 127)`` for non-NaN scales (-254)."""
MAX_BLOCK_EXP = 2 * (0xFE - E8M0_BIAS)
"""Largest block exponent for non-NaN scales (254)."""

_MIN_SHARED, _MAX_SHARED = -127, 127
_ABS_MASK = 0x7FFF_FFFF
_WINDOW_BITS = 60          # accumulate-adder alignment window, see _add_scaled_unchecked
_FAST_DOT_BITS = _WINDOW_BITS - 1    # widest dot product (significant bits) the window adds exactly
_NO_BITS_TOP = -10_000     # "top bit position" of a zero operand: below anything real
_LIMB = 32                 # wide dot products are held as hi * 2**32 + lo, see _wide_block_dot


def element_format(format: str) -> ElementFormat:
    """The :class:`ElementFormat` named ``format`` (one of :data:`FORMATS`); else :class:`MXFormatError`."""
    if isinstance(format, str) and format in ELEMENT_FORMATS:
        return ELEMENT_FORMATS[format]
    raise MXFormatError(f"unknown element format {format!r}; expected one of {', '.join(FORMATS)}")


def dot_unit_exponent(a_format: str = "e2m1", b_format: str = "e2m1") -> int:
    """Exponent of the unit in which block dot products of the pair are integers.

    It is the product of the two smallest subnormals, ``2**(lsb_a + lsb_b)``: -2 (quarters) for
    E2M1 x E2M1, -32 for E5M2 x E5M2.
    """
    return element_format(a_format).lsb_exponent + element_format(b_format).lsb_exponent


def max_block_dot(a_format: str = "e2m1", b_format: str = "e2m1") -> int:
    """Largest magnitude of a 32-element block dot product of the pair, in the pair's unit.

    ``32 * max_units(a) * max_units(b)``: 4608 for E2M1 x E2M1 (:data:`MAX_DOT_QUARTERS`), about
    ``2**68.6`` for E5M2 x E5M2.
    """
    return BLOCK_SIZE * element_format(a_format).max_units * element_format(b_format).max_units


def block_dot_bits(a_format: str = "e2m1", b_format: str = "e2m1") -> int:
    """Width in bits of a two's-complement integer that holds every exact block dot product of the pair.

    ``max_block_dot(...).bit_length() + 1``: 14 for E2M1 x E2M1, 70 for E5M2 x E5M2. This is the
    width of the hardware's exact block dot product (an adder tree without any rounding), in the
    pair's unit ``2**dot_unit_exponent(a_format, b_format)``.
    """
    return max_block_dot(a_format, b_format).bit_length() + 1


# ==================================================================================================
# Scalar contract (Python int); these are what RTL unit tests compare against
# ==================================================================================================

def scale_code(amax_bits: int, mode: str = "floor", format: str = "e2m1") -> int:
    """E8M0 scale code of a block whose largest element magnitude has float32 pattern ``amax_bits``.

    Parameters
    ----------
    amax_bits : int
        Binary32 pattern ``0 <= amax_bits < 2**32`` of the block's largest magnitude; the sign bit
        is ignored. For a hardware quantizer this is ``max(x_bits & 0x7FFFFFFF)`` over the block:
        the magnitudes of binary32 patterns order like their integers, NaNs above infinity.
    mode : {"floor", "rceil"}
        ``"floor"``: ``shared = floor(log2(amax)) - emax``. ``"rceil"``: the smallest ``shared`` with
        ``amax / 2**shared <= max_normal``, which is ``floor(log2(amax)) - emax`` plus one when the
        significand of ``amax`` (in ``[1, 2)``) exceeds that of the largest normal (1.5 for E2M1,
        1.875 for E2M3, 1.75 for E3M2, E4M3 and E5M2).
    format : str
        Element format, one of :data:`FORMATS`; its ``emax`` is 2, 2, 4, 8 or 15.

    Returns
    -------
    int
        ``0xFF`` if ``amax`` is NaN or infinite; ``0x00`` if it is zero; otherwise
        ``clamp(shared, -127, 127) + 127``. ``floor(log2(amax)) - emax`` is exact (from the exponent
        field, or from the leading one of the fraction for subnormals). For binary32 inputs the upper
        clamp never acts (for E2M1 the largest codes produced are 252 under floor and 253 under rceil).
    """
    _check_mode(mode)
    fmt = element_format(format)
    bits = _check_uint(amax_bits, 32, "amax_bits") & _ABS_MASK
    if bits >= fp32.POS_INF:
        return E8M0_NAN
    if bits == 0:
        return 0
    _, significand, lsb = fp32.decode_finite(bits)
    width = significand.bit_length()
    shared = lsb + width - 1 - fmt.emax
    top, top_frac = _max_significand(fmt)
    if mode == "rceil" and significand << top_frac > top << (width - 1):
        shared += 1
    return min(max(shared, _MIN_SHARED), _MAX_SHARED) + E8M0_BIAS


def encode_element(x_bits: int, scale: int, format: str = "e2m1") -> int:
    """Element code of the float32 ``x`` (pattern ``x_bits``) in a block with E8M0 scale code ``scale``.

    Parameters
    ----------
    x_bits : int
        Binary32 pattern of a finite element (any sign, subnormals included).
    scale : int
        E8M0 code 0..255. Any code is accepted, not only the one :func:`scale_code` would choose;
        elements too large for it saturate.
    format : str
        Element format, one of :data:`FORMATS`.

    Returns
    -------
    int
        For ``scale == 0xFF``: 0. Otherwise ``sign | magnitude`` where ``sign`` is bit 31 of ``x_bits``
        moved to the format's sign bit (so -0.0 and negative values that round to zero give the
        negative zero code) and ``magnitude`` is the code of the format's finite magnitude nearest to
        ``y = |x| / 2**(scale - 127)``: ``y`` rounded to nearest, ties to even, on the format's grid
        (spacing ``2**(max(floor(log2(y)), emin) - mantissa_bits)``), and anything above the largest
        normal giving the largest normal. No special code is ever produced. The division is exact: it
        is done on the integer significand, so it is right even where ``x / 2**shared`` is not
        representable in float32.
    """
    fmt = element_format(format)
    bits = _check_uint(x_bits, 32, "x_bits")
    scale = _check_uint(scale, 8, "scale")
    if scale == E8M0_NAN:
        return 0
    if (bits & _ABS_MASK) >= fp32.POS_INF:
        raise MXFormatError(f"x_bits {bits:#010x} is not finite; a block with NaN/Inf has scale 0xFF")
    sign, significand, lsb = fp32.decode_finite(bits)
    units = 0
    if significand:
        k = lsb - (scale - E8M0_BIAS)                  # y = significand * 2**k, exactly
        e_y = k + significand.bit_length() - 1         # floor(log2(y))
        if e_y > fmt.emax:
            units = fmt.max_units
        else:
            step = max(e_y, fmt.emin) - fmt.mantissa_bits
            n = _shift_rne(significand, step - k)      # y rounded, in units of 2**step
            units = min(n << (step - fmt.lsb_exponent), fmt.max_units)
    return (fmt.sign_bit if sign else 0) | _units_to_code(units, fmt)


def block_dot_quarters(a_codes32, b_codes32, a_format: str = "e2m1", b_format: str = "e2m1") -> int:
    """Exact dot product of two 32-element blocks, in the pair's unit (quarters for E2M1 x E2M1).

    Parameters
    ----------
    a_codes32, b_codes32 : sequence of int
        32 element codes each, of ``a_format`` and ``b_format`` (``uint8`` arrays or any integer
        sequence). NaN and Inf codes are rejected: a block holding one has no dot product, its output
        is NaN (:func:`matmul`).
    a_format, b_format : str
        Element formats, from :data:`FORMATS`.

    Returns
    -------
    int
        ``sum(units_a[a[j]] * units_b[b[j]])``, i.e. ``sum(value(a[j]) * value(b[j]))`` divided by
        ``2**dot_unit_exponent(a_format, b_format)``: a signed integer with magnitude at most
        :func:`max_block_dot` (4608 for E2M1 x E2M1, :data:`MAX_DOT_QUARTERS`). Signed zeros do not
        exist here: a zero dot product is the integer 0.
    """
    fa, fb = element_format(a_format), element_format(b_format)
    a = _check_block_codes(a_codes32, "a_codes32", fa)
    b = _check_block_codes(b_codes32, "b_codes32", fb)
    return sum(int(fa.units[x]) * int(fb.units[y]) for x, y in zip(a, b, strict=True))


def fp32_add_scaled(acc_bits: int, dot_quarters: int, exp: int, a_format: str = "e2m1",
                    b_format: str = "e2m1") -> int:
    """One accumulation step: ``acc + dot * 2**(exp + unit)``, rounded once to binary32 (RNE).

    This is the contract of the hardware accumulate adder; all arguments and the result are integers
    and the sum is formed exactly before its single rounding. ``unit`` is
    :func:`dot_unit_exponent` of the format pair (-2 for E2M1 x E2M1, so the term is
    ``dot_quarters / 4 * 2**exp``).

    Parameters
    ----------
    acc_bits : int
        Binary32 pattern of the accumulator, ``0 <= acc_bits < 2**32``; any value including
        subnormals, signed zeros, infinities and NaNs with any payload.
    dot_quarters : int
        Block dot product in the pair's unit, as from :func:`block_dot_quarters`:
        ``|dot_quarters| <= max_block_dot(a_format, b_format)`` (4608 for E2M1 x E2M1).
    exp : int
        Block exponent ``(sa - 127) + (sb - 127)`` of two non-NaN E8M0 scales: ``-254 <= exp <= 254``.
        (NaN scales never reach the adder; :func:`matmul` makes such outputs NaN.)
    a_format, b_format : str
        The element formats whose block dot product this is, from :data:`FORMATS`.

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
        If an argument is outside the ranges above or a format is unknown.
    """
    unit = dot_unit_exponent(a_format, b_format)
    acc = _check_uint(acc_bits, 32, "acc_bits")
    limit = max_block_dot(a_format, b_format)
    dot = _check_int(dot_quarters, -limit, limit, "dot_quarters")
    exp = _check_int(exp, MIN_BLOCK_EXP, MAX_BLOCK_EXP, "exp")
    return _add_exact(acc, dot, exp + unit)


def fp32_add_scaled_array(acc_bits, dot_quarters, exp, a_format: str = "e2m1",
                          b_format: str = "e2m1") -> np.ndarray:
    """Element-wise :func:`fp32_add_scaled` over broadcastable integer arrays.

    Same contract and ranges; returns the result patterns as a ``uint32`` array of the broadcast
    shape. This is the step :func:`matmul` applies to all outputs at once. Dot products of E5M2 x E5M2
    can exceed ``int64``; pass them as an ``object`` array of Python ints.
    """
    unit = dot_unit_exponent(a_format, b_format)
    limit = max_block_dot(a_format, b_format)
    acc = np.asarray(acc_bits)
    dot = np.asarray(dot_quarters)
    exp = np.asarray(exp)
    for name, arr in (("acc_bits", acc), ("dot_quarters", dot), ("exp", exp)):
        if arr.dtype.kind not in "iu" and not (name == "dot_quarters" and arr.dtype.kind == "O" and all(
                isinstance(v, int | np.integer) and not isinstance(v, bool) for v in arr.flat)):
            raise MXTypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    acc = acc.astype(np.int64)
    exp = exp.astype(np.int64)
    if acc.size and (acc.min() < 0 or acc.max() > 0xFFFF_FFFF):
        raise MXFormatError("acc_bits must be binary32 patterns in [0, 2**32)")
    if dot.size and int(np.abs(dot).max()) > limit:
        raise MXFormatError(f"dot_quarters must satisfy |dot_quarters| <= {limit}")
    if exp.size and (exp.min() < MIN_BLOCK_EXP or exp.max() > MAX_BLOCK_EXP):
        raise MXFormatError(f"exp must be in [{MIN_BLOCK_EXP}, {MAX_BLOCK_EXP}]")
    if limit < 1 << _FAST_DOT_BITS:
        acc, dot, exp = np.broadcast_arrays(acc, dot.astype(np.int64), exp)
        return _add_scaled_unchecked(acc, dot, exp + unit).astype(np.uint32)
    hi = (dot >> _LIMB).astype(np.int64)
    lo = (dot & ((1 << _LIMB) - 1)).astype(np.int64)
    acc, hi, lo, exp = np.broadcast_arrays(acc, hi, lo, exp)
    return _add_wide_unchecked(acc, hi, lo, exp + unit).astype(np.uint32)


def matmul_scalar(a_codes, a_scales, b_codes, b_scales, c=None, a_format: str = "e2m1",
                  b_format: str = "e2m1") -> np.ndarray:
    """:func:`matmul` written as plain loops over :func:`block_dot_quarters` and :func:`fp32_add_scaled`.

    Same arguments, checks and result as :func:`matmul`, but slow (Python loops over every output and
    block); it exists as the literal statement of the accumulation order and for cross-checking.
    """
    fa, fb = element_format(a_format), element_format(b_format)
    a_codes, a_scales, b_codes, b_scales, c_bits = _check_matmul_args(a_codes, a_scales, b_codes,
                                                                       b_scales, c, fa, fb)
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
                a_block, b_block = a_codes[i, cols], b_codes[cols, j]
                if (sa == E8M0_NAN or sb == E8M0_NAN or fa.special[a_block].any()
                        or fb.special[b_block].any()):
                    nan = True
                    continue
                dot = block_dot_quarters(a_block, b_block, a_format, b_format)
                acc = fp32_add_scaled(acc, dot, (sa - E8M0_BIAS) + (sb - E8M0_BIAS), a_format, b_format)
            out[i, j] = fp32.QNAN if nan or fp32.is_nan(acc) else acc
    return out.view(np.float32)


def _max_significand(fmt: ElementFormat) -> tuple[int, int]:
    """The largest normal's significand in [1, 2) as ``top / 2**top_frac`` (3/2, 15/8 or 7/4)."""
    top = fmt.max_units >> ((fmt.max_units & -fmt.max_units).bit_length() - 1)
    return top, top.bit_length() - 1


def _shift_rne(value: int, drop: int) -> int:
    """``value / 2**drop`` rounded to the nearest integer, ties to even (``value >= 0``, any ``drop``)."""
    if drop <= 0:
        return value << -drop
    kept = value >> drop
    rest = value - (kept << drop)
    half = 1 << (drop - 1)
    return kept + int(rest > half or (rest == half and kept & 1))


def _units_to_code(units: int, fmt: ElementFormat) -> int:
    """Magnitude code of a representable non-negative value given in units of the smallest subnormal."""
    m = fmt.mantissa_bits
    if units < 1 << (m + 1):           # subnormals and the lowest normal binade: the code is the value
        return units
    biased = units.bit_length() - m
    return (biased << m) | ((units >> (biased - 1)) - (1 << m))


def _add_exact(acc: int, dot: int, dot_lsb: int) -> int:
    """``acc + dot * 2**dot_lsb`` (binary32 pattern plus exact integer term), rounded once; Python ints."""
    if fp32.is_nan(acc):
        return fp32.QNAN
    if fp32.is_inf(acc):
        return acc
    sign, significand, lsb = fp32.decode_finite(acc)
    base = min(lsb, dot_lsb)
    total = ((-significand if sign else significand) << (lsb - base)) + (dot << (dot_lsb - base))
    if total == 0:
        return 0                            # exact zero sum: +0 under round-to-nearest
    return fp32.encode_rne(int(total < 0), abs(total), base)


# ==================================================================================================
# Vectorized API
# ==================================================================================================

def quantize(x, mode: str = "floor", format: str = "e2m1") -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` to MX: element codes and one E8M0 scale per 32 elements of the last axis.

    Parameters
    ----------
    x : array_like, floating
        Shape ``(..., K)`` with ``K`` a positive multiple of 32. float32 is used as is; bfloat16
        (``ml_dtypes.bfloat16``) and float16 are widened to float32, which is exact; float64 is first
        rounded to float32 (nearest-even; magnitudes that overflow float32 become ±Inf, so their
        block becomes a NaN block). Python sequences of floats are taken as float64.
    mode : {"floor", "rceil"}
        Shared-exponent rule, see :func:`scale_code`. ``"floor"`` (OCP MX v1.0) may saturate the
        largest elements of a block to the largest normal (±6 for E2M1); ``"rceil"`` never saturates
        (every ``|x| / 2**shared`` is at most the largest normal) but loses one bit of resolution on
        blocks whose ``amax`` significand exceeds the largest normal's (1.5 for E2M1).
    format : str
        Element format, one of :data:`FORMATS` (default ``"e2m1"``, MXFP4).

    Returns
    -------
    codes : numpy.ndarray of uint8, shape ``(..., K)``
        Element codes (0..15 for E2M1, 0..63 for FP6, 0..255 for FP8; never a NaN or Inf code),
        :func:`encode_element` of each element with its block's scale.
    scales : numpy.ndarray of uint8, shape ``(..., K // 32)``
        E8M0 codes, :func:`scale_code` of each block's largest magnitude. A block holding any NaN
        or ±Inf has scale 0xFF and all codes 0; an all-zero block (either sign) has scale 0x00.

    Raises
    ------
    MXFormatError
        Unknown ``mode`` or ``format``, 0-d input, or ``K`` not a positive multiple of 32.
    MXTypeError
        ``x`` is not a floating array (integer, bool, complex, other ml_dtypes formats).
    """
    _check_mode(mode)
    element_format(format)
    x = _as_float32(x)
    if x.ndim == 0:
        raise MXFormatError("x must have at least one dimension (blocks run along the last axis)")
    k = x.shape[-1]
    _check_k(k, "x")
    bits = np.ascontiguousarray(x).view(np.uint32).astype(np.int64)
    blocks = bits.reshape(x.shape[:-1] + (k // BLOCK_SIZE, BLOCK_SIZE))
    amax = (blocks & _ABS_MASK).max(axis=-1)
    scales = _scale_codes_array(amax, mode, format)
    codes = _encode_elements_array(blocks, scales[..., None], format)
    return codes.reshape(x.shape).astype(np.uint8), scales.astype(np.uint8)


def dequantize(codes, scales, format: str = "e2m1") -> np.ndarray:
    """Decode MX ``codes`` and ``scales`` to float32.

    Parameters
    ----------
    codes : numpy.ndarray of uint8, shape ``(..., K)``
        Element codes of ``format``; ``K`` a positive multiple of 32.
    scales : numpy.ndarray of uint8, shape ``(..., K // 32)``
        E8M0 codes, one per block of 32 along the last axis.
    format : str
        Element format, one of :data:`FORMATS` (default ``"e2m1"``).

    Returns
    -------
    numpy.ndarray of float32, shape ``(..., K)``
        ``value(code) * 2**(scale - 127)``. Element values have at most four significant bits and
        the smallest is ``2**-16`` (E5M2), so every product is exact whenever it is below ``2**128``
        (subnormals included) and ±Inf otherwise (for E2M1 that happens only for scales >= 253, as
        :func:`quantize` in ``"rceil"`` mode produces for ``amax >= 1.75 * 2**127``). Negative zero
        codes give -0.0. NaN codes (E4M3, E5M2) and every element of a block with scale 0xFF give
        NaN (0x7FC00000); E5M2 infinity codes give ±Inf.
    """
    fmt = element_format(format)
    codes = _check_codes(codes, "codes", fmt)
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
    sign = (c & fmt.sign_bit) != 0
    bits = fp32.encode_rne_array(sign, np.abs(fmt.units[c]), scale_per_element - E8M0_BIAS + fmt.lsb_exponent)
    bits = np.where(fmt.inf[c], fp32.POS_INF | (sign.astype(np.int64) << 31), bits)
    bits = np.where(fmt.nan[c] | (scale_per_element == E8M0_NAN), fp32.QNAN, bits)
    return bits.astype(np.uint32).view(np.float32)


def matmul(a_codes, a_scales, b_codes, b_scales, c=None, a_format: str = "e2m1",
           b_format: str = "e2m1") -> np.ndarray:
    """MX GEMM ``C + A @ B`` with exact block dot products and a binary32 accumulator.

    Parameters
    ----------
    a_codes : numpy.ndarray of uint8, shape ``(M, K)``
        Element codes of A, in ``a_format``; ``K`` a positive multiple of 32.
    a_scales : numpy.ndarray of uint8, shape ``(M, K // 32)``
        E8M0 scales of A, one per 32 consecutive elements of a row.
    b_codes : numpy.ndarray of uint8, shape ``(K, N)``
        Element codes of B, in ``b_format``.
    b_scales : numpy.ndarray of uint8, shape ``(K // 32, N)``
        E8M0 scales of B, one per 32 consecutive elements of a column.
    c : numpy.ndarray of float32, broadcastable to ``(M, N)``, optional
        Initial accumulator value; default +0.0. Must already be float32 (a float64 ``c`` would need
        a rounding the model will not guess).
    a_format, b_format : str
        Element formats of A and B, from :data:`FORMATS` (default ``"e2m1"``, MXFP4). Any pair.

    Returns
    -------
    numpy.ndarray of float32, shape ``(M, N)``
        For each output ``(i, j)``, starting from ``acc = c[i, j]``, for blocks ``b = 0, 1, ...``:
        ``acc = fp32_add_scaled(acc, block_dot_quarters(A[i, block b], B[block b, j], a_format,
        b_format), (a_scales[i, b] - 127) + (b_scales[b, j] - 127), a_format, b_format)``. If any
        block of the row or column has scale 0xFF or holds a code that is NaN or Inf in its format,
        or ``acc`` becomes or starts NaN, the output is NaN with pattern 0x7FC00000. See
        :func:`fp32_add_scaled` for signed zeros, subnormals, infinities and overflow.

    Raises
    ------
    MXFormatError
        Shape mismatch, ``K`` not a positive multiple of 32, an unknown format, or a code out of
        range for its format.
    MXTypeError
        Codes or scales not uint8, ``c`` not float32.
    """
    fa, fb = element_format(a_format), element_format(b_format)
    a_codes, a_scales, b_codes, b_scales, acc = _check_matmul_args(a_codes, a_scales, b_codes,
                                                                   b_scales, c, fa, fb)
    k = a_codes.shape[1]
    a_units = fa.units[a_codes]
    b_units = fb.units[b_codes]
    unit = fa.lsb_exponent + fb.lsb_exponent
    wide = max_block_dot(a_format, b_format) >= 1 << _FAST_DOT_BITS
    sa = a_scales.astype(np.int64)
    sb = b_scales.astype(np.int64)
    acc = acc.astype(np.int64)
    nan = fa.special[a_codes].any(axis=1)[:, None] | fb.special[b_codes].any(axis=0)[None, :]
    nan = np.broadcast_to(nan, acc.shape)
    for blk in range(k // BLOCK_SIZE):
        cols = slice(blk * BLOCK_SIZE, (blk + 1) * BLOCK_SIZE)
        nan = nan | (sa[:, blk, None] == E8M0_NAN) | (sb[None, blk, :] == E8M0_NAN)
        exp = (sa[:, blk, None] - E8M0_BIAS) + (sb[None, blk, :] - E8M0_BIAS)
        if wide:
            hi, lo = _wide_block_dot(a_units[:, cols], b_units[cols, :])
            acc = _add_wide_unchecked(acc, hi, lo, np.broadcast_to(exp + unit, acc.shape))
        else:
            dot = a_units[:, cols] @ b_units[cols, :]          # exact: |dot| < 2**59
            acc = _add_scaled_unchecked(acc, dot, exp + unit)   # NaN lanes are overwritten below
    acc = np.where(nan | ((acc & _ABS_MASK) > fp32.POS_INF), fp32.QNAN, acc)
    return acc.astype(np.uint32).view(np.float32)


# ==================================================================================================
# Vectorized kernels
# ==================================================================================================

def _scale_codes_array(amax_bits: np.ndarray, mode: str, format: str = "e2m1") -> np.ndarray:
    """Array form of :func:`scale_code` on ``int64`` magnitudes (sign already cleared)."""
    fmt = element_format(format)
    _, significand, lsb = fp32.decode_finite_array(amax_bits)
    width = fp32.bit_length_array(significand)
    shared = lsb + width - 1 - fmt.emax
    if mode == "rceil":
        top, top_frac = _max_significand(fmt)
        shared = shared + ((significand << top_frac) > (top << np.maximum(width - 1, 0)))
    codes = np.clip(shared, _MIN_SHARED, _MAX_SHARED) + E8M0_BIAS
    codes = np.where(amax_bits == 0, 0, codes)
    return np.where(amax_bits >= fp32.POS_INF, E8M0_NAN, codes)


def _encode_elements_array(x_bits: np.ndarray, scales: np.ndarray, format: str = "e2m1") -> np.ndarray:
    """Array form of :func:`encode_element` (broadcasting ``scales``), returning ``int64`` codes."""
    fmt = element_format(format)
    m = fmt.mantissa_bits
    sign, significand, lsb = fp32.decode_finite_array(x_bits)
    k = lsb - (scales - E8M0_BIAS)                          # y = significand * 2**k
    e_y = k + fp32.bit_length_array(significand) - 1        # floor(log2(y)) where significand > 0
    step = np.maximum(e_y, fmt.emin) - m                    # grid spacing of the format at y
    drop = step - k
    # drop < 0 only when y has fewer significant bits than the grid holds (then at most m bits are
    # missing). Dropping 40 bits of a 24-bit significand leaves less than half a step, as does any
    # larger drop, so clipping it changes nothing.
    d = np.clip(drop, 1, 40)
    kept = significand >> d
    rest = significand & ((np.int64(1) << d) - 1)
    half = np.int64(1) << (d - 1)
    rounded = kept + ((rest > half) | ((rest == half) & ((kept & 1) == 1)))
    n = np.where(drop <= 0, significand << np.clip(-drop, 0, m), rounded)
    # In range (e_y <= emax) the shift is at most emax - emin (29, for E5M2). Beyond it n >= 1 and the
    # clipped shift still gives at least 2**40, above every max_units: the minimum saturates.
    units = np.minimum(n << np.clip(step - fmt.lsb_exponent, 0, 40), fmt.max_units)
    biased = np.maximum(fp32.bit_length_array(units) - m, 1)
    normal = (biased << m) | ((units >> (biased - 1)) - (1 << m))
    magnitude = np.where(units < (1 << (m + 1)), units, normal)
    codes = np.where(sign == 1, fmt.sign_bit, 0) | magnitude
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


def _add_scaled_unchecked(acc: np.ndarray, dot: np.ndarray, dot_lsb: np.ndarray) -> np.ndarray:
    """``acc + dot * 2**dot_lsb`` rounded once, on ``int64`` arrays, for ``|dot| < 2**59``; no checks.

    This is the array form of :func:`fp32_add_scaled` (``dot_lsb = exp + dot_unit_exponent``). Both
    operands are placed in a window of ``_WINDOW_BITS`` (w = 60) bits below the higher of their two
    leading-bit positions ``t`` (the window's lowest bit has weight ``2**(t - w)``), so the exact sum
    fits an ``int64``. The operand with the higher leading bit fits, with its lowest bit at least one
    position above the window's: the accumulator has at most 24 significant bits, the dot product at
    most ``_FAST_DOT_BITS`` = w - 1. The other one, if its bits run below the window, is truncated
    with a sticky bit OR-ed into the window's lowest bit. This is the classic guard/round/sticky
    argument: a truncated operand is below ``2**(t - 2)`` (an accumulator below ``2**(t - 36)``, or a
    dot product of at most w - 1 bits whose lowest bit is below the window), so the sum is above
    ``2**(t - 2)`` and every rounding boundary (a multiple of its half-ulp, ``2**(t - 26)`` or more) is
    an even multiple of the window's lowest bit. The jammed sum is odd in those units and lies in the
    same open interval between consecutive even multiples as the exact sum, so it rounds the same.
    Hence a window of w bits is exact for dot products of up to w - 1 significant bits when
    ``w >= 27``; the tests fail for E2M1 with a 26-bit window and for E5M2 x E5M2 at a 60-bit dot
    product in this 60-bit window.
    """
    a_sign, a_mag, a_lsb = fp32.decode_finite_array(acc)
    d_sign = (dot < 0).astype(np.int64)
    d_mag = np.abs(dot)
    a_top = np.where(a_mag > 0, a_lsb + fp32.bit_length_array(a_mag), _NO_BITS_TOP)
    d_top = np.where(d_mag > 0, dot_lsb + fp32.bit_length_array(d_mag), _NO_BITS_TOP)
    base = np.maximum(a_top, d_top) - _WINDOW_BITS
    a_val = _align(a_mag, a_lsb - base)
    d_val = _align(d_mag, dot_lsb - base)
    total = np.where(a_sign == 1, -a_val, a_val) + np.where(d_sign == 1, -d_val, d_val)
    # total == 0 only for an exact zero sum (a sticky operand is never cancelled), which encodes as +0.
    out = fp32.encode_rne_array((total < 0).astype(np.int64), np.abs(total), base)
    a_abs = acc & _ABS_MASK
    out = np.where(a_abs == fp32.POS_INF, acc, out)
    return np.where(a_abs > fp32.POS_INF, fp32.QNAN, out)


def _wide_block_dot(a_units: np.ndarray, b_units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a_units @ b_units`` exactly as ``hi * 2**32 + lo`` (``0 <= lo < 2**32``), for ``|units| < 2**32``.

    Each element is split into signed 16-bit halves, ``u = h * 2**16 + l``, so that every partial
    matrix product fits an ``int64`` (32 products below ``2**32`` each); the halves are then
    recombined with exact carries. Used for pairs whose dot products can reach ``2**59`` (E5M2 x E5M2).
    """
    def split(u):
        mag = np.abs(u)
        return np.where(u < 0, -(mag >> 16), mag >> 16), np.where(u < 0, -(mag & 0xFFFF), mag & 0xFFFF)

    a_hi, a_lo = split(a_units)
    b_hi, b_lo = split(b_units)
    top = a_hi @ b_hi                             # weight 2**32
    middle = a_hi @ b_lo + a_lo @ b_hi            # weight 2**16
    bottom = a_lo @ b_lo                          # weight 1
    low = bottom + ((middle & 0xFFFF) << 16)      # middle = (middle >> 16) * 2**16 + (middle & 0xFFFF)
    hi = top + (middle >> 16) + (low >> _LIMB)
    return hi, low & ((1 << _LIMB) - 1)


def _ctz_array(v: np.ndarray) -> np.ndarray:
    """Trailing zero bits of each positive ``int64`` (-1 for zero)."""
    return fp32.bit_length_array(v & -v) - 1


def _add_wide_unchecked(acc: np.ndarray, hi: np.ndarray, lo: np.ndarray, dot_lsb: np.ndarray) -> np.ndarray:
    """``acc + (hi * 2**32 + lo) * 2**dot_lsb`` rounded once; same-shape ``int64`` arrays, no checks.

    A dot product whose significant bits (from its leading one down to its lowest one) span at most
    ``_FAST_DOT_BITS`` is shifted down past its trailing zeros and added by :func:`_add_scaled_unchecked`,
    exactly. Wider ones (E5M2 x E5M2 blocks holding both products near the top of the range and
    products of subnormals) are added one by one with Python integers by :func:`_add_exact`, the
    scalar contract itself. Real data almost never takes that path; it is there for exactness.
    """
    shape = acc.shape
    acc, hi, lo, dot_lsb = (np.ravel(v) for v in (acc, hi, lo, dot_lsb))
    negative = hi < 0
    borrow = negative & (lo > 0)
    mag_hi = np.where(negative, -hi - borrow, hi)
    mag_lo = np.where(borrow, (1 << _LIMB) - lo, lo)
    zeros = np.where(mag_lo != 0, _ctz_array(mag_lo), _LIMB + _ctz_array(mag_hi))
    top = np.where(mag_hi != 0, _LIMB + fp32.bit_length_array(mag_hi), fp32.bit_length_array(mag_lo))
    fits = top - zeros <= _FAST_DOT_BITS
    fit_hi, fit_lo = np.where(fits, mag_hi, 0), np.where(fits, mag_lo, 0)
    reduced = np.where(zeros >= _LIMB, fit_hi >> np.clip(zeros - _LIMB, 0, 62),
                       (fit_hi << np.clip(_LIMB - zeros, 0, _LIMB)) | (fit_lo >> np.clip(zeros, 0, _LIMB)))
    out = _add_scaled_unchecked(acc, np.where(negative, -reduced, reduced), dot_lsb + zeros)
    for i in np.flatnonzero(~fits):
        dot = (int(hi[i]) << _LIMB) + int(lo[i])
        out[i] = _add_exact(int(acc[i]), dot, int(dot_lsb[i]))
    return out.reshape(shape)


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


def _check_block_codes(codes, name: str, fmt: ElementFormat) -> list[int]:
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise MXTypeError(f"{name} must hold integer {fmt.name.upper()} codes, got dtype {arr.dtype}")
    if arr.shape != (BLOCK_SIZE,):
        raise MXFormatError(f"{name} must have shape ({BLOCK_SIZE},), got {arr.shape}")
    if arr.min() < 0 or arr.max() >= fmt.code_count:
        raise MXFormatError(f"{name} holds a code outside 0..{fmt.code_count - 1}")
    special = [int(v) for v in arr if fmt.special[v]]
    if special:
        raise MXFormatError(f"{name} holds code {special[0]:#04x}, which is NaN or Inf in {fmt.name}: "
                            f"such a block has no dot product (its output is NaN)")
    return [int(v) for v in arr]


def _check_uint8(arr, name: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise MXTypeError(f"{name} must be a numpy uint8 array, got {type(arr).__name__}")
    if arr.dtype != np.uint8:
        raise MXTypeError(f"{name} must have dtype uint8, got {arr.dtype}")
    return arr


def _check_codes(arr, name: str, fmt: ElementFormat) -> np.ndarray:
    arr = _check_uint8(arr, name)
    if arr.size and arr.max() >= fmt.code_count:
        raise MXFormatError(f"{name} holds code {int(arr.max())}; {fmt.name.upper()} codes are "
                            f"0..{fmt.code_count - 1}")
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


def _check_matmul_args(a_codes, a_scales, b_codes, b_scales, c, fa: ElementFormat, fb: ElementFormat):
    """Validate GEMM operands; return them plus the initial accumulator bits, shape (M, N), uint32."""
    a_codes = _check_codes(a_codes, "a_codes", fa)
    b_codes = _check_codes(b_codes, "b_codes", fb)
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
