"""Functional coverage of the MXFP4 numeric corner classes (cocotb-coverage).

Every accumulation step a testbench sends to the hardware (one block into one output) is classified
from the golden model's exact arithmetic, and each class it belongs to is a bin of the cover point
``mx.step``. :func:`check` reports the hits at the end of a run and fails if any class was never
exercised, so a testbench cannot silently stop reaching a corner.
"""

import numpy as np
from cocotb_coverage.coverage import CoverPoint, coverage_db

from sim_models import fp32, mx

__all__ = ["CLASSES", "classify_step", "sample_step", "sample_gemm", "check", "POINT"]

POINT = "mx.step"

CLASSES = (
    "normal_result",         # a normal finite result
    "subnormal_result",      # result below 2**-126, not zero
    "subnormal_acc",         # the accumulator going in is subnormal
    "underflow_to_zero",     # a non-zero exact sum rounds to a zero
    "negative_zero",         # the result is -0
    "exact_cancellation",    # non-zero accumulator and term cancel exactly: +0
    "massive_cancellation",  # the result lies 8 or more binades below the larger operand
    "rounding_tie",          # the exact sum is exactly halfway between two binary32 values
    "rounding_inexact",      # the exact sum is not representable (not a tie)
    "carry_into_binade",     # rounding up carries into the next binade
    "overflow_to_inf",       # a finite accumulator becomes infinite
    "inf_acc",               # the accumulator is already infinite (e.g. an Inf in C)
    "nan_acc",               # the accumulator is NaN (e.g. a NaN in C)
    "nan_scale",             # a 0xFF scale on either block
    "zero_block",            # the block dot product is exactly 0
    "max_block",             # |block dot product| = 4608 quarters (all elements +-6 x +-6)
)


def classify_step(acc, dot, exp, nan_scale):
    """The classes of one step ``acc + dot * 2**(exp - 2)`` (``nan_scale``: either scale 0xFF)."""
    classes = set()
    if nan_scale:
        classes.add("nan_scale")
    if fp32.is_nan(acc):
        classes.add("nan_acc")
        return classes
    if fp32.is_inf(acc):
        classes.add("inf_acc")
        return classes
    if nan_scale:
        return classes
    if dot == 0:
        classes.add("zero_block")
    if abs(dot) == mx.MAX_DOT_QUARTERS:
        classes.add("max_block")
    if (acc >> 23) & 0xFF == 0 and acc & fp32.FRAC_MASK:
        classes.add("subnormal_acc")
    result = mx.fp32_add_scaled(acc, dot, exp)
    if fp32.is_inf(result):
        classes.add("overflow_to_inf")
        return classes
    sign, significand, lsb = fp32.decode_finite(acc)
    term_lsb = exp - 2
    base = min(lsb, term_lsb)
    total = ((-significand if sign else significand) << (lsb - base)) + (dot << (term_lsb - base))
    if result == 0x8000_0000:
        classes.add("negative_zero")
    if total == 0:
        if significand and dot:
            classes.add("exact_cancellation")
        return classes
    magnitude = abs(total)
    top = base + magnitude.bit_length()
    tops = [t for t, present in ((lsb + significand.bit_length(), significand),
                                 (term_lsb + abs(dot).bit_length(), dot)) if present]
    if top <= max(tops) - 8:
        classes.add("massive_cancellation")
    result_lsb = max(top - 24, fp32.MIN_LSB_EXPONENT)
    drop = result_lsb - base
    if drop > 0:
        remainder = magnitude & ((1 << drop) - 1)
        if remainder == 1 << (drop - 1):
            classes.add("rounding_tie")
        elif remainder:
            classes.add("rounding_inexact")
        kept = magnitude >> drop
        up = remainder > (1 << (drop - 1)) or (remainder == 1 << (drop - 1) and kept & 1)
        if up and (kept + 1).bit_length() > kept.bit_length() and kept.bit_length() >= 24:
            classes.add("carry_into_binade")
    if result & 0x7FFF_FFFF == 0:
        classes.add("underflow_to_zero")
    elif (result >> 23) & 0xFF == 0:
        classes.add("subnormal_result")
    else:
        classes.add("normal_result")
    return classes


@CoverPoint(POINT, xf=lambda classes: classes, rel=lambda classes, name: name in classes,
            bins=list(CLASSES), inj=False)
def _sample(classes):
    pass


def sample_step(acc, dot, exp, nan_scale):
    """Classify and sample one accumulation step."""
    _sample(classify_step(acc, dot, exp, nan_scale))


def sample_gemm(a_codes, a_scales, b_codes, b_scales, c_bits):
    """Classify and sample every accumulation step of a GEMM, in the contract's order."""
    m, k = a_codes.shape
    n = b_codes.shape[1]
    halves_a = mx.E2M1_HALVES[a_codes]
    halves_b = mx.E2M1_HALVES[b_codes]
    acc = np.array(c_bits, dtype=np.int64).reshape(m, n)
    for blk in range(k // mx.BLOCK_SIZE):
        cols = slice(blk * mx.BLOCK_SIZE, (blk + 1) * mx.BLOCK_SIZE)
        dots = halves_a[:, cols] @ halves_b[cols, :]
        sa = a_scales[:, blk].astype(np.int64)
        sb = b_scales[blk, :].astype(np.int64)
        for i in range(m):
            for j in range(n):
                nan = bool(sa[i] == 0xFF or sb[j] == 0xFF)
                exp = int(sa[i]) + int(sb[j]) - 254
                value = int(acc[i, j])
                _sample(classify_step(value, int(dots[i, j]), exp, nan))
                if nan or fp32.is_nan(value):
                    acc[i, j] = fp32.QNAN
                else:
                    acc[i, j] = mx.fp32_add_scaled(value, int(dots[i, j]), exp)


def check(log):
    """Log the hits of every class; fail if any class was never hit."""
    point = coverage_db[POINT]
    hits = point.detailed_coverage
    for name in CLASSES:
        log.info("coverage %-22s %d", name, hits[name])
    missing = [name for name in CLASSES if hits[name] == 0]
    assert not missing, f"numeric corner classes never exercised: {', '.join(missing)}"
    return hits
