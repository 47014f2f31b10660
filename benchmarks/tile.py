"""Compute-tile benchmark: a whole model's prefill and decode steps on the RTL tile, in cycles, against
the tile's roofline.

For the tiny LLaMA and Mixtral of ``models/`` (random weights, seed 0) on a tile with a 2x2 MAC array
(interleave 4), 4 vector lanes, 65,536 scratchpad words and a KV cache of 128 positions per
sequence: a prompt of 64 tokens as one prefill, then two decode steps (context 64 and 65). Each run
is replayed on the RTL tile in Verilator (``verification.tile.model_run``: logits and scratchpad
equal to the ISS, which equals the golden model), with the weight memory answering every cycle, for
weight ports of 8 and 32 bytes per beat. Per run:

* ``cycles``: from ``CTRL.start`` to the stop (the tile's ``CYCLES`` register);
* the roofline bound, the largest of the weight bytes over the port's bytes per cycle, the MAC
  array's busy beats (the ISS's ``mac_beats``: one B beat per cycle) and the KV bytes read over the
  controller's read bandwidth (one record of ``4 head_dim`` bytes per cycle); the ratio of the
  cycles to it;
* MAC utilization: useful block pairs (``m n k / 32``) over ``rows * cols`` per cycle;
* the breakdown measured by the tile's performance counters (``docs/tile.md``, "Performance
  counters"): cycles executing GEMMs, ATTNs, VOPs and everything else (KV appends, copies, fetch,
  decode, scalar instructions), which add up to ``cycles``, and the weight-stall cycles (a GEMM or a
  copy waiting for weight data). The JSON rows hold every counter.

Run: ``.venv/bin/python -m benchmarks.tile`` (or ``make bench``); writes
``benchmarks/results/tile.md`` and ``.json``. ``--ports 32``: only the 32-byte port (each width takes
about half an hour on one core). ``--quick``: the tiny LLaMA, an 8-token prompt and the 8-byte port,
nothing recorded. ``--context 1024``: two decode steps at context 1,024 and 1,025 instead, on the
same tile with a KV cache of 1,040 positions per sequence, after a *KV fill* of the first 1,023
positions (64-token chunks of the layers' GEMMs and KV appends without attention, replayed on the
RTL: a 1,024-token prefill would cost the attention engine's quadratic per-record commands); writes
``benchmarks/results/tile_long_context.md`` and ``.json`` (about 15 minutes on one core).
"""

import argparse
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = Path(__file__).resolve().parent.parent / "models"


def _tile():
    from sim_models.tile_isa import TileConfig

    return TileConfig(spad_words=65536, lanes=4, rows=2, cols=2, interleave=4, vpu_max_k=4,
                      vpu_rope_length=32, kv_pages=64, kv_page_tokens=8, kv_seqs=8, kv_max_pages_per_seq=16)


def _long_tile(positions):
    """The benchmark tile with a KV cache of at least ``positions`` per sequence for the tiny
    models' 4 sequences (2 layers x 2 KV heads): pages of 16 positions."""
    from dataclasses import replace

    pages = -(-positions // 16)
    return replace(_tile(), kv_pages=4 * pages, kv_page_tokens=16, kv_max_pages_per_seq=pages)


def _model(kind, tile):
    from sim_models import checkpoint as ck
    from sim_models import transformer as tf

    config = ck.load_config(MODELS / kind / "config.json")
    return config, tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, 0)), lanes=tile.lanes)


def _runs(kind, prompt_tokens, decode_steps, data_bytes, context=None, chunk=64):
    """Rows of the runs of ``kind`` on the RTL tile. ``context``: instead of a prompt, a KV fill of
    ``context - 1`` positions in chunks of ``chunk`` tokens (``CompiledModel.forward(attention=False)``:
    the layers' GEMMs and KV appends without attention), then ``decode_steps`` decode steps from
    context ``context``; the fill runs are replayed too (the KV cache is built on the RTL) but not
    reported."""
    from poblano.compiler import TileRunner
    from verification.runner import BUILD_ROOT
    from verification.tile.model_run import run_on_rtl

    tile = _tile() if context is None else _long_tile(context + decode_steps)
    config, model = _model(kind, tile)
    runner = TileRunner(model, tile)
    if context is None:
        prompt = [(7 * i + 3) % config.vocab_size for i in range(prompt_tokens)]
        runner.generate(prompt, decode_steps + 1)
    else:
        ids = [(7 * i + 3) % config.vocab_size for i in range(context - 1 + decode_steps)]
        for start in range(0, context - 1, chunk):
            runner.run(ids[start:min(start + chunk, context - 1)], open_kv=start == 0, attention=False)
        for step in range(decode_steps):
            runner.run(ids[context - 1 + step:context + step], open_kv=False)
    start = time.monotonic()
    name = f"{kind}-{data_bytes}" + ("" if context is None else f"-context{context}")
    measured = run_on_rtl(runner, job=BUILD_ROOT / "bench_tile" / name, data_bytes=data_bytes, pauses=False)
    seconds = time.monotonic() - start
    rows, peak = [], tile.rows * tile.cols          # block pairs per cycle
    for report, rtl in zip(runner.reports, measured, strict=True):
        if report["phase"] == "fill":
            continue
        bounds = {"weights": report["weight_bytes"] / data_bytes, "mac": report["mac_beats"],
                  "kv": report["kv_bytes_read"] / (4 * config.head_dim)}
        bound = max(bounds.values())
        rows.append({"model": kind, "data_bytes": data_bytes, "phase": report["phase"],
                     "tokens": report["tokens"], "context": report["position"] + report["tokens"],
                     "instructions": rtl["instructions"], "cycles": rtl["cycles"],
                     "bound": round(bound), "bound_by": max(bounds, key=bounds.get),
                     "ratio": round(rtl["cycles"] / bound, 2),
                     "mac_utilization": round(report["mac_block_pairs"] / (rtl["cycles"] * peak), 4),
                     "mac_utilization_gemm": round(report["mac_block_pairs"]
                                                   / (max(1, rtl["gemm_cycles"]) * peak), 4),
                     "weight_bytes": report["weight_bytes"], "kv_bytes_read": report["kv_bytes_read"],
                     "rtl": {k: v for k, v in rtl.items() if k != "phase"}})
    return rows, seconds


def _table(rows):
    lines = ["| model | port B/beat | phase | tokens | context | instructions | cycles | roofline bound (by) "
             "| cycles / bound | MAC utilization | in GEMMs | GEMM | ATTN | VOP | other | weight stalls |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["rtl"]
        other = m["kv_cycles"] + m["copy_cycles"] + m["other_cycles"]
        lines.append(f"| {r['model']} | {r['data_bytes']} | {r['phase']} | {r['tokens']} | {r['context']} "
                     f"| {r['instructions']} | {r['cycles']:,} | {r['bound']:,} ({r['bound_by']}) "
                     f"| {r['ratio']} | {100 * r['mac_utilization']:.1f}% "
                     f"| {100 * r['mac_utilization_gemm']:.1f}% | {m['gemm_cycles']:,} "
                     f"| {m['attn_cycles']:,} | {m['vop_cycles']:,} | {other:,} "
                     f"| {m['weight_stall_cycles']:,} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small run, nothing recorded")
    parser.add_argument("--ports", type=int, nargs="+", default=None, metavar="BYTES",
                        help="weight-port widths in bytes per beat (default: 8 32; with --context: 32)")
    parser.add_argument("--context", type=int, metavar="N",
                        help="decode steps at context N and N + 1 after a KV fill, recorded in "
                             "tile_long_context.md, instead of the 64-token runs")
    args = parser.parse_args(argv)
    if args.context is not None:
        if args.context < 2:
            parser.error("--context must be at least 2")
        return _long_context(args.context, args.ports or [32])
    args.ports = args.ports or [8, 32]
    plan = ([("tiny-llama", 8, 1, 8)] if args.quick else
            [(kind, 64, 2, width) for width in args.ports for kind in ("tiny-llama", "tiny-mixtral")])
    rows, seconds = [], {}
    for kind, prompt, steps, width in plan:
        print(f"{kind}: a prompt of {prompt} tokens and {steps} decode steps, {width}-byte weight "
              f"port ...", flush=True)
        got, seconds[f"{kind}-{width}"] = _runs(kind, prompt, steps, width)
        rows += got
    table = _table(rows)
    print(table)
    if args.quick:
        return 0
    tile = _tile()
    ports_option = "" if args.ports == [8, 32] else " --ports " + " ".join(map(str, args.ports))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tile.json").write_text(json.dumps({"tile": vars(tile), "runs": rows, "seconds": seconds,
                                                   "machine": platform.machine()}, indent=2) + "\n")
    (RESULTS / "tile.md").write_text(f"""# Compute tile: a whole model on the RTL, in cycles

Measured by `.venv/bin/python -m benchmarks.tile{ports_option}` (the module's docstring says how); every run's
logits and the final scratchpad equal the ISS's and the golden model's. Tile: 2x2 MAC array,
interleave 4, 4 vector lanes, 65,536 scratchpad words, KV cache of 64 pages x 8 positions (128 per
sequence), head_dim 32; the weight memory answers every cycle (cocotbext-axi `AxiRamRead`).
Roofline bound: the largest of weight bytes / port bytes per cycle, MAC busy beats, KV bytes read /
(4 head_dim bytes per cycle). MAC utilization: useful block pairs over the array's peak in all the
run's cycles, and "in GEMMs" over the cycles of its GEMM instructions only (the layers' GEMMs, the
prefill goal's figure). GEMM, ATTN, VOP, other: the cycles spent executing each instruction
class, from the tile's performance counters (other: KV appends, copies, fetch, decode and scalar
instructions; the four add up to the cycles); weight stalls: cycles a GEMM or a copy waited for
weight data.

{table}

Decode at context 1,024: [`tile_long_context.md`](tile_long_context.md) (`--context 1024`).
""")
    return 0


def _long_context(context, ports):
    rows, seconds = [], {}
    for width in ports:
        for kind in ("tiny-llama", "tiny-mixtral"):
            print(f"{kind}: a KV fill of {context - 1} positions, then 2 decode steps, {width}-byte weight "
                  f"port ...", flush=True)
            got, seconds[f"{kind}-{width}"] = _runs(kind, 0, 2, width, context=context)
            rows += got
    table = _table(rows)
    print(table)
    tile = _long_tile(context + 2)
    ports_option = "" if ports == [32] else " --ports " + " ".join(map(str, ports))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tile_long_context.json").write_text(json.dumps(
        {"tile": vars(tile), "context": context, "runs": rows, "seconds": seconds,
         "machine": platform.machine()}, indent=2) + "\n")
    (RESULTS / "tile_long_context.md").write_text(f"""# Compute tile: decode at a long context, in cycles

Measured by `.venv/bin/python -m benchmarks.tile --context {context}{ports_option}` (the module's
docstring says how). The tile of [`tile.md`](tile.md) with a KV cache of {tile.kv_pages} pages of
{tile.kv_page_tokens} positions ({tile.kv_max_pages_per_seq * tile.kv_page_tokens} per sequence).
The context is built by a *KV fill*: {context - 1} positions in chunks of 64 tokens, each
layer's GEMMs and KV appends without attention (`CompiledModel.forward(attention=False)`),
replayed on the RTL so that its KV cache holds them; then two decode steps, at context {context}
and {context + 1}, whose cycles are below. Every run's logits and the final scratchpad equal the
instruction-level model's (the fill's logits are not the model's, so the golden model is not
compared here). Columns as in [`tile.md`](tile.md).

{table}
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
