"""Sequencer (with its scratchpad) against the instruction-level model: every implemented instruction,
every fault, host access, and random programs, compared state for state with ``TileIss``."""

import random

import numpy as np
import pytest

from rtl.tile.sequencer import Sequencer
from sim_models.tile_isa import Instruction, TileConfig, encode, encode_program
from verification.tile.sequencer_bench import STATUS_CODE, Bench, check_against_iss

TILE = TileConfig(spad_words=256, kv_pages=8, kv_seqs=4, kv_max_pages_per_seq=4)


def I(name, **fields):  # noqa: E743 - reads like assembly
    return Instruction(name, fields)


def _check(program, image=b"\0" * 64, **kwargs):
    return check_against_iss(TILE, program, image, **kwargs)


def _run(image, **kwargs):
    return Bench(TILE, image, **kwargs)


# -- scalar and control -------------------------------------------------------------------------------

def test_registers_branches_and_words():
    program = [I("LI", rd=1, imm=0xFFFF_FFFF), I("ADDI", rd=2, rs=1, imm=2), I("LI", rd=0, imm=5),
               I("LI", rd=3, imm=0), I("LI", rd=4, imm=3),
               I("STW", rs=3, addr=100, addr_r=3), I("ADDI", rd=3, rs=3, imm=1),     # loop: 5
               I("BLT", rs=3, rt=4, target=5),
               I("LDW", rd=5, addr=101), I("ADD", rd=6, rs=5, rt=2), I("BNE", rs=6, rt=0, target=12),
               I("LI", rd=7, imm=99), I("ADDI", rd=8, rs=6, imm=-3), I("HALT")]
    rtl = _check(program)
    assert rtl["status"] == 0 and rtl["regs"][8] == 0xFFFF_FFFF and rtl["steps"] == 5 + 9 + 3 + 2
    assert rtl["spad"][100:104] == [0, 1, 2, 0]
    assert rtl["activity"]["OTHER"] == rtl["cycles"]         # scalar and control only


def test_registers_set_by_the_host_survive_and_r0_stays_zero():
    rtl = _check([I("ADD", rd=3, rs=1, rt=2), I("HALT")], regs={0: 7, 1: 40, 2: 2})
    assert rtl["regs"][:4] == [0, 40, 2, 42]


@pytest.mark.parametrize(("program", "status", "pc"), [
    ([I("LI", rd=1, imm=1)], "pc_range", 1),
    ([I("LI", rd=1, imm=1), I("BNE", rs=0, rt=1, target=7)], "pc_range", 1),
    ([I("LI", rd=1, imm=1), I("BLT", rs=0, rt=1, target=2)], "pc_range", 1),
    ([I("LI", rd=1, imm=200), I("LDW", rd=2, addr=56, addr_r=1)], "spad_range", 1),
    ([I("LI", rd=1, imm=0xFFFF_FFFF), I("STW", rs=1, addr=1, addr_r=1)], "spad_range", 1),
    ([I("LI", rd=1, imm=5), I("STW", rs=1, addr=255), I("LDW", rd=2, addr=255), I("HALT")], "ok", None),
])
def test_control_and_scratchpad_faults(program, status, pc):
    rtl = _check(program)
    assert rtl["status"] == STATUS_CODE[status] and (pc is None or rtl["pc"] == pc)


def test_step_limit():
    program = [I("LI", rd=1, imm=1), I("BLT", rs=0, rt=1, target=0), I("HALT")]
    rtl = _check(program, step_limit=50)
    assert rtl["status"] == STATUS_CODE["step_limit"] and rtl["steps"] == 50


def test_bad_words_fault_where_they_are_reached():
    good = encode_program([I("LI", rd=1, imm=3), I("BNE", rs=1, rt=0, target=3)])
    bad_opcode = (0x63).to_bytes(32, "little")
    stray = (encode(I("LI", rd=1, imm=3)) | 1 << 200).to_bytes(32, "little")
    for word in (bad_opcode, stray):
        rtl = _check(good + word + encode_program([I("HALT")]))      # jumped over: no fault
        assert rtl["status"] == 0
        rtl = _check(good + word + word)
        assert rtl["status"] == STATUS_CODE["bad_opcode"] and rtl["pc"] == 3


def test_abort_stops_between_instructions():
    program = [I("LI", rd=1, imm=1), I("ADD", rd=2, rs=2, rt=1), I("BLT", rs=0, rt=1, target=1)]
    rtl = _run(b"").run(program, abort_after=40)
    assert rtl["status"] == STATUS_CODE["aborted"] and rtl["regs"][2] > 5


# -- weight memory ------------------------------------------------------------------------------------

TABLE = np.arange(40, dtype=np.float32).reshape(5, 8) + 0.5
WEIGHTS = b"\0" * 64 + TABLE.tobytes()


@pytest.mark.parametrize("data_bytes", [4, 8, 16])
def test_load_and_embed(data_bytes):
    program = [I("LI", rd=3, imm=2),
               I("LOAD", dst=10, words=8, w=64, w_r=3, w_stride=32),
               I("LOAD", dst=30, words=3, w=68),                            # unaligned to a beat
               I("EMBED", dst=40, ids=0, count=3, w=64, row=8, vocab=5), I("HALT")]
    rtl = _check(program, WEIGHTS, spad={0: 4, 1: 0, 2: 2}, data_bytes=data_bytes, seed=data_bytes)
    spad = np.array(rtl["spad"], dtype=np.uint32)
    assert np.array_equal(spad[10:18].view(np.float32), TABLE[2])
    assert np.array_equal(spad[40:64].view(np.float32).reshape(3, 8), TABLE[[4, 0, 2]])
    activity = rtl["activity"]
    assert activity["COPY"] >= 8 + 3 + 3 * 8                 # a word per cycle at best
    assert activity["COPY"] + activity["OTHER"] == rtl["cycles"]


@pytest.mark.parametrize(("program", "status"), [
    ([I("EMBED", dst=20, ids=0, count=2, w=64, row=8, vocab=5)], "token_range"),       # id 5 at word 1
    ([I("LOAD", dst=10, words=8, w=64 + 4 * 40 - 16)], "weight_range"),                 # past the end
    ([I("LOAD", dst=10, words=2, w=66)], "weight_range"),                               # misaligned
    ([I("LOAD", dst=10, words=0, w=64)], "bad_field"),
    ([I("LOAD", dst=250, words=8, w=64)], "spad_range"),
    ([I("EMBED", dst=20, ids=0, count=0, w=64, row=8, vocab=5)], "bad_field"),
    ([I("EMBED", dst=20, ids=0, count=2, w=64, row=0, vocab=5)], "bad_field"),
    ([I("EMBED", dst=20, ids=255, count=2, w=64, row=8, vocab=5)], "spad_range"),
    ([I("EMBED", dst=240, ids=0, count=3, w=64, row=8, vocab=9)], "spad_range"),
    ([I("EMBED", dst=20, ids=0, count=2, w=64, row=8, vocab=9)], "weight_range"),      # row 5 after row 0
])
def test_weight_faults(program, status):
    rtl = _check(program + [I("HALT")], WEIGHTS, spad={0: 0, 1: 5})
    assert rtl["status"] == STATUS_CODE[status] and rtl["pc"] == 0


def test_bus_error_response_stops_the_run():
    run = _run(WEIGHTS, bus_error_after=1)
    rtl = run.run([I("LOAD", dst=10, words=8, w=64), I("HALT")])
    assert rtl["status"] == STATUS_CODE["bus_error"] and rtl["pc"] == 0
    assert run.requests == [(64, 32)]


# -- GEMM dispatch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("status", ["ok", "weight_range"])
def test_gemm_goes_to_the_engine_with_its_registers_applied(status):
    bench = _run(WEIGHTS)
    bench.gemm_status = STATUS_CODE[status]
    program = [I("LI", rd=2, imm=7), I("LI", rd=3, imm=0xFFFF_FFFF),
               I("GEMM", dst=100, dst_r=2, src=10, src_r=3, m=3, k=64, n=40, w=(1 << 40) - 1, w_r=3,
                 w_stride=0xFFFF_FFFF, af=1, wf=3),
               I("LI", rd=4, imm=1), I("HALT")]
    rtl = bench.run(program)
    assert rtl["activity"]["GEMM"] >= 4                      # multiply, address, issue, wait
    assert rtl["activity"]["GEMM"] + rtl["activity"]["OTHER"] == rtl["cycles"]
    assert bench.gemm_commands == [dict(dst=107, src=10 + 0xFFFF_FFFF, m=3, k=64, n=40,
                                        w=(1 << 40) - 1 + 0xFFFF_FFFF ** 2, af=1, wf=3)]
    assert rtl["status"] == STATUS_CODE[status]
    assert rtl["regs"][4] == (1 if status == "ok" else 0) and rtl["pc"] == (4 if status == "ok" else 2)


# -- random programs ----------------------------------------------------------------------------------

def _random_program(rng, length):
    program = []
    for _ in range(length):
        kind = rng.choice(["LI", "ADD", "ADDI", "LDW", "STW", "BLT", "BNE", "LOAD", "EMBED"])
        r = lambda: rng.randrange(16)              # noqa: E731
        small = lambda: rng.choice([0, 0, 1, 2, 3, 8])  # noqa: E731
        if kind == "LI":
            fields = dict(rd=r(), imm=rng.choice([0, 1, 2, 3, 7, 250, 0xFFFF_FFFF, rng.getrandbits(32)]))
        elif kind in ("ADD",):
            fields = dict(rd=r(), rs=r(), rt=r())
        elif kind == "ADDI":
            fields = dict(rd=r(), rs=r(), imm=rng.randint(-4, 4))
        elif kind in ("LDW", "STW"):
            fields = dict(addr=rng.randrange(260), addr_r=rng.choice([0, 0, r()]),
                          **({"rd": r()} if kind == "LDW" else {"rs": r()}))
        elif kind in ("BLT", "BNE"):
            fields = dict(rs=r(), rt=r(), target=rng.randrange(length + 2))
        elif kind == "LOAD":
            fields = dict(dst=rng.randrange(250), dst_r=rng.choice([0, 0, r()]), words=rng.randrange(10),
                          w=rng.choice([0, 4, 64, 68, 200, 222]), w_r=rng.choice([0, r()]),
                          w_stride=small() * 4)
        else:
            fields = dict(dst=rng.randrange(240), dst_r=rng.choice([0, r()]), ids=rng.randrange(250),
                          ids_r=rng.choice([0, r()]), count=rng.randrange(4), w=64, w_r=rng.choice([0, r()]),
                          w_stride=small() * 4, row=rng.randrange(5), vocab=rng.randrange(8))
        program.append(I(kind, **fields))
    program.append(I("HALT"))
    return program


@pytest.mark.parametrize("seed", range(24))
def test_random_programs_match_the_iss(seed):
    rng = random.Random(seed)
    print(f"seed {seed}")
    spad = {a: rng.choice([0, 1, 2, 4, 7, rng.getrandbits(32)]) for a in rng.sample(range(256), 40)}
    program = _random_program(rng, rng.randrange(4, 16))
    _check(program, WEIGHTS, spad=spad, regs={r: rng.choice([0, 1, 2, 3]) for r in range(1, 16)},
           step_limit=200, seed=seed, data_bytes=rng.choice([4, 8]))


def test_bad_parameters():
    with pytest.raises(ValueError, match="prog_words"):
        Sequencer(TILE, prog_words=0)
    with pytest.raises(ValueError, match="data_bytes"):
        Sequencer(TILE, data_bytes=6)
