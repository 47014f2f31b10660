"""Attention engine (with the sequencer, scratchpad, VOP engine, KV engine and the RTL KV-cache
controller) against the ISS: prefill and decode steps, grouped-query heads, sequences longer than a
staging chunk, heads in sets, special values, every ATTN fault in order, and random configurations
(of the model and of the engine).

The vector unit is modelled at its streams (``verification.tile.sequencer_bench``); the RTL vector
unit joins in the tile's cocotb regression."""

import os
import random

import numpy as np
import pytest

from sim_models.tile_isa import Instruction, TileConfig
from verification.tile.sequencer_bench import check_against_iss

TILE = TileConfig(spad_words=512, lanes=4, kv_pages=8, kv_page_tokens=4, kv_seqs=6, kv_max_pages_per_seq=4,
                  vpu_max_k=4, vpu_rope_length=16)
HD = 32
SPECIALS = [0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0, 0x00000001, 0x7F7FFFFF]


def I(name, **fields):  # noqa: E743 - reads like assembly
    return Instruction(name, fields)


def _fbits(x):
    return int(np.array(np.float32(x)).view(np.uint32))


SCALE = _fbits(1 / np.sqrt(HD))


def _spad(rng, words=TILE.spad_words, spread=2.0, specials=0):
    spad = {a: _fbits(rng.uniform(-spread, spread)) for a in range(words)}
    for _ in range(specials):
        spad[rng.randrange(words)] = rng.choice(SPECIALS)
    return spad


def _attn(**fields):
    base = dict(layer=0, heads=4, kvh=2, hd=HD, count=1, dst=256, q=256, pos_r=1, seq_r=2, scale=SCALE)
    base.update(fields)
    return I("ATTN", **base)


def _append(count, **fields):
    base = dict(layer=0, kvh=2, hd=HD, count=count, k=0, v=128, pos_r=1, seq_r=2)
    base.update(fields)
    return I("KVAPPEND", **base)


def test_prefill_then_decode():
    """Two prompt tokens as one batch, then three decode steps that each append and attend."""
    rng = random.Random(1)
    program = [I("KVOPEN", seq=0, count=2), _append(2), _attn(count=2), I("LI", rd=1, imm=2)]
    for step in range(3):
        program += [_append(1, k=32 * step), _attn(dst=64 * step + 256, q=64 * step + 256),
                    I("ADDI", rd=1, rs=1, imm=1)]
    check_against_iss(TILE, program + [I("HALT")], spad=_spad(rng), max_cycles=100_000)


@pytest.mark.parametrize("stage_records", [8, 5, 1])
def test_longer_than_a_chunk(stage_records):
    """Twelve positions staged in chunks of eight (then four), five or one record."""
    rng = random.Random(2)
    program = [I("KVOPEN", seq=0, count=1),
               _append(6, kvh=1), I("LI", rd=1, imm=6),
               _append(6, kvh=1, k=192, v=320), I("LI", rd=1, imm=11),
               _attn(heads=2, kvh=1, q=448, dst=384), I("HALT")]
    check_against_iss(TILE, program, spad=_spad(rng), max_cycles=100_000,
                      attention={"stage_records": stage_records})


def test_special_values():
    """NaN, infinities, signed zeros, subnormals and the largest float in queries, K and V; huge
    scores that overflow and saturate softmax."""
    rng = random.Random(3)
    program = [I("KVOPEN", seq=1, count=2), I("LI", rd=2, imm=1),
               _append(3), _attn(count=3, heads=2, kvh=2, q=256, dst=256), I("HALT")]
    spad = _spad(rng, spread=40.0, specials=40)
    check_against_iss(TILE, program, spad=spad, max_cycles=100_000)


@pytest.mark.parametrize("max_group", [4, 3, 1])
def test_grouped_heads_and_layers(max_group):
    """Eight query heads on two KV heads of layer 1 (sequences 2 and 3 of the request at r2 = 0),
    queries and destination apart; the four heads of a KV head in one set, in sets of three and
    one, or one by one."""
    rng = random.Random(4)
    program = [I("KVOPEN", seq=0, count=4), _append(3, layer=1), _append(3, layer=0),
               I("LI", rd=1, imm=1), _attn(layer=1, heads=8, count=2, q=256, dst=0), I("HALT")]
    check_against_iss(TILE, program, spad=_spad(rng), max_cycles=200_000,
                      attention={"max_group": max_group, "stage_records": 2})


FAULTS = {
    "hd": (_attn(hd=64), "bad_field"),
    "kvh_zero": (_attn(kvh=0), "bad_field"),
    "count_zero": (_attn(count=0), "bad_field"),
    "heads_zero": (_attn(heads=0), "bad_field"),
    "heads_not_multiple": (_attn(heads=3), "bad_field"),
    "heads_below_kvh": (_attn(heads=1), "bad_field"),
    "queries_range": (_attn(q=500, dst=0), "spad_range"),
    "dst_range": (_attn(q=0, dst=400), "spad_range"),
    "partial_overlap": (_attn(q=256, dst=288), "bad_field"),
    "overlap_and_range": (_attn(q=256, dst=450), "spad_range"),
    "short_sequence": (_attn(count=2), "kv_error"),
    "beyond_max_len": (_attn(pos_r=3), "kv_error"),
    "wrapping_position": (_attn(pos_r=4), "kv_error"),
    "huge_sequence": (_attn(seq_r=5), "kv_error"),
    "not_open": (_attn(layer=1), "kv_error"),
    "no_such_sequence": (_attn(layer=3), "kv_error"),
}


@pytest.mark.parametrize("name", FAULTS)
def test_faults(name):
    """Each fault stops at the ATTN with the ISS's status; the scratchpad is untouched."""
    instruction, status = FAULTS[name]
    program = [I("KVOPEN", seq=0, count=2), _append(1), instruction, I("HALT")]
    out = check_against_iss(TILE, program, spad=_spad(random.Random(5)), max_cycles=100_000,
                            regs={3: 100, 4: 0xFFFF_FFFF, 5: 0xFFFF_FFFF})
    assert out["pc"] == 2 and out["status"] == {"bad_field": 2, "spad_range": 3, "kv_error": 5}[status]


def test_random_configurations():
    """Random heads, KV heads, prompt lengths and decode steps; seed in POBLANO_SEED or printed."""
    seed = int(os.environ.get("POBLANO_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (rerun with POBLANO_SEED={seed})")
    rng = random.Random(seed)
    for _ in range(3):
        kvh = rng.choice([1, 2])
        heads = kvh * rng.choice([1, 2, 3])
        attention = {"stage_records": rng.choice([1, 2, 3, 32]), "max_group": rng.choice([1, 2, 4])}
        print(f"attention engine {attention}, heads {heads}, KV heads {kvh}")
        prompt = rng.randint(1, 3)
        program = [I("KVOPEN", seq=rng.randint(0, 2), count=kvh), I("LI", rd=2, imm=0)]
        program[1] = I("LI", rd=2, imm=program[0].fields["seq"])
        program += [_append(prompt, kvh=kvh), _attn(heads=heads, kvh=kvh, count=prompt, q=256, dst=256),
                    I("LI", rd=1, imm=prompt)]
        for _ in range(rng.randint(0, 2)):
            program += [_append(1, kvh=kvh), _attn(heads=heads, kvh=kvh, q=384, dst=rng.choice([384, 0])),
                        I("ADDI", rd=1, rs=1, imm=1)]
        check_against_iss(TILE, program + [I("HALT")], spad=_spad(rng, specials=rng.randint(0, 4)),
                          seed=rng.randrange(1 << 16), max_cycles=200_000, attention=attention)
