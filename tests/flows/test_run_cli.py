"""``poblano run``: golden and ISS runs, the bit-exact check, logits, reports, listings, and
one-line errors with exit status 2."""

import json
from pathlib import Path

import numpy as np
import pytest

from poblano import cli
from poblano.compiler import TileRunner
from sim_models import checkpoint as ck
from sim_models import transformer as tf

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for kind in ("tiny-llama", "tiny-mixtral"):
        config = ck.load_config(MODELS / kind / "config.json")
        out[kind] = tmp_path_factory.mktemp(kind)
        ck.save_checkpoint(out[kind], config, ck.random_weights(config, 1))
    return out


def _run(capsys, *args):
    status = cli.main(["run", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("kind", ["tiny-llama", "tiny-mixtral"])
def test_iss_run_checks_against_the_golden_model(tmp_path, capsys, checkpoints, kind):
    logits, report, listing = tmp_path / "l.npy", tmp_path / "r.json", tmp_path / "p.txt"
    status, out, err = _run(capsys, "--model", str(checkpoints[kind]), "--prompt", "1,2,3", "--generate",
                            "3", "--iss", "--logits", str(logits), "--report", str(report),
                            "--listing", str(listing))
    assert status == 0 and err == ""
    model = tf.Transformer(ck.load_checkpoint(checkpoints[kind]))
    ids, expected = tf.generate(model, [1, 2, 3], 3)
    assert "prompt:    1 2 3" in out and f"generated: {' '.join(map(str, ids))}" in out
    assert "bit for bit" in out
    assert np.array_equal(np.load(logits), expected)
    phases = json.loads(report.read_text())["phases"]
    assert [p["phase"] for p in phases] == ["prefill", "decode", "decode"]
    assert all(p["weight_bytes"] > 0 and p["instructions"] > 0 for p in phases)
    text = listing.read_text()
    assert "; decode step" in text and "ATTN layer=1" in text


def test_golden_run_and_the_default(capsys, checkpoints):
    args = ("--model", str(checkpoints["tiny-llama"]), "--prompt", "7", "--generate", "2")
    status, out, _ = _run(capsys, *args, "--golden")
    assert status == 0 and "generated:" in out and "iss" not in out
    assert _run(capsys, *args)[1] == out


def test_iss_runs_mixed_formats(capsys, checkpoints):
    """W4A8 on the ISS: the modelled tile's MAC array runs the formats asked for."""
    args = ("--model", str(checkpoints["tiny-llama"]), "--prompt", "1,2", "--generate", "2",
            "--act-format", "e4m3")
    status, out, err = _run(capsys, *args, "--iss")
    assert status == 0, err
    assert "equal the golden model bit for bit" in out
    assert out.startswith(_run(capsys, *args, "--golden")[1])


def test_a_mismatch_exits_1(capsys, checkpoints, monkeypatch):
    original = TileRunner.generate

    def wrong(self, prompt, n):
        ids, logits = original(self, prompt, n)
        logits[1, 5] = np.nextafter(logits[1, 5], np.float32(1))
        return ids, logits
    monkeypatch.setattr(TileRunner, "generate", wrong)
    status, out, _ = _run(capsys, "--model", str(checkpoints["tiny-mixtral"]), "--prompt", "1,2",
                          "--generate", "2", "--iss")
    assert status == 1 and "MISMATCH" in out and "step 1: logit 5" in out


def test_errors(capsys, checkpoints, tmp_path):
    good = str(checkpoints["tiny-llama"])
    bad_arch = tmp_path / "gpt"
    bad_arch.mkdir()
    raw = json.loads((MODELS / "tiny-llama" / "config.json").read_text())
    raw["architectures"] = ["GPT2LMHeadModel"]
    (bad_arch / "config.json").write_text(json.dumps(raw))
    cases = [
        (("--model", str(tmp_path / "missing"), "--prompt", "1"), "not found"),
        (("--model", str(bad_arch), "--prompt", "1"), "GPT2LMHeadModel"),
        (("--model", good, "--prompt", "1,256"), "outside the vocabulary"),
        (("--model", good, "--prompt", "1,x"), "comma-separated integers"),
        (("--model", good, "--prompt", "1", "--iss", "--spad-words", "296"), "does not fit the tile"),
        (("--model", good, "--prompt", "1", "--iss", "--spad-words", "300"), "multiple of lanes"),
        (("--model", good, "--prompt", "1", "--generate", "400", "--iss"), "KV positions"),
        (("--model", good, "--prompt", "1", "--iss", "--kv-seqs", "2"), "KV sequences"),
        (("--model", good, "--prompt", "1", "--iss", "--lanes", "3"), "lanes must be a power of two"),
        (("--model", good, "--prompt", "1", "--report", "r.json"), "need --iss"),
        (("--model", good, "--prompt", "1", "--sim", "--act-format", "e4m3"), "e2m1 x e2m1 only"),
        (("--model", good, "--prompt", "1", "--generate", "-1"), "non-negative"),
    ]
    for args, message in cases:
        status, out, err = _run(capsys, *args)
        assert status == 2 and message in err and err.count("\n") == 1, (args, err)


SMALL_TILE_OPTIONS = ("--spad-words", "4096", "--lanes", "4", "--mac-rows", "2", "--mac-cols", "2",
                      "--interleave", "4", "--vpu-max-k", "4", "--vpu-rope-length", "32", "--kv-pages", "8",
                      "--kv-page-tokens", "4", "--kv-seqs", "8", "--kv-pages-per-seq", "4")


@pytest.mark.cocotb
def test_sim_runs_the_rtl_tile(tmp_path, capsys, checkpoints):
    """``--sim`` on the tile of the model regression (its Verilator build is shared): the RTL's
    cycles and their breakdown per phase in the report, the bit-exact line on stdout."""
    from verification.tile.model_run import SMALL_TILE

    assert SMALL_TILE.vpu_rope_length == 32 and SMALL_TILE.spad_words == 4096   # the options above
    report = tmp_path / "r.json"
    status, out, err = _run(capsys, "--model", str(checkpoints["tiny-llama"]), "--prompt", "5,6",
                            "--generate", "2", "--sim", "--report", str(report), *SMALL_TILE_OPTIONS)
    assert status == 0, out + err
    assert "sim: the RTL tile's logits and scratchpad equal" in out
    phases = json.loads(report.read_text())["phases"]
    assert [p["phase"] for p in phases] == ["prefill", "decode"]
    assert all(p["rtl_cycles"] > p["instructions"] for p in phases)
    split = ("gemm_cycles", "attn_cycles", "vop_cycles", "kv_cycles", "copy_cycles", "other_cycles")
    for p in phases:
        rtl = p["rtl"]
        assert rtl["cycles"] == p["rtl_cycles"] and rtl["instructions"] == p["instructions"]
        assert sum(rtl[name] for name in split) == rtl["cycles"]
        assert min(rtl[name] for name in split) > 0                    # every class runs in a phase
        assert rtl["weight_bytes"] >= p["weight_bytes"] and rtl["kv_bytes_written"] == p["kv_bytes_written"]
        assert rtl["kv_bytes_read"] >= p["kv_bytes_read"] > 0
        assert 0 < rtl["mac_utilization"] < 1
    assert "weight stalls" in out
