"""``poblano sim``: the main demo (``make sim``).

Quantizes a random activation and weight matrix to MXFP4 with the golden model, multiplies them
with the golden MX matmul, and reports the error against a float64 GEMM of the unquantized
inputs. (Once the MAC array lands, the same GEMM runs on the RTL and is checked bit-exactly.)
"""

import time

import numpy as np

NAME = "sim"
HELP = "main demo: an MXFP4 GEMM (golden model), with its error against float64"


def add_arguments(parser):
    parser.add_argument("--m", type=int, default=16, help="rows of A (default 16)")
    parser.add_argument("--k", type=int, default=256, help="inner dimension, a multiple of 32 (default 256)")
    parser.add_argument("--n", type=int, default=16, help="columns of B (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def run(args):
    from poblano.errors import UsageError
    from sim_models import mx

    if min(args.m, args.k, args.n) <= 0 or args.k % 32:
        raise UsageError("M, K and N must be positive and K a multiple of 32")
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal((args.m, args.k)).astype(np.float32)
    b = (rng.standard_normal((args.k, args.n)) * 0.05).astype(np.float32)
    start = time.perf_counter()
    a_codes, a_scales = mx.quantize(a)
    bt_codes, bt_scales = mx.quantize(b.T)             # blocks run along K for both operands
    c = mx.matmul(a_codes, a_scales, bt_codes.T.copy(), bt_scales.T.copy())
    seconds = time.perf_counter() - start
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rel = np.linalg.norm(c - exact) / np.linalg.norm(exact)
    print(f"MXFP4 GEMM {args.m}x{args.k} @ {args.k}x{args.n} (golden model, seed {args.seed})")
    print(f"  quantize (FLOOR) + matmul  {seconds * 1e3:.1f} ms")
    print(f"  relative Frobenius error vs float64 GEMM of the unquantized inputs: {rel:.4f}")
    print(f"  max |error| {np.max(np.abs(c - exact)):.4g}, max |C| {np.max(np.abs(exact)):.4g}")
    return 0
