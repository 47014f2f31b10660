"""Accuracy of the vector unit's golden model against float64: the measured side of its contract.

The model (``sim_models.vpu``) fixes every bit the RTL produces; this benchmark measures how far those
bits are from the mathematical functions (float64 evaluation of the same formula on the same float32
inputs, ``sim_models.vpu_reference``):

* each unary function (exp, reciprocal, rsqrt, sigmoid, silu) on ``--count`` inputs (default 10**7:
  half uniform over all 2**32 bit patterns, half uniform in value over [-128, 128], plus every special
  value): the largest error in float32 ulps where the bound applies (exact result normal; for the
  sigmoids also at least 2**-100 in magnitude);
* softmax and rmsnorm on rows of 64, 1024 and 8192 elements of several dynamic ranges: the largest
  relative error over outputs of magnitude at least 1e-30 (bound 1e-5);
* ``--exhaustive exp,reciprocal``: instead of the above, every one of the 2**32 patterns through the
  named functions (about 40 minutes each on one core of the reference machine), recorded separately.

Run: ``.venv/bin/python -m benchmarks.vpu_accuracy`` (writes ``benchmarks/results/vpu_accuracy.json``;
``benchmarks/results/vpu.md`` quotes it). ``--count 100000`` is a quick look that records nothing.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from sim_models import vpu
from sim_models import vpu_reference as accuracy

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "vpu_accuracy.json"
ROW_LENGTHS = (64, 1024, 8192)
RECORDED_COUNT = 10 ** 7


def unary(count, seed, chunk=10 ** 6):
    out = {}
    for name in sorted(vpu.UNARY):
        rng = np.random.default_rng(seed)
        start = time.monotonic()
        best = {"max_ulp": 0.0, "in_scope": 0, "count": 0, "worst_input": None}
        done = 0
        while done < count:
            size = min(chunk, count - done)
            patterns = accuracy.random_patterns(rng, size) if done == 0 else _plain(rng, size)
            result = accuracy.measure_unary(name, vpu.UNARY[name], patterns)
            best["in_scope"] += result["in_scope"]
            best["count"] += result["count"]
            if best["worst_input"] is None or result["max_ulp"] > best["max_ulp"]:
                best["max_ulp"], best["worst_input"] = result["max_ulp"], result["worst_input"]
            done += size
        best["bound_ulp"] = accuracy.ULP_BOUNDS[name]
        best["seconds"] = round(time.monotonic() - start, 1)
        out[name] = best
        print(f"{name:11s} max {best['max_ulp']:.4f} ulp over {best['in_scope']} in-scope of "
              f"{best['count']} (bound {best['bound_ulp']}), worst input {best['worst_input']}", flush=True)
    return out


def _plain(rng, size):
    half = size // 2
    uniform = rng.integers(0, 2 ** 32, half, dtype=np.uint64).astype(np.uint32)
    near = rng.uniform(-128.0, 128.0, size - half).astype(np.float32).view(np.uint32)
    return np.concatenate([uniform, near])


def _row_sets(rng, n):
    """Named row distributions: unit normal, 80 e-folds of dynamic range, huge, tiny, 16 logit scale."""
    return {
        "normal": rng.standard_normal((16, n)),
        "wide": rng.standard_normal((16, n)) * np.exp(rng.uniform(-40, 40, (16, n))),
        "huge": rng.standard_normal((4, n)) * 1e30,
        "tiny": rng.standard_normal((4, n)) * 1e-30,
        "logits": rng.standard_normal((16, n)) * 16,
    }


def rows(seed):
    out = {}
    for n in ROW_LENGTHS:
        rng = np.random.default_rng(seed + n)
        gain = (rng.standard_normal(n) * np.exp(rng.uniform(-5, 5, n))).astype(np.float32)
        for kind, values in _row_sets(rng, n).items():
            x = values.astype(np.float32)
            soft = accuracy.row_relative_error(vpu.softmax(x), accuracy.softmax_reference(x))
            eps = np.float32(1e-6)
            rms = accuracy.row_relative_error(vpu.rmsnorm(x, gain, eps),
                                              accuracy.rmsnorm_reference(x, gain, eps))
            out[f"{kind}-{n}"] = {"softmax": soft, "rmsnorm": rms, "rows": int(x.shape[0])}
            print(f"rows {kind:6s} n={n:5d}: softmax {soft:.3e}, rmsnorm {rms:.3e}", flush=True)
    return out


def exhaustive(names):
    out = {}
    for name in names:
        start = time.monotonic()

        def progress(done, total, name=name, start=start):
            if done % 16 == 0:
                print(f"  {name}: {done}/{total} chunks, {time.monotonic() - start:.0f} s", flush=True)

        result = accuracy.sweep_all_patterns(name, vpu.UNARY[name], progress=progress)
        result["seconds"] = round(time.monotonic() - start, 1)
        result["bound_ulp"] = accuracy.ULP_BOUNDS[name]
        out[name] = result
        print(f"exhaustive {name}: {result}", flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=RECORDED_COUNT, help="random inputs per function")
    parser.add_argument("--seed", type=int, default=1)
    functions = ", ".join(sorted(vpu.UNARY))
    parser.add_argument("--exhaustive", default="", metavar="F1,F2",
                        help=f"instead, sweep all 2**32 inputs of these functions ({functions})")
    args = parser.parse_args(argv)
    names = [n for n in args.exhaustive.split(",") if n]
    unknown = [n for n in names if n not in vpu.UNARY]
    if unknown or args.count < 1:
        print(f"vpu_accuracy: error: unknown function {unknown[0]!r}" if unknown
              else "vpu_accuracy: error: --count must be positive", file=sys.stderr)
        return 2
    record = json.loads(OUT.read_text()) if OUT.exists() else {}
    if names:
        record.setdefault("exhaustive", {}).update(exhaustive(names))
    else:
        result = {"unary": unary(args.count, args.seed), "rows": rows(args.seed)}
        if args.count != RECORDED_COUNT:
            print("(not recorded: --count differs from the recorded 10**7)")
            return 0
        record.update(result)
    record["machine"] = f"{platform.machine()}, numpy {np.__version__}"
    RESULTS.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
