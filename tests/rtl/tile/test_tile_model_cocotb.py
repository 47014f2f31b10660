"""A whole model on the RTL tile: the tiny LLaMA and Mixtral checkpoints compiled, their prefill and
decode runs replayed on the tile (cocotb, through AXI4-Lite, weights from AXI4 memory with random
stalls), every run's logits and the final scratchpad equal to the ISS, which equals the golden
model; the KV cache stays in the tile's controller from run to run."""

from pathlib import Path

import numpy as np
import pytest

from poblano.compiler import TileRunner
from rtl.tile.tile import Tile
from sim_models import checkpoint as ck
from sim_models import transformer as tf
from sim_models.tile_isa import TileConfig
from verification.runner import SIMULATORS, run_cocotb
from verification.tile.tb_tile import write_model_runs

MODELS = Path(__file__).resolve().parents[3] / "models"
TILE = TileConfig(spad_words=4096, lanes=4, rows=2, cols=2, interleave=4, vpu_max_k=4, vpu_rope_length=32,
                  kv_pages=8, kv_page_tokens=4, kv_seqs=8, kv_max_pages_per_seq=4)
PROG_WORDS = 128
PROMPT = [3, 1, 4, 1]


def tile_build(head_dim):
    """The design and its build parameters (shared by every model of this head dimension)."""
    fields = ("spad_words", "lanes", "rows", "cols", "interleave", "vpu_max_k", "vpu_rope_length",
              "kv_pages", "kv_page_tokens", "kv_seqs", "kv_max_pages_per_seq")
    config = {"tile": {k: getattr(TILE, k) for k in fields}, "prog_words": PROG_WORDS, "head_dim": head_dim}
    return (lambda: Tile(TILE, head_dim=head_dim, prog_words=PROG_WORDS)), config


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("kind", ["tiny-llama", "tiny-mixtral"])
def test_prefill_and_decode_match_the_golden_model(kind, sim, tmp_path):
    config = ck.load_config(MODELS / kind / "config.json")
    model = tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, 0)), lanes=TILE.lanes)
    runner = TileRunner(model, TILE)
    ids, logits = runner.generate(PROMPT, 3)
    golden_ids, golden_logits = tf.generate(model, PROMPT, 3)
    assert np.array_equal(ids, golden_ids)
    assert np.array_equal(logits.view(np.uint32), golden_logits.view(np.uint32))
    runs = tmp_path / "runs.json"
    write_model_runs(runs, runner)
    design, build = tile_build(config.head_dim)
    run_cocotb(design, toplevel="tile", config=build, test_module="verification.tile.tb_tile",
               testcase="model_matches_the_iss", sim=sim, extra_env={"POBLANO_TILE_MODEL": str(runs)},
               ports_only=True)
