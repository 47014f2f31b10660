"""Vector-unit benchmark: cycles of every operation, the accuracy record, and the FPGA build.

Figures (simulation cycle counts and nextpnr's report, never wall-clock asserts):

* cycles of every operation the FPGA build runs (4 lanes, 4 slots), one row of n = 64, 1024 and
  8192 elements with random operands, from the command's acceptance to its last result beat, no idle
  cycles or stalls; every result checked bit for bit against the golden model
  (``verification/vpu/bench_vector_unit.py``), against the goals: element-wise ``lanes`` results per
  cycle, reductions at most ``n / lanes + 32`` cycles, rmsnorm and softmax ``2n / lanes + 64``;
* the accuracy of the golden model against float64 (``benchmarks/vpu_accuracy.py``, quoted from its
  JSON record);
* the ULX3S-85F builds: the 2-lane unit (``poblano fpga --top vpu_2lanes``, built here) and the last
  4-lane build (``poblano fpga --top vpu``, recorded from its last report: it fills 94% of the 85F and
  takes over half an hour): LUT4, FF, DP16KD, MULT18, Fmax (goal 100 MHz).

Run: ``.venv/bin/python -m benchmarks.vpu`` (or ``make bench``); writes ``benchmarks/results/vpu.md``
and ``.json``. ``--quick`` runs n = 64 only and records nothing; ``--no-fpga`` reuses the last
FPGA reports; ``--fpga-only`` runs no simulation and records the last FPGA reports and the last
accuracy record beside the recorded cycles.
"""

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from poblano.flows import fpga

RESULTS = Path(__file__).resolve().parent / "results"
LENGTHS = (64, 1024, 8192)
LANES, SLOTS = 4, 4          # the FPGA build's configuration (poblano fpga --top vpu)
FPGA_2LANES = "vpu_2lanes"   # the 2-lane build, recorded from its last report (never rebuilt here)


def run_simulation(lengths, sim="verilator", ops=None):
    from rtl.vpu.vector_unit import SUPPORTED, VectorUnit
    from verification.runner import BUILD_ROOT, run_cocotb

    work = BUILD_ROOT / "vpu_bench"
    work.mkdir(parents=True, exist_ok=True)
    config = {"lanes": LANES, "slots": SLOTS, "max_length": 8192, "supported": [op.name for op in SUPPORTED]}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        out = Path(tmp) / "bench.json"
        run_cocotb(lambda: VectorUnit(LANES, slots=SLOTS), toplevel="vpu", config=config,
                   test_module="verification.vpu.bench_vector_unit", sim=sim, seed=2026, ports_only=True,
                   extra_env={"POBLANO_VPU_BENCH_OUT": str(out),
                              "POBLANO_VPU_BENCH_LENGTHS": ",".join(map(str, lengths)),
                              **({"POBLANO_VPU_BENCH_OPS": ",".join(ops)} if ops else {})})
        cycles = json.loads(out.read_text())
    return {"cycles": cycles, "lengths": list(lengths), "simulator": sim,
            "wall_seconds": round(time.monotonic() - start, 1)}


def goal(op, n):
    """The issue's cycle goal for ``op`` over ``n`` elements (None where it states none)."""
    from rtl.vpu.layouts import REDUCTIONS, Op

    if Op[op.upper()] in REDUCTIONS:
        return n / LANES + 32
    if Op[op.upper()] in (Op.RMSNORM, Op.SOFTMAX):
        return 2 * n / LANES + 64
    return None                # element-wise: a rate goal (lanes results per cycle, see steady_rate)


def goal_text(op):
    from rtl.vpu.layouts import ELEMENTWISE, REDUCTIONS, Op

    if Op[op.upper()] in REDUCTIONS:
        return "n/lanes + 32"
    if Op[op.upper()] in (Op.RMSNORM, Op.SOFTMAX):
        return "2n/lanes + 64"
    return f"{LANES} per cycle" if Op[op.upper()] in ELEMENTWISE else "none stated"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 64 only, no FPGA, nothing recorded")
    parser.add_argument("--no-fpga", action="store_true", help="reuse the last FPGA report")
    parser.add_argument("--fpga-only", action="store_true",
                        help="no simulation: record the last FPGA reports beside the recorded figures")
    parser.add_argument("--ops", metavar="OP,OP", help="measure only these operations and update their "
                        "rows of the recorded figures (the others are kept)")
    args = parser.parse_args(argv)
    if args.fpga_only:
        return record_fpga_only()
    ops = [name.strip().lower() for name in args.ops.split(",")] if args.ops else None
    stats = run_simulation((64,) if args.quick else LENGTHS, ops=ops)
    if ops and not args.quick and (RESULTS / "vpu.json").exists():
        recorded = json.loads((RESULTS / "vpu.json").read_text())
        stats["cycles"] = {**recorded["cycles"], **stats["cycles"]}
        stats["wall_seconds"] = recorded["wall_seconds"]
    stats["host"] = f"{platform.machine()}, Python {platform.python_version()}"
    misses = []
    print(f"vpu benchmark ({stats['simulator']}, {LANES} lanes, {SLOTS} slots):")
    for op, by_n in stats["cycles"].items():
        for n, cycles in by_n.items():
            target = goal(op, int(n))
            verdict = "" if target is None else (" ok" if cycles <= target else f" MISSES {target:.0f}")
            if target is not None and cycles > target:
                misses.append(f"{op} n={n}")
            print(f"  {op:12s} n={int(n):5d}: {cycles:6d} cycles{verdict}")
    if args.quick:
        return 0
    accuracy = RESULTS / "vpu_accuracy.json"
    stats["accuracy"] = json.loads(accuracy.read_text()) if accuracy.exists() else None
    stats["fpga"] = fpga.report_for("vpu", rebuild=False)
    stats["fpga_2lanes"] = fpga.report_for(FPGA_2LANES, rebuild=not args.no_fpga)
    record(stats)
    if misses:
        print(f"  cycle goals missed (recorded as 'over'): {', '.join(misses)}")
    return 0


def record(stats):
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vpu.json").write_text(json.dumps(stats, indent=2) + "\n")
    (RESULTS / "vpu.md").write_text(markdown(stats))
    print(f"  recorded in {RESULTS / 'vpu.md'}")


def record_fpga_only():
    """The recorded figures with the FPGA part replaced by the last reports and the accuracy by the
    last ``benchmarks.vpu_accuracy`` record (no simulation)."""
    recorded = RESULTS / "vpu.json"
    if not recorded.exists():
        print(f"no recorded figures in {recorded}: run the whole benchmark first")
        return 1
    stats = json.loads(recorded.read_text())
    stats["fpga"] = fpga.report_for("vpu", rebuild=False)
    stats["fpga_2lanes"] = fpga.report_for(FPGA_2LANES, rebuild=False)
    accuracy = RESULTS / "vpu_accuracy.json"
    if accuracy.exists():
        stats["accuracy"] = json.loads(accuracy.read_text())
    record(stats)
    return 0


def steady_rate(by_n):
    """Results per cycle between the two longest runs (the latency cancels)."""
    lengths = sorted(int(n) for n in by_n)
    if len(lengths) < 2:
        return None
    lo, hi = lengths[-2], lengths[-1]
    return (hi - lo) / (by_n[str(hi)] - by_n[str(lo)])


def markdown(s):
    lines = [
        "# Vector-unit benchmark",
        "",
        f"`rtl.vpu.vector_unit.VectorUnit`, {LANES} lanes and {SLOTS} slots (the FPGA build), DSP products.",
        "Reproduce: `.venv/bin/python -m benchmarks.vpu` (or `make bench`); accuracy:",
        "`.venv/bin/python -m benchmarks.vpu_accuracy` and `... --exhaustive exp,reciprocal`.",
        "",
        "## Cycles per operation",
        "",
        f"One row of n elements, command accepted to last result beat, in {s['simulator']} through cocotb",
        "(`verification/vpu/bench_vector_unit.py`), every result bit-exact to `sim_models.vpu`.",
        "Element-wise goal: `lanes` results per cycle (the steady rate column, from the two longest",
        "runs); reductions: at most `n/lanes + 32` cycles; rmsnorm and softmax: at most `2n/lanes + 64`.",
        "rope's rows are one attention head (at most `rope_length`, 256 by default): n/a beyond;",
        "topk with k = 8 (`max_k`).",
        "",
        "| operation | " + " | ".join(f"n = {n}" for n in s["lengths"]) + " | steady rate | goal |",
        "|---|" + "---|" * (len(s["lengths"]) + 2),
    ]
    for op, by_n in s["cycles"].items():
        rate = steady_rate(by_n)
        cells = []
        for n in s["lengths"]:
            if str(n) not in by_n:
                cells.append("n/a")
                continue
            cycles = by_n[str(n)]
            target = goal(op, n)
            verdict = "ok" if target is None or cycles <= target else "over"
            cells.append(f"{cycles}" if target is None else f"{cycles} ({verdict})")
        rate_text = "" if rate is None else f"{rate:.2f} per cycle"
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {rate_text} | {goal_text(op)} |")
    lines += ["", f"Simulation wall time: {s['wall_seconds']} s ({s['host']}).", ""]
    lines += _accuracy_markdown(s.get("accuracy"))
    lines += ["## FPGA (ULX3S-85F)", ""]
    report = s.get("fpga")
    if report:
        lines += _fpga_markdown("vpu", f"{LANES} lanes", report)
    else:
        lines += ["No FPGA report (run `poblano fpga --top vpu`).", ""]
    report = s.get("fpga_2lanes")
    if report:
        lines += _fpga_markdown(FPGA_2LANES, "2 lanes", report)
    return "\n".join(lines)


def _fpga_markdown(name, what, report):
    verdict = "met" if report["timing_met"] else "NOT met"
    return [f"`poblano fpga --top {name}` ({what}; Yosys, nextpnr-ecp5 seed {report['seed']}, constraint "
            f"{report['target_mhz']:.0f} MHz, {verdict}; synthesis, place and route and bitstream in "
            f"{report['build_seconds']:.0f} s):", "", *fpga.resource_table(report), ""]


def _accuracy_markdown(acc):
    if not acc:
        return ["No accuracy record (run `python -m benchmarks.vpu_accuracy`).", ""]
    lines = ["## Accuracy of the golden model (float64 reference)", "",
             "Largest error where the bound applies (exact result a normal binary32; sigmoid and silu",
             "also at least 2**-100), over 10**7 inputs per function (half uniform bit patterns, half",
             "uniform in [-128, 128], plus every special value):", "",
             "| function | max error (ulp) | bound | in-scope inputs | worst input |",
             "|---|---|---|---|---|"]
    for name, r in sorted(acc.get("unary", {}).items()):
        lines.append(f"| {name} | {r['max_ulp']:.4f} | {r['bound_ulp']} | {r['in_scope']} | "
                     f"`{r['worst_input']}` |")
    lines += ["", "Every one of the 2**32 inputs (`--exhaustive`):", ""]
    ex = acc.get("exhaustive", {})
    if ex:
        lines += ["| function | max error (ulp) | bound | in-scope inputs | non-canonical NaNs | run time |",
                  "|---|---|---|---|---|---|"]
        for name, r in sorted(ex.items()):
            note = f" ({r['note']})" if r.get("note") else ""
            lines.append(f"| {name} | {r['max_ulp']:.4f} | {r['bound_ulp']} | {r['in_scope']} | "
                         f"{r['bad_nan']} | {r['seconds']:.0f} s{note} |")
    else:
        lines.append("(not run yet)")
    lines += ["", "softmax and rmsnorm (eps 1e-6), largest relative error over outputs >= 1e-30 "
              "(bound 1e-5):",
              "", "| rows | softmax | rmsnorm |", "|---|---|---|"]
    for name, r in acc.get("rows", {}).items():
        lines.append(f"| {name} ({r['rows']} rows) | {r['softmax']:.3e} | {r['rmsnorm']:.3e} |")
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
