"""Calibration of the performance model's tile costs against the RTL tile's measured runs.

For every run recorded in ``benchmarks/results/tile.json`` (``benchmarks/tile.py``: the tiny LLaMA
and Mixtral, a 64-token prefill and two decode steps, RTL in Verilator), the same model, weights
(seed 0), prompt and tile are compiled and run on the instruction-level model; the executed
instructions are priced by :mod:`sim_models.perf.tile_costs` and compared with the RTL's cycles, in
total and per class (its performance counters). No RTL simulation: seconds.

Run: ``.venv/bin/python -m benchmarks.perf_model``; writes ``benchmarks/results/perf_model.md`` and
``.json``.
"""

import json
import platform
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = Path(__file__).resolve().parent.parent / "models"


def recorded_tile():
    """The tile of the recorded runs and the runs (``tile.json``)."""
    from sim_models.tile_isa import TileConfig

    data = json.loads((RESULTS / "tile.json").read_text())
    tile = data["tile"]
    return TileConfig(**{**tile, "mac_formats": tuple(tile["mac_formats"])}), data["runs"]


def predict_recorded():
    """One row per recorded run: its keys, the measured cycles per class and the predicted ones."""
    from poblano.compiler import TileRunner
    from sim_models import checkpoint as ck
    from sim_models import transformer as tf
    from sim_models.perf.tile_costs import CLASSES, predict_run, trace_program

    tile, runs = recorded_tile()
    rows, runners = [], {}
    for run in runs:
        key = (run["model"], run["data_bytes"])
        if key not in runners:
            config = ck.load_config(MODELS / run["model"] / "config.json")
            model = tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, 0)), lanes=tile.lanes)
            runner = TileRunner(model, tile)
            prompt = [(7 * i + 3) % config.vocab_size for i in range(run["tokens"])]
            runners[key] = [runner, prompt, config]
        runner, prompt, config = runners[key]
        if run["phase"] == "prefill":
            executed, counters = trace_program(runner, prompt, open_kv=True)
        else:
            executed, counters = trace_program(runner, [(5 * run["context"]) % config.vocab_size],
                                               open_kv=False)
        assert runner.position == run["context"], (runner.position, run)
        predicted = predict_run(executed, counters, tile, config.head_dim, run["data_bytes"])
        measured = {c: run["rtl"][c] for c in (*CLASSES, "cycles")}
        rows.append({"model": run["model"], "data_bytes": run["data_bytes"], "phase": run["phase"],
                     "tokens": run["tokens"], "context": run["context"], "measured": measured,
                     "predicted": predicted,
                     "error": round(predicted["cycles"] / measured["cycles"] - 1, 4)})
    return rows


def _table(rows):
    lines = ["| model | phase | tokens | context | measured cycles | predicted | error | GEMM (m / p) "
             "| ATTN (m / p) | VOP (m / p) | KV+copy+other (m / p) |", "|---" * 11 + "|"]
    for r in rows:
        m, p = r["measured"], r["predicted"]
        rest = ("kv_cycles", "copy_cycles", "other_cycles")
        lines.append(f"| {r['model']} | {r['phase']} | {r['tokens']} | {r['context']} | {m['cycles']:,} "
                     f"| {p['cycles']:,} | {100 * r['error']:+.1f}% | {m['gemm_cycles']:,} / "
                     f"{p['gemm_cycles']:,} | {m['attn_cycles']:,} / {p['attn_cycles']:,} | "
                     f"{m['vop_cycles']:,} / {p['vop_cycles']:,} | {sum(m[c] for c in rest):,} / "
                     f"{sum(p[c] for c in rest):,} |")
    return "\n".join(lines)


def main(argv=None):
    rows = predict_recorded()
    table = _table(rows)
    print(table)
    worst = max(abs(r["error"]) for r in rows)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "perf_model.json").write_text(json.dumps({"runs": rows, "worst_error": worst,
                                                         "machine": platform.machine()}, indent=2) + "\n")
    (RESULTS / "perf_model.md").write_text(f"""# Performance model: predicted tile cycles against the RTL

Measured by `.venv/bin/python -m benchmarks.perf_model` (seconds: the instruction-level model only).
Measured: the RTL tile's runs of [`tile.md`](tile.md) (`tile.json`, Verilator, 32-byte weight port
answering every cycle). Predicted: the same compiled programs run on the instruction-level model,
every executed instruction priced by `sim_models/perf/tile_costs.py` (parameters and their sources:
[`docs/perf_model.md`](../../docs/perf_model.md)). Goal: within 10 % (5 %) of every run.

{table}

Largest error: {100 * worst:.1f} %.
""")
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
