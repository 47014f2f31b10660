"""``poblano quantize``: quantize a float array to MX with the golden model or the RTL quantizer.

Blocks of 32 run along the last axis. The result is an ``.npz`` holding ``codes`` (``uint8``, the
input's shape, one element code per element), ``scales`` (``uint8``, the last axis divided by 32, one
E8M0 code per block), exactly as :func:`sim_models.mx.quantize` returns them, and ``format`` (a 0-d
string array naming the element format: ``e2m1``, the default, ``e2m3``, ``e3m2``, ``e4m3`` or
``e5m2``), which ``poblano gemm`` reads back.

Input dtypes: float32 as is; float16 widened (exact); float64 rounded to float32 first (as the golden
model does); bfloat16, which NumPy writes to ``.npy`` as a 2-byte void type, is read back as bfloat16.

``--rtl`` streams the blocks through :class:`rtl.mx.quantizer.MXQuantizer` on Verilator or Icarus
(``verification/mx/tb_quantize_file.py``), writes the hardware's result and compares it bit for bit
with the golden model; a mismatch is reported and the exit status is 1. bfloat16 input runs on a BF16
instance, everything else on an FP32 one. The built quantizer supports :data:`RTL_FORMATS` (every
format, the ``MXQuantizer`` default); ``--rtl`` with a format outside that set is a usage error
(exit 2).
"""

import tempfile
import time
from pathlib import Path

import numpy as np

from poblano.errors import UsageError

NAME = "quantize"
HELP = "quantize a float .npy to MX codes and scales (.npz), on the golden model or the RTL"

_MODES = ("floor", "rceil")
RTL_FORMATS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2")
"""Element formats of the quantizer that ``--rtl`` builds (``MXQuantizer(formats=RTL_FORMATS)``)."""
_FLOAT_KINDS = ("float16", "float32", "float64", "bfloat16")


def add_arguments(parser):
    parser.add_argument("--in", dest="input", required=True, metavar="X.npy",
                        help="input array (.npy), floating point, last axis a multiple of 32")
    parser.add_argument("--out", required=True, metavar="X.npz",
                        help="output file: codes (uint8, same shape) and scales (uint8, last axis / 32)")
    parser.add_argument("--mode", default="floor", metavar="floor|rceil",
                        help="shared-exponent rule: floor (OCP MX v1.0, default) or rceil")
    parser.add_argument("--format", default="e2m1", metavar="e2m1|e2m3|e3m2|e4m3|e5m2",
                        help="element format (OCP MX v1.0): e2m1 (MXFP4, default), e2m3 or e3m2 "
                             "(MXFP6), e4m3 or e5m2 (MXFP8)")
    parser.add_argument("--rtl", action="store_true",
                        help="run the hardware quantizer (cocotb) and check it against the golden model")
    parser.add_argument("--sim", default="verilator", metavar="verilator|icarus",
                        help="simulator for --rtl (default verilator)")


def load_input(path):
    """Load and check the input array; returns it as float32 or bfloat16 (what the RTL takes)."""
    import ml_dtypes

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"input file {str(path)!r} not found")
    try:
        x = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"cannot read {str(path)!r} as a .npy array ({str(exc).splitlines()[0]})") \
            from None
    if not isinstance(x, np.ndarray):
        raise UsageError(f"{str(path)!r} is an .npz archive; give one array as .npy")
    if x.dtype.kind == "V" and x.dtype.itemsize == 2 and x.dtype.names is None:
        x = x.view(ml_dtypes.bfloat16)          # how np.save stores ml_dtypes.bfloat16
    if x.dtype.name not in _FLOAT_KINDS:
        raise UsageError(f"input must be floating point ({', '.join(_FLOAT_KINDS)}), got dtype {x.dtype}")
    if x.ndim == 0:
        raise UsageError("input must have at least one dimension (blocks run along the last axis)")
    if x.shape[-1] == 0 or x.shape[-1] % 32:
        raise UsageError(f"last axis has length {x.shape[-1]}, which is not a positive multiple of 32")
    if x.dtype == np.float64:
        with np.errstate(over="ignore"):          # overflow to ±Inf is the model's documented result
            x = x.astype(np.float32)
    elif x.dtype == np.float16:
        x = x.astype(np.float32)
    return np.ascontiguousarray(x)


def quantize_rtl(x, mode, sim, format="e2m1"):
    """Quantize ``x`` (float32 or bfloat16, last axis a multiple of 32) to ``format`` on the RTL.

    Returns ``(codes, scales, cycles)`` shaped like :func:`sim_models.mx.quantize`'s result.
    """
    import ml_dtypes

    from rtl.mx.quantizer import MXQuantizer
    from verification.runner import BUILD_ROOT, RunFailed, run_cocotb

    input_format = "bf16" if x.dtype == ml_dtypes.bfloat16 else "fp32"
    raw = x.view(np.uint16 if input_format == "bf16" else np.uint32).reshape(-1, 32)
    codes_shape, scales_shape = x.shape, x.shape[:-1] + (x.shape[-1] // 32,)
    if raw.shape[0] == 0:
        return np.zeros(codes_shape, np.uint8), np.zeros(scales_shape, np.uint8), 0
    work = BUILD_ROOT / "quantize"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        in_path, out_path = Path(tmp) / "blocks.npy", Path(tmp) / "result.npz"
        np.save(in_path, raw)
        try:
            run_cocotb(lambda: MXQuantizer(input_format, RTL_FORMATS), toplevel="mx_quantizer",
                       config={"input_format": input_format, "formats": list(RTL_FORMATS)},
                       test_module="verification.mx.tb_quantize_file", sim=sim,
                       extra_env={"POBLANO_QUANTIZE_IN": str(in_path), "POBLANO_QUANTIZE_OUT": str(out_path),
                                  "POBLANO_QUANTIZE_MODE": mode, "POBLANO_QUANTIZE_FORMAT": format})
        except RunFailed as exc:
            raise RuntimeError(str(exc)) from None
        with np.load(out_path) as result:
            codes, scales, cycles = result["codes"], result["scales"], int(result["cycles"])
    return codes.reshape(codes_shape), scales.reshape(scales_shape), cycles


def run(args):
    from sim_models import mx

    if args.mode not in _MODES:
        raise UsageError(f"unknown mode {args.mode!r}; choose floor or rceil")
    if args.format not in mx.FORMATS:
        raise UsageError(f"unknown element format {args.format!r}; choose "
                         f"{', '.join(mx.FORMATS[:-1])} or {mx.FORMATS[-1]}")
    if args.rtl and args.format not in RTL_FORMATS:
        raise UsageError(f"the built hardware quantizer supports {', '.join(RTL_FORMATS)}, not "
                         f"{args.format}; drop --rtl to quantize to {args.format} on the golden model")
    from verification.runner import SIMULATORS
    if args.sim not in SIMULATORS:
        raise UsageError(f"unknown simulator {args.sim!r}; choose {' or '.join(SIMULATORS)}")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"output directory {str(out.parent)!r} does not exist")
    x = load_input(args.input)
    blocks = x.size // 32

    start = time.perf_counter()
    codes, scales = mx.quantize(x, args.mode, args.format)
    golden_seconds = time.perf_counter() - start
    status = 0
    if args.rtl:
        from poblano import toolchain
        if args.sim == "icarus" and not toolchain.icarus_available():
            raise UsageError("Icarus Verilog (iverilog, vvp) is not installed; use --sim verilator")
        start = time.perf_counter()
        try:
            rtl_codes, rtl_scales, cycles = quantize_rtl(x, args.mode, args.sim, args.format)
        except RuntimeError as exc:
            print(f"poblano quantize: RTL run failed: {exc}")
            return 1
        seconds = time.perf_counter() - start
        bad_blocks = np.flatnonzero((rtl_scales.reshape(-1) != scales.reshape(-1))
                                    | (rtl_codes.reshape(-1, 32) != codes.reshape(-1, 32)).any(axis=1))
        print(f"RTL ({args.sim}): {blocks} blocks in {cycles} cycles "
              f"({blocks / max(cycles, 1):.2f} blocks/cycle), {seconds:.1f} s")
        if bad_blocks.size:
            first = int(bad_blocks[0])
            print(f"MISMATCH: {bad_blocks.size} of {blocks} blocks differ from the golden model; first is "
                  f"block {first}: scale {int(rtl_scales.reshape(-1)[first]):#04x} vs "
                  f"{int(scales.reshape(-1)[first]):#04x}, codes {rtl_codes.reshape(-1, 32)[first].tolist()} "
                  f"vs {codes.reshape(-1, 32)[first].tolist()}")
            status = 1
        else:
            print("RTL matches the golden model bit for bit")
        codes, scales = rtl_codes, rtl_scales
    with open(out, "wb") as f:
        np.savez(f, codes=codes, scales=scales, format=np.array(args.format))
    nan_blocks = int(np.count_nonzero(scales == 0xFF))
    finite = scales[scales != 0xFF]
    scale_text = (f"scales 2^{int(finite.min()) - 127}..2^{int(finite.max()) - 127}" if finite.size
                  else "no finite blocks")
    print(f"quantized {x.dtype} {x.shape} to {args.format} ({blocks} blocks, {args.mode}) -> {out}: "
          f"{scale_text}, {nan_blocks} NaN/Inf block(s); golden model {golden_seconds * 1e3:.1f} ms")
    return status
