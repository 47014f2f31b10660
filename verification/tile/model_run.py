"""A compiled model's runs replayed on the RTL tile: the host side of ``poblano run --sim`` and of the
tile's model regression.

:func:`run_on_rtl` takes a :class:`poblano.compiler.TileRunner` that has generated on the ISS (its
``trace`` holds every run: the ids written, the registers, the program, the logits the ISS left),
builds the tile with the runner's :class:`~sim_models.tile_isa.TileConfig` and the model's head
dimension, and replays the runs in cocotb (``verification.tile.tb_tile.model_matches_the_iss``):
each run's logits and the final scratchpad must equal the ISS's, or the run fails. It returns the
tile's cycles, instructions and performance counters per run: the breakdown of ``poblano run --sim
--report`` and of ``benchmarks/tile.py``.
"""

import json
from pathlib import Path

from verification.runner import BUILD_ROOT, run_cocotb

__all__ = ["run_on_rtl", "tile_build", "SMALL_TILE", "SMALL_TILE_PROG_WORDS"]

def _small_tile():
    from sim_models.tile_isa import TileConfig

    return TileConfig(spad_words=4096, lanes=4, rows=2, cols=2, interleave=4, vpu_max_k=4, vpu_rope_length=32,
                      kv_pages=8, kv_page_tokens=4, kv_seqs=8, kv_max_pages_per_seq=4)


SMALL_TILE = _small_tile()
"""The tile of ``make sim`` and of the model regression: a 2x2 MAC array (interleave 4), 4 lanes,
4,096 scratchpad words, 32 KV positions of 8 sequences: room for the tiny LLaMA and Mixtral
(``models/``) with a prompt of a few tokens."""
SMALL_TILE_PROG_WORDS = 128
"""Program memory of that tile: the tiny Mixtral's prefill program (94 instructions) fits."""

_RTL_FIELDS = ("spad_words", "rows", "cols", "interleave", "lanes", "kv_pages", "kv_page_tokens", "kv_seqs",
               "kv_max_pages_per_seq", "vpu_max_k", "vpu_rope_length")


def tile_build(tile, head_dim: int, prog_words: int, data_bytes: int = 8):
    """``(design factory, build parameters)`` of the RTL tile for ``tile`` (a ``TileConfig``)."""
    from rtl.tile.tile import Tile

    config = {"tile": {k: getattr(tile, k) for k in _RTL_FIELDS}, "prog_words": prog_words,
              "head_dim": head_dim}
    if data_bytes != 8:
        config["data_bytes"] = data_bytes
    return (lambda: Tile(tile, head_dim=head_dim, prog_words=prog_words, data_bytes=data_bytes)), config


def run_on_rtl(runner, *, sim: str = "verilator", job: Path | None = None,
               prog_words: int | None = None, optimize: str = "-O1", data_bytes: int = 8,
               pauses: bool = True) -> list[dict]:
    """Replay ``runner.trace`` on the RTL tile; returns one dict per run, measured on the RTL.

    Each dict holds ``phase``, ``cycles`` (``CYCLES``), ``instructions`` (``STEPS``), every
    performance counter by name (``PERF_<NAME>`` in lower case:
    :data:`rtl.tile.register_map.PERF_COUNTERS`, defined in ``docs/tile.md``: ``gemm_cycles``,
    ``attn_cycles``, ``vop_cycles``, ``kv_cycles``, ``copy_cycles``, ``other_cycles`` adding up to
    ``cycles``, ``weight_stall_cycles``, ``weight_bytes``, ``weight_beats``, ``kv_reads``,
    ``kv_appends``), and ``kv_bytes_read``, ``kv_bytes_written``: the records read and appended
    times the record's ``4 head_dim`` bytes.

    ``prog_words``: the tile's program memory (default: the longest program, rounded up to a power
    of two, at least 128: one build for small models); ``job``: the directory of the runs' files
    (default under ``build/``);
    ``optimize``: Verilator's g++ optimisation (:func:`verification.runner.run_cocotb`);
    ``data_bytes``: the weight port's width in bytes per beat; ``pauses``: the weight memory pauses
    at random (as in the regression) or answers every cycle (for cycle figures).

    Raises :class:`verification.runner.RunFailed` when a run's logits, status or the final
    scratchpad differ from the ISS (the log in the run directory names the first difference).
    """
    from verification.tile.tb_tile import write_model_runs

    longest = max(len(run["program"]) for run in runner.trace)
    if prog_words is None:
        prog_words = 1 << max(7, (longest - 1).bit_length())
    elif prog_words < longest:
        raise ValueError(f"a program of {longest} instructions does not fit prog_words={prog_words}")
    job = BUILD_ROOT / "tile_runs" if job is None else Path(job)
    job.mkdir(parents=True, exist_ok=True)
    runs, result = job / "runs.json", job / "cycles.json"
    result.unlink(missing_ok=True)
    write_model_runs(runs, runner, result, pauses=pauses)
    design, config = tile_build(runner.tile, runner.compiled.config.head_dim, prog_words, data_bytes)
    run_cocotb(design, toplevel="tile", config=config, test_module="verification.tile.tb_tile",
               testcase="model_matches_the_iss", sim=sim, extra_env={"POBLANO_TILE_MODEL": str(runs)},
               ports_only=True, optimize=optimize)
    record = 4 * runner.compiled.config.head_dim
    measured = json.loads(result.read_text())
    for run in measured:
        run["kv_bytes_read"] = run["kv_reads"] * record
        run["kv_bytes_written"] = run["kv_appends"] * record
    return measured
