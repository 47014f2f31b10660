"""VOP engine (with the sequencer and scratchpad) against the ISS: every vector operation, in place
and apart, broadcast operands, rows that wrap rope's rotated pass, and every VOP fault in order.

The vector unit is modelled at its streams (``verification.tile.sequencer_bench``), so these tests
check the engine's reads, passes, rotations and writes; the RTL vector unit joins in the tile's
cocotb regression."""

import dataclasses
import random

import numpy as np
import pytest

from sim_models.tile_isa import VOP_OPERANDS, VOPS, Instruction, TileConfig
from verification.tile.sequencer_bench import STATUS_CODE, check_against_iss

TILE = TileConfig(spad_words=512, lanes=4, kv_pages=8, kv_seqs=4, kv_max_pages_per_seq=4,
                  vpu_max_k=4, vpu_rope_length=16)
SPECIALS = [0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0, 0x00000001, 0x7F7FFFFF]


def I(name, **fields):  # noqa: E743 - reads like assembly
    return Instruction(name, fields)


def _fbits(x):
    return int(np.array(np.float32(x)).view(np.uint32))


def _words(rng, count, specials=True):
    values = np.array([rng.uniform(-4, 4) for _ in range(count)], dtype=np.float32).view(np.uint32)
    out = [int(v) for v in values]
    if specials and count > 4:
        for _ in range(2):
            out[rng.randrange(count)] = rng.choice(SPECIALS)
    return out


def _vop(op, length, rows, rng, *, dst, a=0, b=160, c=320, stride=None, bcast=0, **extra):
    stride = length if stride is None else stride
    fields = dict(op=VOPS.index(op), len=length, rows=rows, dst=dst, dst_s=stride, a=a, a_s=stride,
                  b=b, b_s=stride, c=c, c_s=stride, bcast=bcast)
    if op == "topk":
        fields["imm"] = rng.randint(1, min(length, TILE.vpu_max_k))
    elif op == "rmsnorm":
        fields["imm"] = _fbits(1e-5)
    elif op == "scale":
        fields["imm"] = _fbits(rng.uniform(-3, 3))
    elif op == "clamp":
        fields.update(imm=_fbits(-1.5), imm1_r=5)
    fields.update(extra)
    return I("VOP", **fields)


def _spad(rng, specials=True):
    return dict(enumerate(_words(rng, 480, specials)))


@pytest.mark.parametrize("op", VOPS)
def test_every_operation(op):
    rng = random.Random(VOPS.index(op))
    print(f"seed {VOPS.index(op)}")
    length = 12 if op == "rope" else rng.choice([5, 8, 11])
    program = [I("LI", rd=5, imm=_fbits(2.25)),
               _vop(op, length, 3, rng, dst=400, stride=length + 1), I("HALT")]
    rtl = check_against_iss(TILE, program, spad=_spad(rng, specials=op not in ("rope",)), seed=VOPS.index(op))
    assert rtl["status"] == 0 and len(rtl["vpu_commands"]) == 1


@pytest.mark.parametrize("op", ["add", "fma", "rmsnorm", "softmax", "rope", "topk", "sum", "swiglu"])
def test_in_place(op):
    rng = random.Random(100 + VOPS.index(op))
    length = 8 if op == "rope" else 7
    program = [_vop(op, length, 2, rng, dst=0, a=0, stride=8), I("HALT")]
    rtl = check_against_iss(TILE, program, spad=_spad(rng, specials=False), seed=5)
    assert rtl["status"] == 0


def test_broadcast_operands_and_row_strides():
    rng = random.Random(7)
    program = [I("LI", rd=2, imm=3),
               _vop("fma", 6, 4, rng, dst=400, a=10, a_r=2, b=200, c=300, bcast=0b110, stride=9),
               _vop("mul", 5, 3, rng, dst=440, a=40, b=200, b_s=0, stride=5),    # a repeated row
               _vop("scale", 9, 2, rng, dst=460, a=60, imm_r=2), I("HALT")]
    program[2].fields["b_s"] = 0
    rtl = check_against_iss(TILE, program, spad=_spad(rng), seed=7)
    assert rtl["status"] == 0


@pytest.mark.parametrize(("length", "rows"), [(2, 1), (6, 2), (10, 3), (16, 2)])
def test_rope_rotation_wraps_inside_a_beat(length, rows):
    rng = random.Random(length)
    program = [_vop("rope", length, rows, rng, dst=400, stride=length), I("HALT")]
    check_against_iss(TILE, program, spad=_spad(rng, specials=False), seed=length, gaps=0.0)


def test_rope_row_at_word_zero_of_an_odd_sized_scratchpad():
    """The wrapping second read of a rope row at word 0 starts below the scratchpad: its address
    wraps around the end (480 words, not a power of two), and the words it needs are right."""
    config = dataclasses.replace(TILE, spad_words=480)
    rng = random.Random(480)
    program = [_vop("rope", 10, 2, rng, dst=400, stride=10), I("HALT")]
    check_against_iss(config, program, spad=_spad(rng, specials=False), seed=3, gaps=0.0)


@pytest.mark.parametrize(("fields", "status"), [
    (dict(op=23), "bad_field"),
    (dict(len=0), "bad_field"),
    (dict(len=8193), "bad_field"),
    (dict(rows=0), "bad_field"),
    (dict(a=500), "spad_range"),                                   # a before the destination
    (dict(a=500, dst=510), "spad_range"),
    (dict(b=509), "spad_range"),
    (dict(dst=505), "spad_range"),
    (dict(dst=3), "bad_field"),                                    # partly over a
    (dict(dst=0, a_s=9), "bad_field"),                              # a's rows, another stride
    (dict(dst=0, bcast=1), "bad_field"),                            # a broadcast: not its rows
    (dict(dst=160, dst_s=8, b_s=8), "ok"),                          # exactly b's rows
    (dict(dst=160, len=8, dst_s=4, b_s=4), "bad_field"),            # b's rows overlap each other
    # topk in place: k values and k indices (2k words) must fit the row stride too
    (dict(op=VOPS.index("topk"), len=3, dst=0, dst_s=3, a_s=3, imm=2), "bad_field"),
    (dict(op=VOPS.index("topk"), len=3, dst=0, dst_s=4, a_s=4, imm=2), "ok"),
])
def test_faults_in_order(fields, status):
    rng = random.Random(1)
    base = dict(op=VOPS.index("add"), len=6, rows=2, dst=400, dst_s=8, a=0, a_s=8, b=160, b_s=8)
    base.update(fields)
    rtl = check_against_iss(TILE, [I("VOP", **base), I("HALT")], spad=_spad(rng), seed=1, gaps=0.0)
    assert rtl["status"] == STATUS_CODE[status]
    assert (len(rtl["vpu_commands"]) == 1) == (status == "ok"), "the unit sees only what it runs"


@pytest.mark.parametrize(("op", "extra", "length"), [
    ("topk", dict(imm=5), 8),             # above vpu_max_k
    ("topk", dict(imm=0), 8),
    ("topk", dict(imm=3), 2),             # above len
    ("rope", {}, 7),                      # odd
    ("rope", {}, 18),                     # above vpu_rope_length
    ("rmsnorm", dict(imm=0x7FC00000), 8),
    ("rmsnorm", dict(imm=_fbits(-1e-5)), 8),
    ("clamp", dict(imm=_fbits(2.0), imm1_r=5), 8),      # lo > hi (r5 = 1.0)
    ("clamp", dict(imm=0x7FC00000, imm1_r=5), 8),
])
def test_vector_unit_refusals_are_caught_before_it_runs(op, extra, length):
    rng = random.Random(2)
    program = [I("LI", rd=5, imm=_fbits(1.0)), _vop(op, length, 1, rng, dst=400, **extra), I("HALT")]
    rtl = check_against_iss(TILE, program, spad=_spad(rng), gaps=0.0)
    assert rtl["status"] == STATUS_CODE["vpu_refused"] and rtl["pc"] == 1 and not rtl["vpu_commands"]


@pytest.mark.parametrize("seed", range(10))
def test_random_vop_programs(seed):
    rng = random.Random(1000 + seed)
    print(f"seed {1000 + seed}")
    program = [I("LI", rd=5, imm=_fbits(3.0)), I("LI", rd=1, imm=rng.randrange(8))]
    for _ in range(rng.randrange(2, 5)):
        op = rng.choice(VOPS)
        length = rng.choice([2, 4, 6]) if op == "rope" else rng.randrange(1, 14)
        rows = rng.randrange(1, 4)
        stride = rng.choice([length, length + 3, 16])
        operands = {x: rng.choice([0, 100, 200, 300]) for x in "abc"}
        fields = dict(dst=rng.choice([380, 420, operands["a"]]), stride=stride,
                      a_r=rng.choice([0, 1]), bcast=rng.randrange(8) if rng.random() < 0.3 else 0,
                      **operands)
        if "a" not in VOP_OPERANDS[op]:
            fields["bcast"] = 0
        program.append(_vop(op, length, rows, rng, **fields))
    program.append(I("HALT"))
    check_against_iss(TILE, program, spad=_spad(rng), seed=seed)
