"""float64 references of the vector unit's functions and the error measures of its accuracy contract.

:mod:`sim_models.vpu` fixes every result bit; this module says how close those bits are to the
mathematical functions. Each reference evaluates the same formula in float64 on the same float32
inputs (float64's own error, about 2**-29 float32 ulp, is far below the bounds). The accuracy tests
(``tests/sim_models/test_vpu.py``) assert the bounds of :data:`ULP_BOUNDS` and
:data:`ROW_REL_BOUND`; the accuracy benchmark (``benchmarks/vpu_accuracy.py``) records the measured
maxima over 10**7 inputs and the exhaustive runs.
"""

import numpy as np

__all__ = ["UNARY_REFERENCES", "ULP_BOUNDS", "ROW_REL_BOUND", "MIN_SCOPE",
           "ulp_error", "in_scope", "special_patterns", "random_patterns", "measure_unary",
           "sweep_all_patterns",
           "softmax_reference", "rmsnorm_reference", "row_relative_error"]

_MIN_NORMAL = 2.0 ** -126
_MAX_FINITE = float(np.finfo(np.float32).max)

UNARY_REFERENCES = {
    "exp": np.exp,
    "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
"""float64 evaluation of each unary function's formula."""

ULP_BOUNDS = {"exp": 1.0, "reciprocal": 0.5, "rsqrt": 1.0, "sigmoid": 2.0, "silu": 2.0}
"""Largest error in float32 ulps allowed where the exact result is in scope (``reciprocal`` is
correctly rounded, hence half an ulp)."""

MIN_SCOPE = {"sigmoid": 2.0 ** -100, "silu": 2.0 ** -100}
"""Smallest exact result magnitude for which a function's bound is stated (besides normality)."""

ROW_REL_BOUND = 1e-5
"""Relative error bound of softmax and rmsnorm outputs of magnitude at least :data:`ROW_MIN_MAG`."""
ROW_MIN_MAG = 1e-30


def ulp_error(result, exact) -> np.ndarray:
    """``|result - exact|`` in ulps of float32 at ``exact``'s binade (float64 arrays out)."""
    exact = np.asarray(exact, dtype=np.float64)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(exact))
        ulp = np.ldexp(1.0, np.maximum(e - 24, -149))
        return np.abs(np.asarray(result, dtype=np.float64) - exact) / ulp


def in_scope(name, exact) -> np.ndarray:
    """Where the function's bound applies: the exact result is a normal float32 (and not too small)."""
    mag = np.abs(np.asarray(exact, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        scope = np.isfinite(mag) & (mag >= _MIN_NORMAL) & (mag <= _MAX_FINITE)
        return scope & (mag >= MIN_SCOPE.get(name, 0.0))


def special_patterns() -> np.ndarray:
    """Every special binary32 class: ±0, ±Inf, NaNs, sub/normal boundaries, neighbours of 1."""
    pats = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0000,
            0x7F80_0001, 0xFFFF_FFFF, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x807F_FFFF,
            0x0080_0000, 0x8080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF, 0x3F80_0000, 0xBF80_0000,
            0x3F7F_FFFF, 0x3F80_0001, 0x0040_0000, 0x3300_0000, 0xB300_0000]
    return np.array(pats, dtype=np.uint32)


def random_patterns(rng, count) -> np.ndarray:
    """``count`` binary32 patterns: half uniform over all 2**32 patterns (the whole range), half
    uniform in value over ``[-128, 128]`` (where exp and the sigmoids vary), plus the specials."""
    half = count // 2
    uniform = rng.integers(0, 2 ** 32, half, dtype=np.uint64).astype(np.uint32)
    near = rng.uniform(-128.0, 128.0, count - half).astype(np.float32).view(np.uint32)
    return np.concatenate([special_patterns(), uniform, near])


def measure_unary(name, function, patterns) -> dict:
    """Largest in-scope ulp error of ``function`` (a :mod:`sim_models.vpu` unary) on ``patterns``."""
    x = np.asarray(patterns, dtype=np.uint32).view(np.float32)
    result = function(x)
    with np.errstate(all="ignore"):
        exact = UNARY_REFERENCES[name](x.astype(np.float64))
    scope = in_scope(name, exact)
    err = np.where(scope, ulp_error(result, exact), 0.0)
    worst = int(np.argmax(err))
    return {"max_ulp": float(err[worst]), "in_scope": int(scope.sum()), "count": int(x.size),
            "worst_input": f"{int(x.view(np.uint32)[worst]):#010x}"}


def softmax_reference(x) -> np.ndarray:
    """Max-subtracted softmax along the last axis in float64."""
    xd = np.asarray(x, dtype=np.float64)
    e = np.exp(xd - xd.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rmsnorm_reference(x, gain, eps) -> np.ndarray:
    """``x / sqrt(mean(x**2) + eps) * gain`` in float64 (squares summed with scaling, no overflow)."""
    xd = np.asarray(x, dtype=np.float64)
    scale = np.abs(xd).max(axis=-1, keepdims=True)
    scale = np.where(scale == 0, 1.0, scale)
    y = xd / scale
    ms = (y * y).mean(axis=-1, keepdims=True)
    rms = np.sqrt(ms + float(np.float32(eps)) / (scale * scale)) * scale
    return xd / rms * np.asarray(gain, dtype=np.float64)


def row_relative_error(result, exact) -> float:
    """Largest relative error over outputs whose exact magnitude is at least :data:`ROW_MIN_MAG`."""
    exact = np.asarray(exact, dtype=np.float64)
    scope = np.abs(exact) >= ROW_MIN_MAG
    if not scope.any():
        return 0.0
    err = np.abs(np.asarray(result, dtype=np.float64)[scope] - exact[scope]) / np.abs(exact[scope])
    return float(err.max())


def sweep_all_patterns(name, function, chunk_bits=24, progress=None) -> dict:
    """:func:`measure_unary` over all 2**32 binary32 patterns, in chunks of ``2**chunk_bits``.

    Also checks that every NaN input gives the canonical NaN. Returns the largest in-scope error,
    the input that gave it, and the counts. ``progress(done_chunks, total_chunks)`` is called after
    every chunk.
    """
    size = 1 << chunk_bits
    chunks = 1 << (32 - chunk_bits)
    worst = {"max_ulp": 0.0, "in_scope": 0, "count": 0, "worst_input": "0x00000000", "bad_nan": 0}
    for index in range(chunks):
        patterns = np.arange(index * size, (index + 1) * size, dtype=np.uint64).astype(np.uint32)
        result = measure_unary(name, function, patterns)
        x = patterns.view(np.float32)
        nan_in = np.isnan(x)
        if nan_in.any():
            worst["bad_nan"] += int((function(x[nan_in]).view(np.uint32) != 0x7FC0_0000).sum())
        worst["in_scope"] += result["in_scope"]
        worst["count"] += result["count"]
        if result["max_ulp"] > worst["max_ulp"]:
            worst["max_ulp"], worst["worst_input"] = result["max_ulp"], result["worst_input"]
        if progress:
            progress(index + 1, chunks)
    return worst
