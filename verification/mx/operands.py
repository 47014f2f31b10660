"""MXFP4 GEMM operands for testbenches: random and adversarial, from a seeded NumPy generator.

Each generator returns ``(a_codes, a_scales, b_codes, b_scales, c)`` with ``c`` float32 or None, in
the shapes of :func:`sim_models.mx.matmul`. The adversarial kinds aim at the numeric corner classes
of :mod:`verification.mx.coverage`; :data:`CORNER_STEPS` reaches each of them by construction.
"""

import numpy as np

from sim_models import mx

__all__ = ["CORNER_STEPS", "KINDS", "corner_gemm", "make", "random_gemm"]

B = mx.BLOCK_SIZE


def _blank(rng, m, n, k, lo=118, hi=136):
    a_codes = rng.integers(0, 16, (m, k), dtype=np.uint8)
    b_codes = rng.integers(0, 16, (k, n), dtype=np.uint8)
    a_scales = rng.integers(lo, hi, (m, k // B), dtype=np.uint8)
    b_scales = rng.integers(lo, hi, (k // B, n), dtype=np.uint8)
    return a_codes, a_scales, b_codes, b_scales


def random_gemm(rng, m, n, k, *, with_c=True):
    a_codes, a_scales, b_codes, b_scales = _blank(rng, m, n, k)
    c = rng.standard_normal((m, n)).astype(np.float32) * np.float32(64) if with_c else None
    return a_codes, a_scales, b_codes, b_scales, c


def _nan_scales(rng, m, n, k):
    a_codes, a_scales, b_codes, b_scales, c = random_gemm(rng, m, n, k)
    a_scales[rng.random(a_scales.shape) < 0.08] = 0xFF
    b_scales[rng.random(b_scales.shape) < 0.08] = 0xFF
    return a_codes, a_scales, b_codes, b_scales, c


def _overflow(rng, m, n, k):
    # Block exponents around +120..+127 push sums past 2**128; some far beyond.
    a_codes, a_scales, b_codes, b_scales = _blank(rng, m, n, k, 180, 200)
    b_scales[...] = rng.integers(180, 200, b_scales.shape)
    a_scales[:, ::2] = rng.integers(240, 255, a_scales[:, ::2].shape)
    c = np.full((m, n), np.float32(3.0e38)) * rng.choice(np.array([1, -1], np.float32), (m, n))
    return a_codes, a_scales, b_codes, b_scales, c.astype(np.float32)


def _underflow(rng, m, n, k):
    # Block terms near and below 2**-149: subnormal sums, tiny terms rounding to (signed) zero.
    a_codes, a_scales, b_codes, b_scales = _blank(rng, m, n, k, 0, 70)
    c = np.zeros((m, n), np.float32)
    c[::2] = (rng.integers(1, 1 << 23, c[::2].shape).astype(np.uint32)
              | (rng.integers(0, 2, c[::2].shape).astype(np.uint32) << 31)).view(np.float32)
    return a_codes, a_scales, b_codes, b_scales, c


def _cancellation(rng, m, n, k):
    # Block 2j+1 repeats block 2j of A with every sign of B flipped: the two terms cancel exactly
    # (even columns) or, where element 0 keeps its sign (odd columns), up to 2 quarters out of
    # thousands: massive cancellation. Block 2j has large positive elements so its sum is large.
    a_codes, a_scales, b_codes, b_scales = _blank(rng, m, n, k)
    for blk in range(0, k // B - 1, 2):
        src, dst = slice(blk * B, (blk + 1) * B), slice((blk + 1) * B, (blk + 2) * B)
        a_codes[:, src] = rng.integers(5, 8, a_codes[:, src].shape)
        b_codes[src, :] = rng.integers(5, 8, b_codes[src, :].shape)
        a_codes[:, blk * B] = 1
        b_codes[blk * B, :] = 1
        a_codes[:, dst] = a_codes[:, src]
        a_scales[:, blk + 1] = a_scales[:, blk]
        b_codes[dst, :] = b_codes[src, :] ^ 8
        b_codes[(blk + 1) * B, 1::2] = 1
        b_scales[blk + 1, :] = b_scales[blk, :]
    return a_codes, a_scales, b_codes, b_scales, None


def _extremes(rng, m, n, k):
    # All-+-6 blocks (|dot| = 4608) and all-zero blocks.
    a_codes, a_scales, b_codes, b_scales, c = random_gemm(rng, m, n, k)
    a_codes[::2, :B] = 7 | (rng.integers(0, 2, (len(range(0, m, 2)), 1), dtype=np.uint8) << 3)
    b_codes[:B, ::2] = 15
    zero_rows = slice(1, m, 3)
    a_codes[zero_rows, B:2 * B if k > B else B] = 8
    b_codes[:, 1::3] = np.where(rng.random(b_codes[:, 1::3].shape) < 0.5, 0, 8)
    return a_codes, a_scales, b_codes, b_scales, c


def _special_c(rng, m, n, k):
    # C holding infinities, NaNs with odd payloads, signed zeros, subnormals, the largest finite.
    a_codes, a_scales, b_codes, b_scales, _ = random_gemm(rng, m, n, k)
    specials = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x80000000,
                         0x00000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000],
                        dtype=np.uint32)
    c = specials[rng.integers(0, len(specials), (m, n))].view(np.float32)
    return a_codes, a_scales, b_codes, b_scales, c


def _ties(rng, m, n, k):
    # One product per block (0.5 x 0.5 = 1 quarter, or 1.5 x 0.5 = 3) scaled onto half an ulp of C,
    # with C's significands all ones or random: ties to even, carries into the next binade.
    a_codes = np.zeros((m, k), np.uint8)
    b_codes = np.zeros((k, n), np.uint8)
    for blk in range(k // B):
        a_codes[:, blk * B] = rng.choice(np.array([1, 3, 9, 11], np.uint8), m)
        b_codes[blk * B, :] = rng.choice(np.array([1, 9], np.uint8), n)
    exponents = np.broadcast_to(rng.integers(100, 140, (m, 1)), (m, n))
    fracs = np.where(rng.random((m, n)) < 0.5, 0x7FFFFF, rng.integers(0, 1 << 23, (m, n)))
    c = ((exponents.astype(np.uint32) << 23) | fracs.astype(np.uint32)).view(np.float32)
    # term = dot * 2**(sa + sb - 256); half an ulp of C is 2**(e - 151), so sa + sb = e + 105.
    a_scales = np.zeros((m, k // B), np.uint8)
    b_scales = np.zeros((k // B, n), np.uint8)
    row_e = exponents[:, 0]
    a_scales[:] = (row_e[:, None] + 105 - 120).astype(np.uint8)
    b_scales[:] = 120
    return a_codes, a_scales, b_codes, b_scales, c


def _one_product(a_code, b_code):
    """Codes of two blocks whose dot product is the single product ``a_code x b_code``."""
    return [a_code] + [0] * (B - 1), [b_code] + [0] * (B - 1)


def _step(acc, blocks, sa, sb):
    a, b = blocks
    return a, sa, b, sb, acc


# One accumulation step ``(a codes, a scale, b codes, b scale, acc bits)`` per numeric corner class
# of :mod:`verification.mx.coverage`, built by hand so that every run reaches every class whatever its
# seed. The term added is ``dot * 2**(sa + sb - 256)`` with ``dot`` in quarters.
CORNER_STEPS = {
    "normal_result":        _step(0x3F80_0000, _one_product(2, 2), 127, 127),   # 1 + 1
    "subnormal_result":     _step(0x0000_0000, _one_product(1, 1), 58, 58),     # 0 + 2**-140
    "subnormal_acc":        _step(0x0000_0010, _one_product(1, 1), 54, 53),     # 16 + 1 ulp of 2**-149
    "underflow_to_zero":    _step(0x0000_0000, _one_product(1, 1), 53, 52),     # 0 + 2**-151
    "negative_zero":        _step(0x8000_0000, _one_product(9, 1), 53, 52),     # -0 - 2**-151
    "exact_cancellation":   _step(0xBF80_0000, _one_product(2, 2), 127, 127),   # -1 + 1
    "massive_cancellation": _step(0xC48F_F800, ([7] * B, [7] * B), 127, 127),   # -1151.75 + 1152
    "rounding_tie":         _step(0x3F80_0000, _one_product(1, 1), 116, 116),   # 1 + 2**-24
    "rounding_inexact":     _step(0x3F80_0000, _one_product(1, 1), 116, 115),   # 1 + 2**-25
    "carry_into_binade":    _step(0x3FFF_FFFF, _one_product(1, 1), 116, 116),   # (2 - 2**-23) + 2**-24
    "overflow_to_inf":      _step(0x7F7F_FFFF, ([7] * B, [7] * B), 254, 127),   # max + 4608 * 2**125
    "inf_acc":              _step(0x7F80_0000, _one_product(2, 2), 127, 127),
    "nan_acc":              _step(0x7FC0_0000, _one_product(2, 2), 127, 127),
    "nan_scale":            _step(0x3F80_0000, _one_product(2, 2), 0xFF, 127),
    "zero_block":           _step(0x3F80_0000, ([0] * B, [8] * B), 127, 127),
    "max_block":            _step(0x0000_0000, ([7] * B, [15] * B), 127, 127),  # -4608 quarters
}


def corner_gemm(rng, k=64):
    """A square GEMM of side ``len(CORNER_STEPS)`` whose output (i, i) starts from C[i, i] and adds
    corner step number i in its first block; the other outputs and blocks are random."""
    steps = list(CORNER_STEPS.values())
    m = n = len(steps)
    a_codes, a_scales, b_codes, b_scales, c = random_gemm(rng, m, n, k)
    for i, (a, sa, b, sb, acc) in enumerate(steps):
        a_codes[i, :B], a_scales[i, 0] = a, sa
        b_codes[:B, i], b_scales[0, i] = b, sb
        c[i, i] = np.uint32(acc).view(np.float32)
    return a_codes, a_scales, b_codes, b_scales, c


KINDS = {
    "nan_scales": _nan_scales,
    "overflow": _overflow,
    "underflow": _underflow,
    "cancellation": _cancellation,
    "extremes": _extremes,
    "special_c": _special_c,
    "ties": _ties,
}


def make(kind, rng, m, n, k):
    """Operands of the adversarial ``kind`` (a key of :data:`KINDS`) or ``"random"``."""
    if kind == "random":
        return random_gemm(rng, m, n, k)
    return KINDS[kind](rng, m, n, k)
