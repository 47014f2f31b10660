"""``poblano gemm``: an MX GEMM on the MAC-array RTL (or the golden model), from files.

``A.npz`` holds ``codes`` (uint8, M x K, one element code per element), ``scales`` (uint8, M x K/32)
and optionally ``format`` (a string naming the element format, ``e2m1``, ``e2m3``, ``e3m2``, ``e4m3``
or ``e5m2``; missing means ``e2m1``, as ``poblano quantize`` files from before formats were added);
``B.npz`` holds ``codes`` (K x N), ``scales`` (K/32 x N) and optionally ``format``; ``--c`` an
optional float32 C (M x N, or anything broadcastable to it). The golden model (``--golden``) runs any
format pair; the built MAC array runs e2m1 x e2m1 only, and asking it for another pair is a usage
error (exit 2). The result ``C + A @ B`` is written as float32 to ``--out``. On the
RTL the GEMM is tiled onto an ``--rows`` x ``--cols`` array (M in tiles of rows, N in tiles of
cols x interleave, K in chunks of at most ``--max-blocks`` blocks chained through C) and simulated
with cocotb on Verilator or Icarus; the command reports cycles from the first operand accepted to
the last result delivered, MAC utilization against the array's peak, and simulation speed.
"""

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from poblano.errors import UsageError

NAME = "gemm"
HELP = "MX GEMM C + A @ B on the MAC-array RTL (cocotb, e2m1) or the golden model; reports cycles"

BLOCK = 32
PRODUCTS = {"hard": (9, 7), "lut": (0, 0)}
"""Product mappings: ``hard`` = 9 multiplier pairs + 7 block-RAM pairs per element (as built for
the ULX3S-85F), ``lut`` = every product in LUTs."""


def add_arguments(parser):
    parser.add_argument("--a", required=True, metavar="A.npz",
                        help="A: codes (M x K), scales (M x K/32), optional format (default e2m1)")
    parser.add_argument("--b", required=True, metavar="B.npz",
                        help="B: codes (K x N), scales (K/32 x N), optional format (default e2m1)")
    parser.add_argument("--c", metavar="C.npy", help="initial accumulator, float32, broadcastable to M x N")
    parser.add_argument("--out", required=True, metavar="C.npy", help="where to write the float32 result")
    parser.add_argument("--rows", type=int, default=4, help="array rows R (default 4)")
    parser.add_argument("--cols", type=int, default=4, help="array columns C (default 4)")
    parser.add_argument("--interleave", type=int, default=8,
                        help="accumulators per processing element (default 8)")
    parser.add_argument("--products", choices=sorted(PRODUCTS), default="hard",
                        help="product mapping of the RTL (default hard: multipliers + block RAM)")
    parser.add_argument("--max-blocks", type=int, default=65535,
                        help="largest K chunk in blocks of 32 (default 65535)")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                        help="simulator (default verilator)")
    parser.add_argument("--report", metavar="report.json", help="write the figures as JSON")
    parser.add_argument("--golden", action="store_true",
                        help="compute with the golden model (sim_models.mx.matmul) instead of the RTL")
    parser.add_argument("--check", action="store_true",
                        help="also compare the RTL result bit for bit with the golden model")


# ---- input checking -------------------------------------------------------------------------------

def _load_npz(path, label):
    """Read one operand file; return ``(codes, scales, format)``."""
    from sim_models import mx

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{label} file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except Exception as exc:            # not a zip, damaged, pickled objects, ...
        raise UsageError(f"{label} file {path} is not a readable .npz archive "
                         f"({exc.__class__.__name__})") from None
    for name in ("codes", "scales"):
        if name not in arrays:
            raise UsageError(f"{label} file {path} has no '{name}' array (found: "
                             f"{', '.join(sorted(arrays)) or 'none'})")
    for name in ("codes", "scales"):
        arr = arrays[name]
        if arr.dtype != np.uint8:
            raise UsageError(f"{label} '{name}' must be uint8, got {arr.dtype}")
        if arr.ndim != 2:
            raise UsageError(f"{label} '{name}' must be 2-D, got shape {arr.shape}")
    fmt = "e2m1"
    if "format" in arrays:
        entry = arrays["format"]
        if entry.dtype.kind != "U" or entry.ndim != 0:
            raise UsageError(f"{label} 'format' must be a string such as 'e4m3', got {entry.dtype} "
                             f"of shape {entry.shape}")
        fmt = str(entry[()])
        if fmt not in mx.FORMATS:
            raise UsageError(f"{label} file {path} names unknown element format {fmt!r}; expected "
                             f"{', '.join(mx.FORMATS[:-1])} or {mx.FORMATS[-1]}")
    count = mx.element_format(fmt).code_count
    if arrays["codes"].size and int(arrays["codes"].max()) >= count:
        raise UsageError(f"{label} 'codes' holds code {int(arrays['codes'].max())}; {fmt.upper()} codes are "
                         f"0..{count - 1}")
    return arrays["codes"], arrays["scales"], fmt


def load_operands(a_path, b_path, c_path=None):
    """Read and check the operand files.

    Returns ``((a_codes, a_scales, b_codes, b_scales, c), (a_format, b_format))``; ``c`` is None
    without ``c_path``, and a format missing from its file is ``"e2m1"``.
    """
    a_codes, a_scales, a_format = _load_npz(a_path, "A")
    b_codes, b_scales, b_format = _load_npz(b_path, "B")
    m, k = a_codes.shape
    kb, n = b_codes.shape
    if k != kb:
        raise UsageError(f"shape mismatch: A codes are {m}x{k} but B codes are {kb}x{n}")
    if k == 0 or k % BLOCK:
        raise UsageError(f"K = {k} is not a positive multiple of {BLOCK}")
    if m == 0 or n == 0:
        raise UsageError(f"empty GEMM: M = {m}, N = {n}")
    if a_scales.shape != (m, k // BLOCK):
        raise UsageError(f"A scales have shape {a_scales.shape}, expected {(m, k // BLOCK)} for K = {k}")
    if b_scales.shape != (k // BLOCK, n):
        raise UsageError(f"B scales have shape {b_scales.shape}, expected {(k // BLOCK, n)} for K = {k}")
    c = None
    if c_path is not None:
        path = Path(c_path)
        if not path.is_file():
            raise UsageError(f"C file {path} does not exist")
        try:
            c = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise UsageError(f"C file {path} is not a readable .npy array "
                             f"({exc.__class__.__name__})") from None
        if not isinstance(c, np.ndarray):
            raise UsageError(f"C file {path} holds an archive, not one array")
        if c.dtype != np.float32:
            raise UsageError(f"C must be float32, got {c.dtype}")
        try:
            c = np.ascontiguousarray(np.broadcast_to(c, (m, n)))
        except ValueError:
            raise UsageError(f"C has shape {c.shape}, not broadcastable to {(m, n)}") from None
    return (a_codes, a_scales, b_codes, b_scales, c), (a_format, b_format)


# ---- running ----------------------------------------------------------------------------------------

def run_on_rtl(a_codes, a_scales, b_codes, b_scales, c, *, rows=4, cols=4, interleave=8,
               products="hard", sim="verilator", max_blocks=65535):
    """Simulate the GEMM on the MAC array; return ``(result float32, stats dict)``."""
    from rtl.mx.dot_product import ProductMapping
    from rtl.mx.mac_array import MacArray
    from verification.runner import BUILD_ROOT, run_cocotb

    for name, value in (("rows", rows), ("cols", cols), ("interleave", interleave)):
        if value < 1:
            raise UsageError(f"--{name} must be at least 1, got {value}")
    if interleave < 2:
        raise UsageError("--interleave must be at least 2")
    if not 1 <= max_blocks <= 65535:
        raise UsageError("--max-blocks must be in 1..65535")
    if sim == "icarus":
        _require_icarus()
    dsp, rom = PRODUCTS[products]
    digest = hashlib.sha256()
    for arr in (a_codes, a_scales, b_codes, b_scales) + ((c,) if c is not None else ()):
        digest.update(np.ascontiguousarray(arr).tobytes())
        digest.update(str(arr.shape).encode())
    job = BUILD_ROOT / "gemm" / digest.hexdigest()[:16]
    job.mkdir(parents=True, exist_ok=True)
    arrays = {"a_codes": a_codes, "a_scales": a_scales, "b_codes": b_codes, "b_scales": b_scales}
    if c is not None:
        arrays["c"] = c
    np.savez(job / "inputs.npz", **arrays)
    (job / "job.json").write_text(json.dumps({"max_blocks": max_blocks}) + "\n")
    for stale in ("out.npy", "stats.json"):
        (job / stale).unlink(missing_ok=True)
    start = time.monotonic()
    run_cocotb(lambda: MacArray(rows, cols, interleave=interleave, mapping=ProductMapping(dsp, rom)),
               toplevel="mac_array",
               config={"rows": rows, "cols": cols, "interleave": interleave, "dsp_pairs": dsp,
                       "rom_pairs": rom},
               test_module="verification.mx.gemm_job", sim=sim, extra_env={"POBLANO_GEMM_JOB": str(job)})
    total_seconds = time.monotonic() - start
    out_bits = np.load(job / "out.npy")
    stats = json.loads((job / "stats.json").read_text())
    m, k = a_codes.shape
    n = b_codes.shape[1]
    peak = rows * cols * BLOCK
    stats.update({
        "m": m, "n": n, "k": k, "rows": rows, "cols": cols, "interleave": interleave,
        "products": products, "simulator": sim,
        "ideal_cycles": m * n * k / peak,
        "mac_utilization": m * n * k / (peak * stats["cycles"]),
        "cycles_vs_ideal": stats["cycles"] / (m * n * k / peak),
        "simulated_cycles_per_second": stats["simulated_cycles"] / max(stats["wall_seconds"], 1e-9),
        "total_seconds_with_build": round(total_seconds, 2),
    })
    return out_bits.view(np.float32), stats


def _require_icarus():
    from poblano import toolchain

    if not toolchain.icarus_available():
        raise UsageError("Icarus Verilog (iverilog, vvp) is not installed; use --sim verilator")


def print_stats(stats, file=None):
    print(f"  {stats['m']}x{stats['k']} @ {stats['k']}x{stats['n']} on a {stats['rows']}x{stats['cols']} "
          f"array ({stats['interleave']} accumulators per element, {stats['products']} products), "
          f"{stats['tiles']} tiles, {stats['simulator']}", file=file)
    print(f"  cycles {stats['cycles']} (first operand accepted to last result delivered); "
          f"ideal {stats['ideal_cycles']:.0f} = M*N*K / ({stats['rows']}*{stats['cols']}*32); "
          f"{stats['cycles_vs_ideal']:.4f}x ideal", file=file)
    print(f"  MAC utilization {100 * stats['mac_utilization']:.2f}% of peak "
          f"({stats['rows'] * stats['cols'] * 32} MACs/cycle)", file=file)
    print(f"  simulation {stats['simulated_cycles_per_second']:.0f} cycles/s "
          f"({stats['simulated_cycles']} cycles in {stats['wall_seconds']:.2f} s)", file=file)


def run(args):
    from sim_models import mx

    operands, (a_format, b_format) = load_operands(args.a, args.b, args.c)
    formats = {"a_format": a_format, "b_format": b_format}
    out_path = Path(args.out)
    if out_path.parent and not out_path.parent.exists():
        raise UsageError(f"output directory {out_path.parent} does not exist")
    if not args.golden and (a_format, b_format) != ("e2m1", "e2m1"):
        raise UsageError(f"the built MAC array supports only e2m1 x e2m1, not {a_format} x {b_format}; "
                         f"use --golden to run this pair on the golden model")
    if args.golden:
        start = time.monotonic()
        result = mx.matmul(*operands, **formats)
        stats = {"golden": True, "seconds": round(time.monotonic() - start, 3), **formats,
                 "m": operands[0].shape[0], "k": operands[0].shape[1], "n": operands[2].shape[1]}
        print(f"golden model: {a_format} x {b_format}, {stats['m']}x{stats['k']} @ {stats['k']}x{stats['n']} "
              f"in {stats['seconds']} s")
    else:
        result, stats = run_on_rtl(*operands, rows=args.rows, cols=args.cols, interleave=args.interleave,
                                   products=args.products, sim=args.sim, max_blocks=args.max_blocks)
        print("MAC array RTL:")
        print_stats(stats)
        if args.check:
            want = mx.matmul(*operands).view(np.uint32)
            bad = int(np.count_nonzero(result.view(np.uint32) != want))
            stats["mismatches_vs_golden"] = bad
            verdict = "yes" if bad == 0 else f"NO, {bad} outputs differ"
            print(f"  bit-exact against sim_models.mx.matmul: {verdict}")
            if bad:
                np.save(out_path, result)
                return 1
    np.save(out_path, result)
    if args.report:
        Path(args.report).write_text(json.dumps(stats, indent=2) + "\n")
    print(f"wrote {out_path}")
    return 0
