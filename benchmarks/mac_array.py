"""MAC-array benchmark: a 64 x 64 x 1024 MXFP4 GEMM on the 4 x 4 array, in Verilator.

Figures (from simulation cycle counts, never wall-clock asserts):

* cycles from the first operand accepted to the last result delivered, against the ideal
  ``M * N * K / (R * C * 32) = 8192``; the goal is within 1.05x;
* MAC utilization (useful MACs / (cycles * peak MACs per cycle));
* Verilator simulation speed in simulated cycles per second (cocotb drivers included);
* bit-exactness of every output against ``sim_models.mx.matmul``;
* the ULX3S-85F builds of the 4 x 4 array and the quantizer (``poblano fpga --top mx_mac_array
  --top mx_quantizer``): LUT4, FF, MULT18, DP16KD, Fmax (goal 100 MHz) and LUT4 per MAC lane (goal
  at most 40; a lane is one of the 512 element multipliers with its share of the adder tree and
  accumulator).

Run: ``.venv/bin/python -m benchmarks.mac_array`` (or ``make bench``); writes
``benchmarks/results/mac_array.md`` and ``.json``. ``--quick`` runs a 16 x 64 x 256 GEMM instead and
records nothing; ``--no-fpga`` reuses the last ``build/fpga/<block>/report.json`` files.
"""

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

from poblano.commands import gemm
from poblano.flows import fpga
from sim_models import mx

RESULTS = Path(__file__).resolve().parent / "results"
FPGA_BLOCKS = ("mx_mac_array", "mx_quantizer")
LANES = 4 * 4 * 32


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small GEMM, results not recorded")
    parser.add_argument("--sim", default="verilator", choices=("verilator", "icarus"))
    parser.add_argument("--no-fpga", action="store_true", help="reuse the last FPGA reports")
    args = parser.parse_args(argv)
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
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mac_array.json").write_text(json.dumps(stats, indent=2) + "\n")
    (RESULTS / "mac_array.md").write_text(_markdown(stats))
    print(f"  recorded in {RESULTS / 'mac_array.md'}")
    return 0 if stats["bit_exact"] and stats["cycles_vs_ideal"] <= 1.05 else 1


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
""" + _fpga_markdown(s.get("fpga", {}))


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
