"""``poblano kv-trace``: replay a KV-cache operation trace on the RTL (or the golden model).

A trace is JSON Lines, one operation per line (blank lines are skipped)::

    {"op":"open","seq":0}
    {"op":"append","seq":0,"data":"00000000deadbeef"}
    {"op":"read","seq":0,"start":0,"count":4}
    {"op":"fork","src":0,"dst":1}
    {"op":"truncate","seq":0,"length":2}
    {"op":"close","seq":0}
    {"op":"stat"}
    {"op":"inject","seq":0,"pos":3,"bits":[5]}

``data`` is the record as an unsigned integer in hex, most significant digit first, exactly
``ceil(token_bits / 4)`` digits (``token_bits / 4`` for the usual multiples of four); bit 0 is its
least significant bit. ``inject`` flips the listed bits of the stored codeword of record ``pos``:
bits ``0 .. token_bits-1`` are data bits, ``token_bits ..`` the check bits; its errors are those of
``read``. Every id, position and length is a non-negative integer.

The output has one JSON reply per trace line: ``{"status":"ok"}``, plus ``"pos"`` for append,
``"data":[hex, ...]`` (and ``"poisoned":[indices]`` when any record is uncorrectable) for read,
``"free_pages"``, ``"live_seqs"``, ``"ecc_corrected"``, ``"ecc_uncorrectable"`` for stat; an error
is ``{"status":"<code>"}`` (``bad_seq``, ``not_live``, ``live``, ``seq_full``, ``no_space``,
``out_of_range``). The RTL (:class:`rtl.kv.kv_cache.KvCache`) runs on Verilator or Icarus through
cocotb (``verification/kv/tb_kv_trace.py``), one operation at a time; ``--golden`` runs
:class:`sim_models.kv_cache.KvCacheModel` instead. A malformed line is a one-line error naming it.
"""

import json
import math
import tempfile
import time
from pathlib import Path

from poblano.errors import UsageError

NAME = "kv-trace"
HELP = "replay a KV-cache trace (JSON Lines) on the RTL or the golden model; one JSON reply per line"

#: Command-line flag -> KvConfig field.
_PARAMS = {"pages": "pages", "page_tokens": "page_tokens", "token_bits": "token_bits",
           "seqs": "seqs", "max_pages_per_seq": "max_pages_per_seq", "banks": "banks"}

#: Fields of each operation (all non-negative integers except ``data`` and ``bits``).
_FIELDS = {
    "open": ("seq",),
    "append": ("seq", "data"),
    "read": ("seq", "start", "count"),
    "fork": ("src", "dst"),
    "truncate": ("seq", "length"),
    "close": ("seq",),
    "stat": (),
    "inject": ("seq", "pos", "bits"),
}


def add_arguments(parser):
    parser.add_argument("--trace", required=True, metavar="T.jsonl",
                        help="input trace, one operation per line")
    parser.add_argument("--out", required=True, metavar="R.jsonl", help="output, one JSON reply per line")
    parser.add_argument("--sim", default="verilator", metavar="verilator|icarus",
                        help="simulator for the RTL (default verilator)")
    parser.add_argument("--golden", action="store_true",
                        help="run the golden model (sim_models.kv_cache) instead of the RTL")
    defaults = _default_config()
    for flag, field in _PARAMS.items():
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=int, metavar="N",
                            default=getattr(defaults, field),
                            help=f"{field} (default {getattr(defaults, field)})")


def _default_config():
    from sim_models.kv_cache import KvConfig
    return KvConfig()


def make_config(args):
    """The :class:`~sim_models.kv_cache.KvConfig` of the command-line parameters."""
    from sim_models.kv_cache import KvConfig
    try:
        return KvConfig(**{field: getattr(args, flag) for flag, field in _PARAMS.items()})
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad controller parameters: {exc}") from None


def _natural(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_line(text, number, config):
    """One trace line as a golden-model operation (``data`` an int); ``None`` for a blank line.

    Raises :class:`UsageError` naming ``number`` for anything malformed.
    """
    where = f"trace line {number}"
    if not text.strip():
        return None
    try:
        op = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(op, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(op).__name__}")
    name = op.get("op")
    if name not in _FIELDS:
        raise UsageError(f"{where}: unknown op {name!r}; expected one of {', '.join(_FIELDS)}")
    fields = _FIELDS[name]
    missing = [f for f in fields if f not in op]
    if missing:
        raise UsageError(f"{where}: {name} needs {', '.join(repr(f) for f in missing)}")
    extra = sorted(set(op) - set(fields) - {"op"})
    if extra:
        raise UsageError(f"{where}: unexpected field {extra[0]!r} for {name}")
    parsed = {"op": name}
    digits = math.ceil(config.token_bits / 4)
    width = config.token_bits + config.check_bits
    for field in fields:
        value = op[field]
        if field == "data":
            if (not isinstance(value, str) or len(value) != digits
                    or any(ch not in "0123456789abcdefABCDEF" for ch in value)):
                raise UsageError(f"{where}: data must be a string of exactly {digits} hex digits "
                                 f"(token_bits={config.token_bits}), got {value!r}")
            number_value = int(value, 16)
            if number_value >> config.token_bits:
                raise UsageError(f"{where}: data {value!r} does not fit {config.token_bits} bits")
            parsed[field] = number_value
        elif field == "bits":
            if not isinstance(value, list) or not all(_natural(b) and b < width for b in value):
                raise UsageError(f"{where}: bits must be a list of bit indices 0..{width - 1} "
                                 f"(data bits, then check bits), got {value!r}")
            parsed[field] = list(value)
        else:
            if not _natural(value):
                raise UsageError(f"{where}: {field} must be a non-negative integer, got {value!r}")
            parsed[field] = value
    return parsed


def read_trace(path, config):
    """``[(line_number, op), ...]`` of a trace file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"trace file {str(path)!r} not found")
    ops = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, start=1):
            op = parse_line(text, number, config)
            if op is not None:
                ops.append((number, op))
    return ops


def format_reply(reply, config):
    """A golden-model-format reply as the trace output's JSON object."""
    if reply["status"] != "ok":
        return {"status": reply["status"]}
    out = {"status": "ok"}
    if "pos" in reply:
        out["pos"] = reply["pos"]
    if "data" in reply:
        digits = math.ceil(config.token_bits / 4)
        out["data"] = [f"{value:0{digits}x}" for value in reply["data"]]
        if reply.get("poisoned"):
            out["poisoned"] = list(reply["poisoned"])
    for key in ("free_pages", "live_seqs", "ecc_corrected", "ecc_uncorrectable"):
        if key in reply:
            out[key] = reply[key]
    return out


def run_golden(ops, config):
    from sim_models.kv_cache import KvCacheModel
    model = KvCacheModel(config)
    return [model.apply(op) for op in ops]


def run_rtl(ops, config, sim):
    """Replay ``ops`` on the RTL; returns ``(replies, cycles)``."""
    from rtl.kv.kv_cache import KvCache
    from sim_models.kv_cache import KvConfig
    from verification.runner import BUILD_ROOT, RunFailed, run_cocotb

    # Only the parameters that differ from the defaults: the build directory is then the one the
    # regression and the benchmark use for the same configuration (reused while it is unchanged).
    defaults = KvConfig().as_dict()
    params = {k: v for k, v in config.as_dict().items() if v != defaults[k]}
    work = BUILD_ROOT / "kv_trace"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        in_path, out_path = Path(tmp) / "ops.json", Path(tmp) / "replies.json"
        in_path.write_text(json.dumps(ops))
        try:
            run_cocotb(lambda: KvCache(**params), toplevel="kv_cache", config=params,
                       test_module="verification.kv.tb_kv_trace", sim=sim,
                       extra_env={"POBLANO_KV_TRACE_IN": str(in_path),
                                  "POBLANO_KV_TRACE_OUT": str(out_path)})
        except RunFailed as exc:
            raise RuntimeError(str(exc)) from None
        result = json.loads(out_path.read_text())
    return result["replies"], result["cycles"]


def run(args):
    from verification.runner import SIMULATORS

    if args.sim not in SIMULATORS:
        raise UsageError(f"unknown simulator {args.sim!r}; choose {' or '.join(SIMULATORS)}")
    config = make_config(args)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"output directory {str(out.parent)!r} does not exist")
    numbered = read_trace(args.trace, config)
    ops = [op for _, op in numbered]
    start = time.perf_counter()
    if args.golden:
        replies, engine = run_golden(ops, config), "golden model"
    else:
        from poblano import toolchain
        if args.sim == "icarus" and not toolchain.icarus_available():
            raise UsageError("Icarus Verilog (iverilog, vvp) is not installed; use --sim verilator")
        try:
            replies, cycles = run_rtl(ops, config, args.sim) if ops else ([], 0)
        except RuntimeError as exc:
            print(f"poblano kv-trace: RTL run failed: {exc}")
            return 1
        engine = f"RTL ({args.sim}, {cycles} cycles)"
    seconds = time.perf_counter() - start
    with open(out, "w") as f:
        for reply in replies:
            f.write(json.dumps(format_reply(reply, config), separators=(",", ":")) + "\n")
    errors = sum(1 for r in replies if r["status"] != "ok")
    print(f"{len(ops)} operations ({errors} error replies) on the {engine} -> {out} "
          f"in {seconds:.1f} s")
    return 0
