"""A whole model on the RTL tile: the tiny LLaMA and Mixtral checkpoints compiled, their prefill and
decode runs replayed on the tile (cocotb, through AXI4-Lite, weights from AXI4 memory with random
stalls), every run's logits and the final scratchpad equal to the ISS, which equals the golden
model; the KV cache stays in the tile's controller from run to run."""

from pathlib import Path

import numpy as np
import pytest

from poblano.compiler import TileRunner
from sim_models import checkpoint as ck
from sim_models import transformer as tf
from verification.tile.model_run import SMALL_TILE, SMALL_TILE_PROG_WORDS, run_on_rtl

MODELS = Path(__file__).resolve().parents[3] / "models"
TILE = SMALL_TILE
PROMPT = [3, 1, 4, 1]


# Verilator runs both models over a prompt of four tokens and two decode steps (about 10 s each once
# built); Icarus, some 40 times slower on this design, runs the MoE model (router, top-k, expert
# weights addressed from computed indices) over two tokens and one decode step.
RUNS = [("tiny-llama", "verilator", PROMPT, 3), ("tiny-mixtral", "verilator", PROMPT, 3),
        ("tiny-mixtral", "icarus", PROMPT[:2], 2)]


@pytest.mark.cocotb
@pytest.mark.parametrize(("kind", "sim", "prompt", "generate"), RUNS, ids=[f"{k}-{s}" for k, s, *_ in RUNS])
def test_prefill_and_decode_match_the_golden_model(kind, sim, prompt, generate, tmp_path):
    config = ck.load_config(MODELS / kind / "config.json")
    model = tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, 0)), lanes=TILE.lanes)
    runner = TileRunner(model, TILE)
    ids, logits = runner.generate(prompt, generate)
    golden_ids, golden_logits = tf.generate(model, prompt, generate)
    assert np.array_equal(ids, golden_ids)
    assert np.array_equal(logits.view(np.uint32), golden_logits.view(np.uint32))
    cycles = run_on_rtl(runner, sim=sim, job=tmp_path, prog_words=SMALL_TILE_PROG_WORDS)
    assert [c["phase"] for c in cycles] == ["prefill"] + ["decode"] * (generate - 1)
    assert [c["instructions"] for c in cycles] == [r["instructions"] for r in runner.reports]
