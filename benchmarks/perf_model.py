"""Calibration of the performance model's tile costs against the RTL tile's measured runs.

For every run recorded in ``benchmarks/results/tile.json`` and ``tile_long_context.json``
(``benchmarks/tile.py``: the tiny LLaMA and Mixtral, a 64-token prefill and two decode steps, and
two decode steps at context 1,024 after a KV fill; RTL in Verilator), the same model, weights
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


RECORDS = ("tile.json", "tile_long_context.json")
"""The recorded tile runs (``benchmarks/tile.py``): a 64-token prompt and two decode steps; two
decode steps at a long context after a KV fill (``--context``)."""


def recorded_tile(name="tile.json"):
    """The tile of a record, its runs and its KV-fill context (None: the runs start from a prompt)."""
    from sim_models.tile_isa import TileConfig

    data = json.loads((RESULTS / name).read_text())
    tile = data["tile"]
    return (TileConfig(**{**tile, "mac_formats": tuple(tile["mac_formats"])}), data["runs"],
            data.get("context"))


def trace_recorded():
    """Every recorded run rebuilt on the instruction-level model as the benchmark ran it (a prompt,
    or a KV fill of ``context - 1`` positions in 64-token chunks, then the decode steps): a list of
    ``(run, tile, head_dim, executed, counters)``, ``executed`` the run's instructions with their
    registers (:func:`sim_models.perf.tile_costs.trace_program`)."""
    from poblano.compiler import TileRunner
    from sim_models import checkpoint as ck
    from sim_models import transformer as tf
    from sim_models.perf.tile_costs import trace_program

    traced = []
    for name in RECORDS:
        if not (RESULTS / name).exists():
            continue
        tile, runs, fill = recorded_tile(name)
        runners = {}
        for run in runs:
            key = (run["model"], run["data_bytes"])
            if key not in runners:
                config = ck.load_config(MODELS / run["model"] / "config.json")
                model = tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, 0)), lanes=tile.lanes)
                runner = TileRunner(model, tile)
                ids = [(7 * i + 3) % config.vocab_size for i in range((fill or run["tokens"]) + 2)]
                if fill:
                    for start in range(0, fill - 1, 64):
                        runner.run(ids[start:min(start + 64, fill - 1)], open_kv=start == 0, attention=False)
                runners[key] = [runner, ids, config]
            runner, ids, config = runners[key]
            if run["phase"] == "prefill":
                executed, counters = trace_program(runner, ids[:run["tokens"]], open_kv=True)
            else:
                token = ids[run["context"] - 1] if fill else (5 * run["context"]) % config.vocab_size
                executed, counters = trace_program(runner, [token], open_kv=False)
            assert runner.position == run["context"], (runner.position, run)
            traced.append((run, tile, config.head_dim, executed, counters))
    return traced


def predict_recorded(traced=None, costs=None):
    """One row per recorded run: its keys, the measured cycles per class and the ones predicted
    with ``costs`` (default :data:`~sim_models.perf.tile_costs.TILE_COSTS`); ``traced``: the
    runs of :func:`trace_recorded` (default: traced now)."""
    from sim_models.perf.tile_costs import CLASSES, TILE_COSTS, predict_run

    rows = []
    for run, tile, head_dim, executed, counters in (trace_recorded() if traced is None else traced):
        predicted = predict_run(executed, counters, tile, head_dim, run["data_bytes"], costs or TILE_COSTS)
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
Measured: the RTL tile's runs of [`tile.md`](tile.md) and
[`tile_long_context.md`](tile_long_context.md) (Verilator, 32-byte weight port answering every
cycle). Predicted: the same compiled programs run on the instruction-level model,
every executed instruction priced by `sim_models/perf/tile_costs.py` (parameters and their sources:
[`docs/perf_model.md`](../../docs/perf_model.md)). Goal: within 10 % (5 %) of every run.

{table}

Largest error: {100 * worst:.1f} %.
""")
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
