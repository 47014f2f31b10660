"""``poblano perf``: the table, JSON, and one-line errors with exit status 2."""

import json

import pytest

from poblano import cli


def _run(capsys, *args):
    status = cli.main(["perf", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_table(capsys):
    status, out, err = _run(capsys, "--model", "gpt-oss-120b", "--system", "jalapeno-b0-like",
                            "--concurrency", "1,64")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("gpt-oss-120b on jalapeno-b0-like: ISL 8192, OSL 1024")
    assert "| users | tok/s/user |" in lines[1] and "| bound | mapping |" in lines[1]
    assert [line.split("|")[1].strip() for line in lines[3:]] == ["1", "64"]


def test_json_on_a_checkpoint_directory(capsys):
    from sim_models.perf.model_desc import MODELS_DIR

    status, out, _ = _run(capsys, "--model", str(MODELS_DIR / "tiny-llama"), "--system", "poblano-tile",
                          "--isl", "64", "--osl", "2", "--concurrency", "1", "--json")
    assert status == 0
    data = json.loads(out)
    (p,) = data["points"]
    assert data["model"] == "tiny-llama" and p["bound"] == "compute" and p["dies"] == 1
    assert set(p["split"]) == {"compute", "hbm", "fabric", "d2d_latency", "d2d_bandwidth", "sync"}


@pytest.mark.parametrize("args, message", [
    (("--model", "nope", "--system", "poblano-tile"), "unknown model 'nope'"),
    (("--model", "tiny-llama", "--system", "nope"), "unknown system 'nope'"),
    (("--model", "deepseek-r1", "--system", "poblano-tile"), "does not fit poblano-tile"),
    (("--model", "tiny-llama", "--system", "poblano-tile", "--concurrency", "1,x"),
     "--concurrency must be comma-separated integers"),
    (("--model", "tiny-llama", "--system", "poblano-tile", "--concurrency", "0"), "at least 1"),
    (("--model", "tiny-llama", "--system", "poblano-tile", "--isl", "0"), "--isl and --osl"),
])
def test_errors(capsys, args, message):
    status, out, err = _run(capsys, *args)
    assert status == 2 and out == ""
    assert err.startswith("poblano perf: error: ") and message in err and err.count("\n") == 1


def test_malformed_system_file(capsys, tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text("name = 'x'\n[die\n")
    status, _, err = _run(capsys, "--model", "tiny-llama", "--system", str(bad))
    assert status == 2 and "not valid TOML" in err and err.count("\n") == 1


def test_plot_writes_a_png(capsys, tmp_path):
    path = tmp_path / "frontier.png"
    status, out, err = _run(capsys, "--model", "gpt-oss-120b", "--system", "jalapeno-b0-like",
                            "--concurrency", "1,16,256", "--objective", "die", "--plot", str(path))
    assert status == 0 and err == "" and out.startswith("gpt-oss-120b on jalapeno-b0-like")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


@pytest.mark.parametrize("name, message", [("missing/f.png", "--plot: no directory"),
                                           ("f.svg", "--plot writes a PNG")])
def test_plot_errors(capsys, tmp_path, name, message):
    status, out, err = _run(capsys, "--model", "tiny-llama", "--system", "poblano-tile", "--plot",
                            str(tmp_path / name))
    assert status == 2 and out == "" and message in err and err.count("\n") == 1
