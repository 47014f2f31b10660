"""GEMM-engine benchmark: cycles of one ``GEMM`` instruction against its bounds, in the Amaranth simulator.

The tile's GEMM engine (``rtl.tile.gemm_engine``: quantizer, A and B buffers, the MAC array, the
result writer) on a scratchpad, the weight port modelled at its stream interface answering every
cycle (``verification.tile.gemm_bench``), for the shapes of a 64-token prefill and of a decode step
(``m`` = 1) of small layers, on two tiles: the default one (4x4 MAC array, interleave 8, 8 lanes)
and the one ``benchmarks/tile.py`` runs models on (2x2, interleave 4, 4 lanes). Per GEMM:

* ``cycles``: from the command to its status;
* ``MAC beats``: the array's busy cycles (one B beat per tile row of blocks, ``ceil(m / rows) *
  ceil(n / (cols * interleave)) * k / 32 * interleave``) and the MAC utilization, beats over cycles;
* ``weight cycles``: the weight's bytes over the port's bytes per cycle (it is streamed once);
* ``quantize cycles``: the scratchpad reads of the activations, ``m k / lanes``;
* the bound, the largest of the three, and the cycles over it.

Run: ``.venv/bin/python -m benchmarks.gemm_engine`` (about five minutes); writes
``benchmarks/results/gemm_engine.md`` and ``.json``. ``--quick``: one shape, nothing recorded.
"""

import argparse
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PORT_BYTES = 32
SHAPES = [("prefill", 64, 64, 128), ("prefill", 64, 128, 64), ("prefill", 64, 64, 256),
          ("prefill", 64, 256, 64), ("decode", 1, 64, 128), ("decode", 1, 128, 64), ("decode", 1, 128, 256)]


def tiles():
    """The two tiles measured, by name."""
    from sim_models.tile_isa import TileConfig

    return {"default 4x4": TileConfig(spad_words=65536),
            "benchmark 2x2": TileConfig(spad_words=65536, lanes=4, rows=2, cols=2, interleave=4)}


def measure(config, phase, m, k, n, data_bytes=PORT_BYTES):
    """One GEMM of ``(m, k, n)`` on ``config``: the row of the table (a dict)."""
    from verification.tile.gemm_bench import random_gemm_case, run_gemm_engine

    image, _, commands = random_gemm_case(config, 1, [(m, k, n)])
    start = time.monotonic()
    got = run_gemm_engine(config, commands, image, [], data_bytes=data_bytes, gaps=0.0, readback=False)
    assert got["status"] == [0], got["status"]
    cycles = got["cycles"][0]
    mac = -(-m // config.rows) * -(-n // config.tile_cols) * (k // 32) * config.interleave
    weight = -(-sum(length for _, length in got["requests"]) // data_bytes)
    quantize = m * k // min(config.lanes, 32)
    bound = max(mac, weight, quantize)
    return {"phase": phase, "m": m, "k": k, "n": n, "port_bytes": data_bytes, "cycles": cycles,
            "mac_beats": mac, "mac_utilization": mac / cycles, "weight_cycles": weight,
            "quantize_cycles": quantize, "bound": bound, "ratio": cycles / bound,
            "seconds": round(time.monotonic() - start, 1)}


def table(runs):
    lines = ["| tile | phase | m, k, n | cycles | MAC beats | MAC utilization | weight cycles "
             "| quantize cycles | cycles / bound |", "|---|---|---|---|---|---|---|---|---|"]
    for tile, row in runs:
        lines.append(f"| {tile} | {row['phase']} | {row['m']}, {row['k']}, {row['n']} | {row['cycles']:,} "
                     f"| {row['mac_beats']:,} | {100 * row['mac_utilization']:.1f}% "
                     f"| {row['weight_cycles']:,} | {row['quantize_cycles']:,} | {row['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, nothing recorded")
    args = parser.parse_args(argv)
    configs = tiles()
    plan = [("default 4x4", SHAPES[0])] if args.quick else [(t, s) for t in configs for s in SHAPES]
    runs = []
    for tile, (phase, m, k, n) in plan:
        row = measure(configs[tile], phase, m, k, n)
        print(f"{tile}: {phase} {m}x{k}x{n}: {row['cycles']} cycles, MAC "
              f"{100 * row['mac_utilization']:.1f}%, {row['ratio']:.2f} x bound ({row['seconds']} s)",
              flush=True)
        runs.append((tile, row))
    text = table(runs)
    print(text)
    if args.quick:
        return 0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gemm_engine.json").write_text(json.dumps(
        {"tiles": {name: vars(config) for name, config in configs.items()},
         "runs": [{"tile": tile, **row} for tile, row in runs], "machine": platform.machine()},
        indent=2) + "\n")
    (RESULTS / "gemm_engine.md").write_text(f"""# GEMM engine: one GEMM instruction, in cycles

Measured by `.venv/bin/python -m benchmarks.gemm_engine` (the module's docstring says how), in the
Amaranth simulator: the tile's GEMM engine with its RTL quantizer and MAC array, a {PORT_BYTES}-byte
weight port answering every cycle. Tiles: "default 4x4" is `TileConfig()` (4x4 MAC array,
interleave 8, 8 lanes), "benchmark 2x2" the tile of `benchmarks/tile.py` (2x2, interleave 4, 4
lanes); both with a 1,024-beat B buffer, so every weight here is streamed once and stays resident.
MAC beats: the array's busy cycles (the MAC utilization is beats over cycles); weight cycles: the
weight's bytes over {PORT_BYTES}; quantize cycles: the activation reads, `m k / lanes`; the bound is
the largest of the three.

{text}
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
