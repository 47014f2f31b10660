"""``poblano kv-trace``: golden replies, RTL replies equal to them, one-line errors for bad traces."""

import json
import random
import subprocess
import sys

import pytest

from poblano import cli
from verification.runner import SIMULATORS

#: A small controller: 8 pages of 4 records of 16 bits (4 hex digits), (22,16) SECDED.
SMALL = ["--pages", "8", "--page-tokens", "4", "--token-bits", "16", "--seqs", "4",
         "--max-pages-per-seq", "4", "--banks", "2"]


def _write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                            for line in lines))


def _kv_trace(capsys, *args):
    status = cli.main(["kv-trace", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _replies(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


SESSION = [
    {"op": "open", "seq": 0},
    {"op": "append", "seq": 0, "data": "00a1"},
    {"op": "append", "seq": 0, "data": "00A2"},
    {"op": "append", "seq": 0, "data": "ffff"},
    {"op": "read", "seq": 0, "start": 0, "count": 3},
    {"op": "fork", "src": 0, "dst": 1},
    {"op": "append", "seq": 1, "data": "1234"},          # copy-on-write of the shared tail
    {"op": "read", "seq": 1, "start": 2, "count": 2},
    {"op": "inject", "seq": 0, "pos": 1, "bits": [3]},
    {"op": "inject", "seq": 0, "pos": 2, "bits": [0, 17]},
    {"op": "read", "seq": 0, "start": 0, "count": 3},
    {"op": "stat"},
    {"op": "truncate", "seq": 0, "length": 1},
    {"op": "read", "seq": 0, "start": 0, "count": 2},
    {"op": "read", "seq": 0, "start": 0, "count": 0},
    {"op": "close", "seq": 1},
    {"op": "open", "seq": 0},
    {"op": "open", "seq": 9},
    {"op": "fork", "src": 2, "dst": 3},
    {"op": "close", "seq": 2},
    {"op": "stat"},
]

SESSION_REPLIES = [
    {"status": "ok"},
    {"status": "ok", "pos": 0},
    {"status": "ok", "pos": 1},
    {"status": "ok", "pos": 2},
    {"status": "ok", "data": ["00a1", "00a2", "ffff"]},
    {"status": "ok"},
    {"status": "ok", "pos": 3},
    {"status": "ok", "data": ["ffff", "1234"]},
    {"status": "ok"},
    {"status": "ok"},
    {"status": "ok", "data": ["00a1", "00a2", "fffe"], "poisoned": [2]},
    {"status": "ok", "free_pages": 6, "live_seqs": 2, "ecc_corrected": 1, "ecc_uncorrectable": 1},
    {"status": "ok"},
    {"status": "out_of_range"},
    {"status": "ok", "data": []},
    {"status": "ok"},
    {"status": "live"},
    {"status": "bad_seq"},
    {"status": "not_live"},
    {"status": "not_live"},
    {"status": "ok", "free_pages": 7, "live_seqs": 1, "ecc_corrected": 1, "ecc_uncorrectable": 1},
]


def test_golden_replies(tmp_path, capsys):
    _write(tmp_path / "t.jsonl", SESSION[:4] + [""] + SESSION[4:])          # blank lines are skipped
    status, out, _ = _kv_trace(capsys, "--trace", str(tmp_path / "t.jsonl"),
                               "--out", str(tmp_path / "r.jsonl"), "--golden", *SMALL)
    assert status == 0, out
    assert _replies(tmp_path / "r.jsonl") == SESSION_REPLIES
    assert f"{len(SESSION)} operations" in out


def _random_trace(seed, count=160):
    """A trace that exercises every operation and error, no_space included (8 small pages)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        op = rng.choices(["open", "append", "read", "fork", "truncate", "close", "stat", "inject"],
                         [2, 10, 4, 2, 2, 1.5, 1, 1])[0]
        seq = rng.randrange(5)
        if op == "append":
            lines.append({"op": op, "seq": seq, "data": f"{rng.getrandbits(16):04x}"})
        elif op == "read":
            lines.append({"op": op, "seq": seq, "start": rng.randrange(8), "count": rng.randrange(8)})
        elif op == "fork":
            lines.append({"op": op, "src": seq, "dst": rng.randrange(5)})
        elif op == "truncate":
            lines.append({"op": op, "seq": seq, "length": rng.randrange(10)})
        elif op == "inject":
            lines.append({"op": op, "seq": seq, "pos": rng.randrange(6),
                          "bits": rng.sample(range(22), rng.choice([1, 2]))})
        elif op == "stat":
            lines.append({"op": op})
        else:
            lines.append({"op": op, "seq": seq})
    # Then fill the pool: every slot opened, appends round robin until no_space and seq_full.
    lines += [{"op": "open", "seq": s} for s in range(4)]
    lines += [{"op": "append", "seq": k % 4, "data": f"{k:04x}"} for k in range(72)]
    lines += [{"op": "read", "seq": s, "start": 0, "count": 16} for s in range(4)]
    lines += [{"op": "stat"}]
    return lines


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_rtl_replies_equal_the_golden_model(tmp_path, capsys, sim):
    _write(tmp_path / "t.jsonl", SESSION + _random_trace(4))
    status, out, _ = _kv_trace(capsys, "--trace", str(tmp_path / "t.jsonl"),
                               "--out", str(tmp_path / "rtl.jsonl"), "--sim", sim, *SMALL)
    assert status == 0, out
    assert f"RTL ({sim}" in out
    status, _, _ = _kv_trace(capsys, "--trace", str(tmp_path / "t.jsonl"),
                             "--out", str(tmp_path / "golden.jsonl"), "--golden", *SMALL)
    assert status == 0
    rtl, golden = _replies(tmp_path / "rtl.jsonl"), _replies(tmp_path / "golden.jsonl")
    assert rtl[:len(SESSION_REPLIES)] == SESSION_REPLIES
    assert rtl == golden
    statuses = {r["status"] for r in golden}
    assert {"ok", "bad_seq", "not_live", "live", "out_of_range", "no_space", "seq_full"} <= statuses, \
        statuses


@pytest.mark.parametrize("line, message", [
    ("{not json", "trace line 2: not valid JSON"),
    ("[1, 2]", "trace line 2: expected a JSON object"),
    ('{"op": "push", "seq": 0}', "trace line 2: unknown op 'push'"),
    ('{"seq": 0}', "trace line 2: unknown op None"),
    ('{"op": "read", "seq": 0, "start": 0}', "trace line 2: read needs 'count'"),
    ('{"op": "close", "seq": 0, "length": 1}', "trace line 2: unexpected field 'length'"),
    ('{"op": "open", "seq": -1}', "trace line 2: seq must be a non-negative integer"),
    ('{"op": "open", "seq": true}', "trace line 2: seq must be a non-negative integer"),
    ('{"op": "truncate", "seq": 0, "length": 1.5}', "trace line 2: length must be a non-negative"),
    ('{"op": "append", "seq": 0, "data": "123"}', "trace line 2: data must be a string of exactly 4"),
    ('{"op": "append", "seq": 0, "data": "12345"}', "exactly 4 hex digits"),
    ('{"op": "append", "seq": 0, "data": "12g4"}', "exactly 4 hex digits"),
    ('{"op": "append", "seq": 0, "data": 4660}', "exactly 4 hex digits"),
    ('{"op": "inject", "seq": 0, "pos": 0, "bits": [22]}', "trace line 2: bits must be a list"),
    ('{"op": "inject", "seq": 0, "pos": 0, "bits": 3}', "trace line 2: bits must be a list"),
])
def test_malformed_line_is_a_one_line_error_naming_it(tmp_path, line, message):
    (tmp_path / "t.jsonl").write_text('{"op": "stat"}\n' + line + "\n" + '{"op": "stat"}\n')
    out = subprocess.run([sys.executable, "-m", "poblano.cli", "kv-trace", "--trace",
                          str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "r.jsonl"), "--golden",
                          *SMALL], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert lines[0].startswith("poblano kv-trace: error: ")
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("args, message", [
    (["--trace", "missing.jsonl", "--out", "r.jsonl", "--golden"], "trace file 'missing.jsonl' not found"),
    (["--trace", "t.jsonl", "--out", "no/such/dir/r.jsonl", "--golden"], "output directory"),
    (["--trace", "t.jsonl", "--out", "r.jsonl", "--page-tokens", "3"], "page_tokens must be a power of two"),
    (["--trace", "t.jsonl", "--out", "r.jsonl", "--sim", "modelsim"], "unknown simulator 'modelsim'"),
])
def test_bad_arguments(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text('{"op": "stat"}\n')
    status, _, err = _kv_trace(capsys, *args)
    assert status == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_default_data_width_is_sixteen_hex_digits(tmp_path, capsys):
    _write(tmp_path / "t.jsonl", [{"op": "open", "seq": 3},
                                  {"op": "append", "seq": 3, "data": "0123456789abcdef"},
                                  {"op": "read", "seq": 3, "start": 0, "count": 1}])
    status, _, _ = _kv_trace(capsys, "--trace", str(tmp_path / "t.jsonl"),
                             "--out", str(tmp_path / "r.jsonl"), "--golden")
    assert status == 0
    assert _replies(tmp_path / "r.jsonl")[-1] == {"status": "ok", "data": ["0123456789abcdef"]}
