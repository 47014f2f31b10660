"""``poblano sim``: the main demo (``make sim``): an MXFP4 GEMM on the MAC-array RTL.

Quantizes a random activation matrix and weight matrix to MXFP4 with the golden model, runs the GEMM
on the 4 x 4 MAC array in Verilator (cocotb, ``verification.mx.gemm_job``), checks every output bit
for bit against ``sim_models.mx.matmul``, and prints the cycle count (first operand accepted to last
result delivered), the MAC utilization, the error against a float64 GEMM of the unquantized inputs
and the simulation speed. The first run builds the Verilator model (a few minutes); later runs reuse
it. ``--golden`` skips the RTL and runs only the golden model.
"""

import time

import numpy as np

NAME = "sim"
HELP = "main demo: an MXFP4 GEMM on the MAC-array RTL, bit-exact against the golden model"


def add_arguments(parser):
    parser.add_argument("--m", type=int, default=32, help="rows of A (default 32)")
    parser.add_argument("--k", type=int, default=256, help="inner dimension, a multiple of 32 (default 256)")
    parser.add_argument("--n", type=int, default=64, help="columns of B (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--rows", type=int, default=4, help="array rows (default 4)")
    parser.add_argument("--cols", type=int, default=4, help="array columns (default 4)")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                        help="simulator (default verilator)")
    parser.add_argument("--golden", action="store_true", help="golden model only, no RTL")


def run(args):
    from poblano.commands import gemm
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
    b_codes, b_scales = bt_codes.T.copy(), bt_scales.T.copy()
    golden = mx.matmul(a_codes, a_scales, b_codes, b_scales)
    golden_ms = (time.perf_counter() - start) * 1e3
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rel = np.linalg.norm(golden - exact) / np.linalg.norm(exact)

    print(f"MXFP4 GEMM {args.m}x{args.k} @ {args.k}x{args.n}, random N(0,1) x N(0,0.05^2) inputs "
          f"quantized with FLOOR scales (seed {args.seed})")
    print(f"  golden model (quantize + matmul): {golden_ms:.1f} ms")
    print(f"  error vs float64 GEMM of the unquantized inputs: relative Frobenius {rel:.4f}, "
          f"max |error| {np.max(np.abs(golden - exact)):.4g} (max |C| {np.max(np.abs(exact)):.4g})")
    if args.golden:
        return 0
    print(f"  running on the {args.rows}x{args.cols} MAC-array RTL in {args.sim} "
          f"(the first run builds the model) ...", flush=True)
    result, stats = gemm.run_on_rtl(a_codes, a_scales, b_codes, b_scales, None, rows=args.rows,
                                    cols=args.cols, sim=args.sim)
    gemm.print_stats(stats)
    bad = int(np.count_nonzero(result.view(np.uint32) != golden.view(np.uint32)))
    if bad:
        print(f"  RTL vs golden model: {bad} of {result.size} outputs DIFFER")
        return 1
    print(f"  RTL vs golden model: all {result.size} outputs bit-exact")
    return 0
