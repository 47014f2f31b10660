"""``poblano vpu``: one vector-unit operation on .npy files, on the golden model or the RTL.

The operation runs along the last axis of ``--in`` (float32). Element-wise operations take operands
of the same shape; ``scale`` and ``clamp`` take scalars (``--scalar``, ``--lo``/``--hi``); ``rmsnorm``
takes ``--gain`` (shape ``(n,)`` or the input's) and ``--eps``; ``rope`` takes ``--cos``/``--sin``
(from ``sim_models.vpu.rope_tables``); ``topk`` writes an ``.npz`` with ``values`` and ``indices``;
``to_bf16`` writes uint16 bit patterns and ``from_bf16`` reads them; ``to_mx`` writes an ``.npz``
with ``codes`` and ``scales`` (the MXFP4 quantizer's contract).

``--sim`` runs the operation on the vector-unit RTL (Verilator through cocotb) and compares every
result bit with the golden model (exit 1 on a mismatch). ``--report`` writes the figures as JSON:
for a golden run the measured accuracy against float64 (largest ulp error for the functions, largest
relative error for softmax and rmsnorm), for an RTL run also its cycles.
"""

import json
from pathlib import Path

import numpy as np

from poblano.errors import UsageError

NAME = "vpu"
HELP = "one vector-unit operation (exp, rmsnorm, softmax, topk, ...) on .npy files, golden model or RTL"

# name -> extra inputs it needs (besides --in)
OPS = {
    "add": ("in2",), "sub": ("in2",), "mul": ("in2",), "max": ("in2",), "min": ("in2",),
    "fma": ("in2", "in3"), "scale": ("scalar",), "clamp": ("lo", "hi"),
    "exp": (), "reciprocal": (), "rsqrt": (), "sigmoid": (), "silu": (),
    "sum": (), "sum_squares": (), "max_reduce": (),
    "rmsnorm": ("gain",), "softmax": (), "swiglu": ("in2",), "rope": ("cos", "sin"), "topk": ("k",),
    "to_bf16": (), "from_bf16": (), "to_mx": (),
}


def add_arguments(parser):
    parser.add_argument("--op", required=True, metavar="OP", help=f"operation: {', '.join(OPS)}")
    parser.add_argument("--in", dest="input", required=True, metavar="X.npy",
                        help="first operand (float32; uint16 bfloat16 patterns for from_bf16)")
    parser.add_argument("--in2", metavar="Y.npy",
                        help="second operand (add, sub, mul, max, min, fma, swiglu)")
    parser.add_argument("--in3", metavar="Z.npy", help="third operand (fma: in * in2 + in3)")
    parser.add_argument("--scalar", type=float, metavar="S", help="the scalar of scale")
    parser.add_argument("--lo", type=float, help="lower bound of clamp")
    parser.add_argument("--hi", type=float, help="upper bound of clamp")
    parser.add_argument("--gain", metavar="G.npy", help="rmsnorm gain, float32, shape (n,) or the input's")
    parser.add_argument("--eps", type=float, default=1e-6, help="rmsnorm epsilon (default 1e-6)")
    parser.add_argument("--cos", metavar="C.npy", help="rope cosine table")
    parser.add_argument("--sin", metavar="S.npy", help="rope sine table")
    parser.add_argument("--k", type=int, help="topk: how many")
    parser.add_argument("--mode", default="floor", choices=("floor", "rceil"), help="to_mx scale rule")
    parser.add_argument("--out", required=True, metavar="OUT.npy",
                        help="result (.npy, or .npz for topk and to_mx)")
    parser.add_argument("--lanes", type=int, default=8,
                        help="lanes of the unit (they set the sum order; default 8)")
    parser.add_argument("--sim", action="store_true", help="run on the RTL (Verilator) and check it")
    parser.add_argument("--report", metavar="r.json", help="write cycles and accuracy as JSON")


def _load(path, label, dtype=np.float32):
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{label} file {str(path)!r} not found")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"cannot read {str(path)!r} as a .npy array ({str(exc).splitlines()[0]})") from None
    if not isinstance(arr, np.ndarray):
        raise UsageError(f"{str(path)!r} is an .npz archive; give one array as .npy")
    if arr.dtype != dtype:
        raise UsageError(f"{label} must be {np.dtype(dtype).name}, got {arr.dtype} ({str(path)!r})")
    return arr


def _scalar(value, flag):
    if value is None:
        raise UsageError(f"{flag} is required for this operation")
    with np.errstate(over="ignore"):
        return np.float32(value)


def _arguments(args):
    """The operation's operands, loaded and checked, as a dict for :func:`compute`."""
    if args.op not in OPS:
        raise UsageError(f"unknown operation {args.op!r}; known: {', '.join(OPS)}")
    if args.lanes < 1 or args.lanes & (args.lanes - 1):
        raise UsageError(f"--lanes must be a power of two, got {args.lanes}")
    needs = OPS[args.op]
    given = {"in2": args.in2, "in3": args.in3, "gain": args.gain, "cos": args.cos, "sin": args.sin}
    for name, value in given.items():
        if value is not None and name not in needs:
            raise UsageError(f"--{name} does not apply to {args.op}")
    ops = {"x": _load(args.input, "--in", np.uint16 if args.op == "from_bf16" else np.float32)}
    for name in ("in2", "in3", "gain", "cos", "sin"):
        if name in needs:
            if given[name] is None:
                raise UsageError(f"--{name} is required for {args.op}")
            ops[name] = _load(given[name], f"--{name}")
    for name in ("in2", "in3"):
        if name in ops and ops[name].shape != ops["x"].shape:
            raise UsageError(f"--{name} has shape {ops[name].shape}, --in has {ops['x'].shape}; "
                             f"{args.op} needs the same shape")
    if "scalar" in needs:
        ops["scalar"] = _scalar(args.scalar, "--scalar")
    if args.op == "clamp":
        ops["lo"], ops["hi"] = _scalar(args.lo, "--lo"), _scalar(args.hi, "--hi")
        if not ops["lo"] <= ops["hi"]:
            raise UsageError(f"clamp needs --lo <= --hi (neither NaN), got {args.lo} and {args.hi}")
    if args.op == "rmsnorm":
        n = ops["x"].shape[-1] if ops["x"].ndim else 0
        if ops["gain"].shape not in ((n,), ops["x"].shape):
            raise UsageError(f"--gain has shape {ops['gain'].shape}; rmsnorm of rows of {n} needs ({n},) "
                             f"or {ops['x'].shape}")
        if not (np.isfinite(args.eps) and args.eps >= 0):
            raise UsageError(f"--eps must be finite and non-negative, got {args.eps}")
        ops["eps"] = np.float32(args.eps)
    if args.op == "topk":
        n = ops["x"].shape[-1] if ops["x"].ndim else 0
        if args.k is None or not 1 <= args.k <= n:
            raise UsageError(f"--k must be in [1, {n}] for rows of {n}, got {args.k}")
        ops["k"] = args.k
    if args.op == "rope":
        if ops["x"].ndim == 0 or ops["x"].shape[-1] % 2:
            raise UsageError(f"rope needs an even last axis (head dimension), got shape {ops['x'].shape}")
        for name in ("cos", "sin"):
            try:
                np.broadcast_shapes(ops[name].shape, ops["x"].shape)
            except ValueError:
                raise UsageError(f"--{name} of shape {ops[name].shape} does not broadcast to "
                                 f"{ops['x'].shape}") from None
    if args.op == "to_mx" and (ops["x"].ndim == 0 or ops["x"].shape[-1] % 32):
        raise UsageError(f"to_mx needs a last axis that is a multiple of 32, got shape {ops['x'].shape}")
    if args.op in ("sum", "sum_squares", "max_reduce", "softmax", "rmsnorm", "topk") \
            and (ops["x"].ndim == 0 or ops["x"].shape[-1] == 0):
        raise UsageError(f"{args.op} needs at least one element along the last axis")
    return ops


def compute(op, ops, lanes=8):
    """The golden model's result of ``op`` on the checked operands (an array, or a dict for .npz)."""
    from sim_models import vpu

    x = ops["x"]
    if op in vpu.UNARY:
        return vpu.UNARY[op](x)
    if op in vpu.BINARY:
        return vpu.BINARY[op](x, ops["in2"])
    table = {
        "fma": lambda: vpu.fma(x, ops["in2"], ops["in3"]),
        "scale": lambda: vpu.scale(x, ops["scalar"]),
        "clamp": lambda: vpu.clamp(x, ops["lo"], ops["hi"]),
        "sum": lambda: vpu.sum(x, lanes=lanes),
        "sum_squares": lambda: vpu.sum_squares(x, lanes=lanes),
        "max_reduce": lambda: vpu.max_reduce(x),
        "rmsnorm": lambda: vpu.rmsnorm(x, ops["gain"], ops["eps"], lanes=lanes),
        "softmax": lambda: vpu.softmax(x),
        "swiglu": lambda: vpu.swiglu(x, ops["in2"]),
        "rope": lambda: vpu.rope(x, ops["cos"], ops["sin"]),
        "topk": lambda: dict(zip(("values", "indices"), vpu.topk(x, ops["k"]), strict=True)),
        "to_bf16": lambda: vpu.to_bfloat16(x),
        "from_bf16": lambda: vpu.from_bfloat16(x),
        "to_mx": lambda: dict(zip(("codes", "scales"), vpu.to_mx(x, ops.get("mode", "floor")), strict=True)),
    }
    return table[op]()


def accuracy(op, ops, result):
    """Measured accuracy of a golden result against float64, or None where no reference applies."""
    from sim_models import vpu_reference as ref

    x = ops["x"]
    if op in ref.UNARY_REFERENCES:
        return ref.measure_unary(op, lambda _: result.reshape(-1), x.reshape(-1).view(np.uint32)) | \
            {"bound_ulp": ref.ULP_BOUNDS[op]}
    if op == "softmax":
        return {"max_rel_error": ref.row_relative_error(result, ref.softmax_reference(x)),
                "bound": ref.ROW_REL_BOUND}
    if op == "rmsnorm":
        exact = ref.rmsnorm_reference(x, ops["gain"], ops["eps"])
        return {"max_rel_error": ref.row_relative_error(result, exact), "bound": ref.ROW_REL_BOUND}
    return None


def _save(path, result):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(result, dict):
        if path.suffix != ".npz":
            raise UsageError(f"this operation writes an .npz archive; --out {str(path)!r} must end in .npz")
        np.savez(path, **result)
    else:
        np.save(path, result)


RTL_SLOTS = 4
RTL_ROPE_LENGTH = 256          # VectorUnit's default rope_length
RTL_MAX_K = 8                  # ... and max_k
MAX_ROWS = 4095


def _rtl_op(op):
    """The RTL's :class:`rtl.vpu.layouts.Op` for a command-line operation, if the RTL runs it."""
    from rtl.vpu.layouts import Op
    from rtl.vpu.vector_unit import SUPPORTED

    rtl = Op[op.upper()]
    if rtl not in SUPPORTED:
        built = ", ".join(o.name.lower() for o in SUPPORTED)
        raise UsageError(f"--sim: the vector-unit RTL does not run {op} yet (it runs {built}); "
                         f"drop --sim for the golden model")
    return rtl


def simulate(op, ops, lanes):
    """Run ``op`` on the vector-unit RTL (Verilator); returns ``(result, cycles)`` shaped like
    :func:`compute`'s result."""
    import tempfile

    from rtl.vpu.layouts import REDUCTIONS, Op
    from rtl.vpu.vector_unit import SUPPORTED, VectorUnit
    from verification.runner import BUILD_ROOT, RunFailed, run_cocotb

    rtl_op = _rtl_op(op)
    x = ops["x"]
    n = x.shape[-1] if x.ndim else 1
    rows = x.size // n if n else 0
    if x.ndim == 0 or n == 0:
        raise UsageError("--sim needs at least one element along the last axis")
    if n > 8192 or rows > MAX_ROWS:
        raise UsageError(f"--sim runs rows of at most 8192 elements and at most {MAX_ROWS} rows, "
                         f"got {rows} rows of {n}")
    as_bits = (lambda a: a.astype(np.uint32)) if op == "from_bf16" else (lambda a: a.view(np.uint32))
    job = {"op": np.array(rtl_op.name), "x": as_bits(x).reshape(rows, n),
           "scalar0": np.uint32(0), "scalar1": np.uint32(0)}
    for name in ("in2", "in3"):
        if name in ops:
            job[{"in2": "b", "in3": "c"}[name]] = ops[name].view(np.uint32).reshape(rows, n)
    if op == "scale":
        job["scalar0"] = ops["scalar"].view(np.uint32)
    if op == "clamp":
        job["scalar0"], job["scalar1"] = ops["lo"].view(np.uint32), ops["hi"].view(np.uint32)
    if op == "rmsnorm":
        job["b"] = np.broadcast_to(ops["gain"], x.shape).view(np.uint32).reshape(rows, n)
        job["scalar0"] = ops["eps"].view(np.uint32)
    if op == "rope":
        if n > RTL_ROPE_LENGTH:
            raise UsageError(f"--sim runs rope on rows (heads) of at most {RTL_ROPE_LENGTH} elements, "
                             f"got {n}")
        for name, key in (("cos", "b"), ("sin", "c")):
            table = np.ascontiguousarray(np.broadcast_to(ops[name], x.shape))
            job[key] = table.view(np.uint32).reshape(rows, n)
    if op == "topk":
        if ops["k"] > RTL_MAX_K:
            raise UsageError(f"--sim runs topk with k up to {RTL_MAX_K}, got {ops['k']}")
        job["scalar0"] = np.uint32(ops["k"])
    config = {"lanes": lanes, "slots": RTL_SLOTS, "max_length": 8192,
              "supported": [o.name for o in SUPPORTED]}
    work = BUILD_ROOT / "vpu_cli"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        job_path, out_path = Path(tmp) / "job.npz", Path(tmp) / "out.npz"
        np.savez(job_path, **job)
        try:
            run_cocotb(lambda: VectorUnit(lanes, slots=RTL_SLOTS), toplevel="vpu", config=config,
                       test_module="verification.vpu.tb_run_file", sim="verilator", ports_only=True,
                       extra_env={"POBLANO_VPU_JOB": str(job_path), "POBLANO_VPU_OUT": str(out_path)})
        except RunFailed as exc:
            raise UsageError(f"--sim: the simulation failed: {str(exc).splitlines()[0]}") from None
        with np.load(out_path) as data:
            beats, cycles = data["beats"], int(data["cycles"])
    if rtl_op == Op.TOPK:                   # per row: the values' beats, then the indices'
        k = ops["k"]
        per_row = beats.reshape(rows, 2, -1)[:, :, :k]
        shape = x.shape[:-1] + (k,)
        values = per_row[:, 0].astype(np.uint32).view(np.float32).reshape(shape)
        return {"values": values, "indices": per_row[:, 1].astype(np.int32).reshape(shape)}, cycles
    if rtl_op in REDUCTIONS:
        bits = beats[:, 0].reshape(x.shape[:-1])
    else:
        bits = beats.reshape(rows, -1)[:, :n].reshape(x.shape)
    if op == "to_bf16":
        return bits.astype(np.uint16), cycles
    return bits.astype(np.uint32).view(np.float32), cycles


def _mismatches(result, golden):
    if isinstance(golden, dict):
        return max(_mismatches(result[name], golden[name]) for name in golden)
    got = np.ascontiguousarray(result).view(np.uint8).reshape(result.size, -1)
    want = np.ascontiguousarray(golden).view(np.uint8).reshape(golden.size, -1)
    return int((got != want).any(axis=1).sum())


def run(args):
    ops = _arguments(args)
    ops["mode"] = args.mode
    golden = compute(args.op, ops, args.lanes)
    report = {"op": args.op, "lanes": args.lanes, "input_shape": list(ops["x"].shape)}
    status = 0
    if args.sim:
        result, cycles = simulate(args.op, ops, args.lanes)
        bad = _mismatches(result, golden)
        report.update(engine="rtl", cycles=cycles, mismatches=bad)
        verdict = "bit-exact to the golden model" if not bad else f"{bad} MISMATCHES with the golden model"
        print(f"{args.op}: RTL ({args.lanes} lanes, verilator), {cycles} cycles, {verdict}")
        status = 1 if bad else 0
    else:
        result = golden
        report.update(engine="golden", accuracy=accuracy(args.op, ops, result))
        shape = {k: v.shape for k, v in result.items()} if isinstance(result, dict) else result.shape
        print(f"{args.op}: golden model, result {shape}")
    _save(args.out, result)
    print(f"result -> {args.out}")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(f"report -> {args.report}")
    return status
