"""MAC-array benchmark: a 64 x 64 x 1024 MXFP4 GEMM on the 4 x 4 array, in Verilator.

Figures (from simulation cycle counts, never wall-clock asserts):

* cycles from the first operand accepted to the last result delivered, against the ideal
  ``M * N * K / (R * C * 32) = 8192``; the goal is within 1.05x;
* MAC utilization (useful MACs / (cycles * peak MACs per cycle));
* Verilator simulation speed in simulated cycles per second (cocotb drivers included);
* bit-exactness of every output against ``sim_models.mx.matmul``;
* the ULX3S-85F builds of the 4 x 4 array and the quantizers, E2M1-only and all-formats
  (``poblano fpga --top mx_mac_array --top mx_quantizer --top mx_quantizer_all_formats``): LUT4, FF,
  MULT18, DP16KD, Fmax (goal 100 MHz) and LUT4 per MAC lane (goal at most 40; a lane is one of the
  512 element multipliers with its share of the adder tree and accumulator).

It also records an accuracy table (golden model only, seconds): the relative Frobenius error
against float64 of quantize-then-GEMM (``sim_models.mx.quantize`` of both operands along K, then
``sim_models.mx.matmul``) for each element-format pair, on Gaussian activations and on activations
with 1% outliers 100x larger, under both scale modes.

Run: ``.venv/bin/python -m benchmarks.mac_array`` (or ``make bench``); writes
``benchmarks/results/mac_array.md`` and ``.json``. ``--quick`` runs a 16 x 64 x 256 GEMM instead and
records nothing; ``--no-fpga`` reuses the last ``build/fpga/<block>/report.json`` files;
``--accuracy-only`` recomputes only the accuracy table and keeps the recorded simulation and FPGA
figures of ``mac_array.json`` as they are (an FPGA block with no recorded figures takes its last
``build/fpga/<block>/report.json``, if there is one; nothing is built).
"""

import argparse
import json
import platform
import sys
import textwrap
from pathlib import Path

import numpy as np

from poblano.commands import gemm
from poblano.flows import fpga
from sim_models import mx

RESULTS = Path(__file__).resolve().parent / "results"
FPGA_BLOCKS = ("mx_mac_array", "mx_quantizer", "mx_quantizer_all_formats")
LANES = 4 * 4 * 32

ACCURACY_SHAPE = (64, 1024, 64)           # M, K, N
ACCURACY_SEED = 2026
ACCURACY_PAIRS = (                         # (name, weight format, activation format)
    ("W4A4", "e2m1", "e2m1"),
    ("W4A6 (e2m3)", "e2m1", "e2m3"),
    ("W4A6 (e3m2)", "e2m1", "e3m2"),
    ("W4A8 (e4m3)", "e2m1", "e4m3"),
    ("W4A8 (e5m2)", "e2m1", "e5m2"),
    ("W8A8 (e4m3)", "e4m3", "e4m3"),
)
ACCURACY_INPUTS = ("gaussian", "outliers")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small GEMM, results not recorded")
    parser.add_argument("--sim", default="verilator", choices=("verilator", "icarus"))
    parser.add_argument("--no-fpga", action="store_true", help="reuse the last FPGA reports")
    parser.add_argument("--accuracy-only", action="store_true",
                        help="recompute only the accuracy table (golden model, seconds); keep the "
                             "recorded simulation and FPGA figures")
    args = parser.parse_args(argv)
    if args.accuracy_only:
        return _record_accuracy_only()
    m, n, k = (16, 64, 256) if args.quick else (64, 64, 1024)
    rng = np.random.default_rng(2026)
    a_codes, a_scales = mx.quantize(rng.standard_normal((m, k)).astype(np.float32))
    bt_codes, bt_scales = mx.quantize(rng.standard_normal((n, k)).astype(np.float32))
    b_codes, b_scales = bt_codes.T.copy(), bt_scales.T.copy()
    result, stats = gemm.run_on_rtl(a_codes, a_scales, b_codes, b_scales, None, rows=4, cols=4,
                                    interleave=8, products="hard", sim=args.sim)
    want = mx.matmul(a_codes, a_scales, b_codes, b_scales)
    stats["bit_exact"] = bool(np.array_equal(result.view(np.uint32), want.view(np.uint32)))
    stats["host"] = f"{platform.machine()}, Python {platform.python_version()}"
    print(f"mac_array benchmark ({m}x{n}x{k}):")
    gemm.print_stats(stats)
    print(f"  bit-exact against sim_models.mx.matmul: {stats['bit_exact']}")
    if args.quick:
        return 0 if stats["bit_exact"] else 1
    stats["fpga"] = {name: fpga.report_for(name, rebuild=not args.no_fpga) for name in FPGA_BLOCKS}
    stats["accuracy"] = accuracy_table()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mac_array.json").write_text(json.dumps(stats, indent=2) + "\n")
    (RESULTS / "mac_array.md").write_text(_markdown(stats))
    print(f"  recorded in {RESULTS / 'mac_array.md'}")
    return 0 if stats["bit_exact"] and stats["cycles_vs_ideal"] <= 1.05 else 1


def _record_accuracy_only():
    """Recompute the accuracy table into the recorded results, leaving every other figure alone."""
    path = RESULTS / "mac_array.json"
    if not path.is_file():
        print(f"no recorded results in {path}: run the full benchmark first")
        return 1
    stats = json.loads(path.read_text())
    reports = stats.setdefault("fpga", {})
    for name in FPGA_BLOCKS:
        if reports.get(name) is None:
            reports[name] = fpga.report_for(name, rebuild=False)
    stats["accuracy"] = accuracy_table()
    print(_accuracy_markdown(stats["accuracy"]))
    path.write_text(json.dumps(stats, indent=2) + "\n")
    (RESULTS / "mac_array.md").write_text(_markdown(stats))
    print(f"  recorded in {RESULTS / 'mac_array.md'}")
    return 0


def accuracy_inputs(seed=ACCURACY_SEED, shape=ACCURACY_SHAPE):
    """Weights ``(K, N)`` and activations ``{kind: (M, K)}``, float32, from one seeded generator.

    Weights and ``gaussian`` activations are standard normal; ``outliers`` are the same activations
    with 1% of the entries (uniformly placed) multiplied by 100.
    """
    m, k, n = shape
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((k, n)).astype(np.float32)
    acts = rng.standard_normal((m, k)).astype(np.float32)
    outliers = acts.copy()
    outliers[rng.random((m, k)) < 0.01] *= np.float32(100)
    return weights, {"gaussian": acts, "outliers": outliers}


def quantized_gemm_error(acts, weights, act_format, weight_format, mode):
    """Relative Frobenius error of quantize-then-GEMM against the float64 product of the inputs."""
    a_codes, a_scales = mx.quantize(acts, mode, act_format)
    bt_codes, bt_scales = mx.quantize(weights.T, mode, weight_format)      # blocks along K
    got = mx.matmul(a_codes, a_scales, bt_codes.T.copy(), bt_scales.T.copy(),
                    a_format=act_format, b_format=weight_format).astype(np.float64)
    want = acts.astype(np.float64) @ weights.astype(np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def accuracy_table(seed=ACCURACY_SEED, shape=ACCURACY_SHAPE):
    """The accuracy table: one row per :data:`ACCURACY_PAIRS` entry, errors per input kind and mode."""
    weights, inputs = accuracy_inputs(seed, shape)
    rows = []
    for name, weight_format, act_format in ACCURACY_PAIRS:
        errors = {f"{kind}_{mode}": quantized_gemm_error(inputs[kind], weights, act_format,
                                                         weight_format, mode)
                  for kind in ACCURACY_INPUTS for mode in mx.MODES}
        rows.append({"pair": name, "weights": weight_format, "activations": act_format, "errors": errors})
    return {"m": shape[0], "k": shape[1], "n": shape[2], "seed": seed, "rows": rows}


def _accuracy_markdown(table):
    if not table:
        return ""
    head = " | ".join(f"{kind}, {mode}" for kind in ACCURACY_INPUTS for mode in mx.MODES)
    text = (f"Relative Frobenius error `||C - A @ W||_F / ||A @ W||_F` against the float64 product, where "
            f"C is `sim_models.mx.matmul` of A and W each quantized along K = {table['k']} with "
            f"`sim_models.mx.quantize` (activations A: {table['m']} x {table['k']}, weights W: "
            f"{table['k']} x {table['n']}, both standard normal, seed {table['seed']}; `outliers`: 1% of "
            f"the activations, uniformly placed, 100x larger). Columns name the activations and the "
            f"scale mode (`floor` is OCP MX v1.0, `rceil` never saturates).")
    lines = ["", "## Accuracy of quantize-then-GEMM", "", textwrap.fill(text, 100), "",
             "Reproduce (golden model only, a few seconds; keeps the figures above):",
             "`.venv/bin/python -m benchmarks.mac_array --accuracy-only`.", "",
             f"| pair | weights | activations | {head} |",
             "|---|---|---|" + "---|" * (len(ACCURACY_INPUTS) * len(mx.MODES))]
    for row in table["rows"]:
        cells = " | ".join(f"{100 * row['errors'][f'{kind}_{mode}']:.2f}%"
                           for kind in ACCURACY_INPUTS for mode in mx.MODES)
        lines.append(f"| {row['pair']} | {row['weights']} | {row['activations']} | {cells} |")
    return "\n".join(lines) + "\n"


def _markdown(s):
    return f"""# MAC array benchmark

A {s['m']} x {s['n']} x {s['k']} MXFP4 GEMM (random normal inputs quantized with FLOOR scales) on the
{s['rows']} x {s['cols']} MAC array ({s['interleave']} accumulators per processing element,
{s['products']} product mapping: 9 multiplier pairs and 7 block-RAM pairs per element), simulated in
{s['simulator']} through cocotb (`verification.mx.gemm_job`).

Reproduce: `.venv/bin/python -m benchmarks.mac_array` (or `make bench`).

| figure | value |
|---|---|
| cycles, first operand accepted to last result delivered | {s['cycles']} |
| ideal cycles, M*N*K / ({s['rows']}*{s['cols']}*32) | {s['ideal_cycles']:.0f} |
| cycles / ideal (goal <= 1.05) | {s['cycles_vs_ideal']:.4f} |
| MAC utilization | {100 * s['mac_utilization']:.2f}% |
| tiles ({s['rows']} x {s['cols'] * s['interleave']} outputs each, K = {s['k']} in one pass) | {s['tiles']} |
| bit-exact against `sim_models.mx.matmul` | {'yes' if s['bit_exact'] else 'NO'} |
| simulated cycles | {s['simulated_cycles']} |
| simulation speed ({s['simulator']} + cocotb drivers) | {s['simulated_cycles_per_second']:.0f} cycles/s |
| wall time of the simulation (excluding the model build) | {s['wall_seconds']:.1f} s |

The cycle count is exact (simulation); the speed depends on the host ({s['host']}) and is dominated
by the cocotb stream drivers, not by the Verilator model.
""" + _fpga_markdown(s.get("fpga", {})) + _accuracy_markdown(s.get("accuracy"))


def _fpga_markdown(reports):
    lines = ["", "## ULX3S-85F (ECP5 LFE5U-85F)", ""]
    for name in FPGA_BLOCKS:
        report = reports.get(name)
        lines += [f"### `{name}`", ""]
        if report is None:
            lines += [f"No FPGA report (run `poblano fpga --top {name}`).", ""]
            continue
        lines += [f"`poblano fpga --top {name}` (Yosys, nextpnr-ecp5 seed {report['seed']}, "
                  f"constraint {report['target_mhz']:.0f} MHz):", "", *fpga.resource_table(report), ""]
        if name == "mx_mac_array":
            per_lane = report["block_estimate"]["lut4"] / LANES
            lines += [f"LUT4 per MAC lane (block estimate / {LANES} lanes; goal at most 40): "
                      f"**{per_lane:.1f}**.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
