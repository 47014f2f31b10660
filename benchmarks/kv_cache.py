"""KV-cache controller benchmark: read bandwidth during appends, command latency, FPGA figures.

Figures (from simulation cycle counts and nextpnr's report, never wall-clock asserts), for the
default configuration (64 pages x 16 records x 64 bits, 16 sequences, 4 banks, (72,64) SECDED):

* sustained read bandwidth: eight whole-sequence reads of a 256-record sequence back to back
  while three other sequences are appended, in records per cycle (goal at least 0.95);
* latency of every command and variant, in cycles from acceptance to the first cycle the reply is
  valid (``verification/kv/bench_kv_cache.py`` states the convention);
* a long random trace (both ports, random stalls, every operation and error) checked against the
  golden model: its length and coverage (the regression testbench ``verification/kv/tb_kv_cache.py``
  runs first on the same build: the default configuration on Verilator, which ``make test`` leaves
  to Icarus);
* the ULX3S-85F build (``poblano fpga --top kv_cache``): LUT4, FF, DP16KD, Fmax (goal 100 MHz).

Run: ``.venv/bin/python -m benchmarks.kv_cache`` (or ``make bench``); writes
``benchmarks/results/kv_cache.md`` and ``.json``. ``--quick`` skips the long trace and the FPGA
build and records nothing; ``--no-fpga`` reuses the last ``build/fpga/kv_cache/report.json``.
"""

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from poblano.flows import fpga

RESULTS = Path(__file__).resolve().parent / "results"


#: The small configuration of the regression (tests/rtl/kv/test_kv_cache_cocotb.py): its pool of
#: eight pages fills and drains many times in a long trace (no_space, seq_full).
SMALL = dict(pages=8, page_tokens=4, token_bits=16, seqs=4, max_pages_per_seq=4, banks=2)


def _bench(sim, params, testcase, trace_commands, seed):
    from rtl.kv.kv_cache import KvCache
    from verification.runner import BUILD_ROOT, run_cocotb

    work = BUILD_ROOT / "kv_bench"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        out = Path(tmp) / "bench.json"
        run_cocotb(lambda: KvCache(**params), toplevel="kv_cache", config=params,
                   test_module="verification.kv.bench_kv_cache", sim=sim,
                   testcase=testcase, seed=seed,
                   extra_env={"POBLANO_KV_BENCH_OUT": str(out),
                              "POBLANO_KV_BENCH_TRACE": str(trace_commands)})
        return json.loads(out.read_text())


def run_simulation(sim, trace_commands):
    from rtl.kv.kv_cache import KvCache
    from verification.runner import run_cocotb

    start = time.monotonic()
    # The full regression testbench on the default configuration (too slow to build for make test
    # on Verilator; see tests/rtl/kv/test_kv_cache_cocotb.py), sharing the benchmark's build.
    run_cocotb(lambda: KvCache(), toplevel="kv_cache", config={},
               test_module="verification.kv.tb_kv_cache", sim=sim)
    regression_seconds = round(time.monotonic() - start, 1)
    start = time.monotonic()
    tests = ["read_bandwidth", "command_latency"] + (["long_random_trace"] if trace_commands else [])
    stats = _bench(sim, {}, tests, trace_commands, 2026)
    if trace_commands:
        small = _bench(sim, SMALL, ["long_random_trace"], trace_commands, 2027)
        stats["random_trace_small"] = small["random_trace"]
    stats["wall_seconds"] = round(time.monotonic() - start, 1)
    stats["simulator"] = sim
    stats["regression_seconds"] = regression_seconds
    return stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="no long trace, no FPGA, nothing recorded")
    parser.add_argument("--no-fpga", action="store_true", help="reuse the last FPGA report")
    parser.add_argument("--trace", type=int, default=20000,
                        help="commands of each long random trace")
    parser.add_argument("--sim", default="verilator", choices=("verilator", "icarus"))
    args = parser.parse_args(argv)
    stats = run_simulation(args.sim, 0 if args.quick else args.trace)
    stats["host"] = f"{platform.machine()}, Python {platform.python_version()}"
    bw = stats["bandwidth"]
    print(f"kv_cache benchmark ({args.sim}):")
    print(f"  read bandwidth during appends: {bw['records_per_cycle']:.4f} records/cycle "
          f"({bw['records']} records in {bw['cycles']} cycles, {bw['appends_committed_meanwhile']} "
          f"appends committed meanwhile)")
    for name, cycles in stats["latency"].items():
        print(f"  latency {name:45s} {cycles:3d} cycles")
    for key in ("random_trace", "random_trace_small"):
        if key in stats:
            t = stats[key]
            print(f"  {key}: {t['commands']} commands, {t['reads']} reads, {t['cycles']} cycles, "
                  f"phase changes {t['phase_changes']}, all replies equal to the golden model")
    ok = bw["records_per_cycle"] >= 0.95
    if args.quick:
        return 0 if ok else 1
    report = fpga.report_for("kv_cache", rebuild=not args.no_fpga)
    stats["fpga"] = report
    if report:
        print(f"  FPGA: Fmax {report['fmax_mhz']:.1f} MHz, LUT4 {report['lut4']['used']}, "
              f"FF {report['ff']['used']}, DP16KD {report['bram_dp16kd']['used']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kv_cache.json").write_text(json.dumps(stats, indent=2) + "\n")
    (RESULTS / "kv_cache.md").write_text(_markdown(stats))
    print(f"  recorded in {RESULTS / 'kv_cache.md'}")
    return 0 if ok else 1


def _markdown(s):
    bw = s["bandwidth"]
    lines = [
        "# KV-cache controller benchmark",
        "",
        "Default configuration of `rtl.kv.kv_cache.KvCache`: 64 pages x 16 records x 64 bits, 16",
        "sequences of up to 16 pages, 4 banks, (72,64) Hsiao SECDED. Simulated in "
        f"{s['simulator']} through cocotb",
        "(`verification/kv/bench_kv_cache.py`), every reply checked against `sim_models.kv_cache`.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.kv_cache` (or `make bench`).",
        "",
        "## Read bandwidth during concurrent appends",
        "",
        "| figure | value |",
        "|---|---|",
        f"| reads (whole 256-record sequence, back to back) | {bw['reads']} |",
        f"| records delivered | {bw['records']} |",
        f"| cycles, first record to last | {bw['cycles']} |",
        f"| **records per cycle** (goal >= 0.95) | **{bw['records_per_cycle']:.4f}** "
        f"({100 * bw['records_per_cycle']:.2f}%) |",
        f"| appends to three other sequences committed meanwhile | "
        f"{bw['appends_committed_meanwhile']} ({bw['append_rate']:.3f} per cycle) |",
        "",
        "## Command latency",
        "",
        "Cycles from the cycle a request is accepted (`valid & ready`) to the first cycle its reply",
        "(for a read, its first record) is valid; one operation at a time, no stalls.",
        "",
        "| operation | cycles |",
        "|---|---|",
    ]
    lines += [f"| {name} | {cycles} |" for name, cycles in s["latency"].items()]
    for key, title in (("random_trace", "default configuration"),
                       ("random_trace_small", "small configuration: " + ", ".join(
                           f"{k}={v}" for k, v in SMALL.items()))):
        if key not in s:
            continue
        t = s[key]
        ev = t["events"]
        statuses = sorted(k.split(":", 1)[1] for k in ev if k.startswith("status:"))
        lines += [
            "",
            f"## Long random trace, {title}",
            "",
            f"{t['commands']} commands and {t['reads']} reads on both ports with random idle and "
            f"stall cycles, {t['cycles']} cycles, every reply equal to the golden model's and the",
            f"invariant checked after every command (COCOTB_RANDOM_SEED={t['seed']}). "
            f"Copy-on-writes: {ev.get('copy_on_write', 0)}; pages allocated {ev.get('new_page', 0)}, "
            f"freed {ev.get('page_freed', 0)}; pool phase changes (full <-> drained): "
            f"{t['phase_changes']}; reads racing a command on their sequence: {t['races']}.",
            "",
            "Operation:status pairs reached: "
            + ", ".join(f"`{x}` ({ev['status:' + x]})" for x in statuses) + ".",
        ]
    f = s.get("fpga")
    lines += ["", "## ULX3S-85F (ECP5 LFE5U-85F)", ""]
    if f:
        lines += [
            "`poblano fpga --top kv_cache` (Yosys, nextpnr-ecp5 seed "
            f"{f['seed']}, constraint {f['target_mhz']:.0f} MHz):",
            "",
            *fpga.resource_table(f),
        ]
    else:
        lines += ["No FPGA report (run `poblano fpga --top kv_cache`)."]
    lines += ["", "The regression testbench `verification/kv/tb_kv_cache.py` (directed semantics, random",
              f"trace, ECC, throughput) passed on this build first ({s['regression_seconds']} s).", "",
              f"Host: {s['host']}; simulation wall time {s['wall_seconds']} s (not a figure of merit).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
