"""``poblano model init``: random checkpoints that load back, and one-line errors with exit status 2."""

import json
from pathlib import Path

import numpy as np
import pytest

from poblano import cli
from sim_models import checkpoint as ck

MODELS = Path(__file__).resolve().parents[2] / "models"


def _run(capsys, *args):
    status = cli.main(["model", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("kind", ["tiny-llama", "tiny-mixtral"])
def test_init_writes_a_loadable_checkpoint(tmp_path, capsys, kind):
    config = MODELS / kind / "config.json"
    status, out, err = _run(capsys, "init", "--config", str(config), "--out", str(tmp_path / "m"),
                            "--seed", "5")
    assert status == 0 and err == ""
    assert "seed 5" in out and "parameters" in out
    loaded = ck.load_checkpoint(tmp_path / "m")
    assert loaded.config == ck.load_config(config)
    expected = ck.random_weights(loaded.config, 5)
    assert all(np.array_equal(loaded.tensors[n], expected[n]) for n in expected)


def test_init_is_reproducible_and_refuses_to_overwrite(tmp_path, capsys):
    config = str(MODELS / "tiny-llama" / "config.json")
    assert _run(capsys, "init", "--config", config, "--out", str(tmp_path / "a"))[0] == 0
    assert _run(capsys, "init", "--config", config, "--out", str(tmp_path / "b"))[0] == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == \
        (tmp_path / "b" / "model.safetensors").read_bytes()
    status, _, err = _run(capsys, "init", "--config", config, "--out", str(tmp_path / "a"), "--seed", "1")
    assert status == 2 and "already holds config.json" in err and err.count("\n") == 1
    assert _run(capsys, "init", "--config", config, "--out", str(tmp_path / "a"), "--seed", "1",
                "--force")[0] == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != \
        (tmp_path / "b" / "model.safetensors").read_bytes()


def _config(tmp_path, **changes):
    raw = json.loads((MODELS / "tiny-mixtral" / "config.json").read_text())
    raw.update(changes)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize(("changes", "message"), [
    ({"architectures": ["BertModel"]}, "unsupported architecture 'BertModel'"),
    ({"hidden_size": 80}, "hidden_size is 80, not a multiple of 32"),
    ({"head_dim": 24}, "head_dim is 24, not a multiple of 32"),
    ({"intermediate_size": 120}, "intermediate_size is 120, not a multiple of 32"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok (9) exceeds num_local_experts (4)"),
])
def test_init_config_errors(tmp_path, capsys, changes, message):
    status, out, err = _run(capsys, "init", "--config", _config(tmp_path, **changes),
                            "--out", str(tmp_path / "m"))
    assert status == 2 and out == ""
    assert err.startswith("poblano model: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "m").exists()


def test_init_file_errors(tmp_path, capsys):
    status, _, err = _run(capsys, "init", "--config", str(tmp_path / "none.json"), "--out", str(tmp_path))
    assert status == 2 and "not found" in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    status, _, err = _run(capsys, "init", "--config", str(bad), "--out", str(tmp_path / "m"))
    assert status == 2 and "not valid JSON" in err and err.count("\n") == 1
    (tmp_path / "file").write_text("")
    status, _, err = _run(capsys, "init", "--config", str(MODELS / "tiny-llama" / "config.json"),
                          "--out", str(tmp_path / "file"))
    assert status == 2 and "is not a directory" in err
    status, _, err = _run(capsys, "init", "--config", str(MODELS / "tiny-llama" / "config.json"),
                          "--out", str(tmp_path / "m"), "--seed", "-1")
    assert status == 2 and "--seed" in err


def test_model_needs_an_action(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["model"])
    assert info.value.code == 2
    assert "ACTION" in capsys.readouterr().err
