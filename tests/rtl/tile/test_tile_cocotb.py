"""The whole compute tile on Verilator and Icarus: programs through the AXI4-Lite port, weights
through AXI4, the RTL vector unit behind the VOP engine, every result compared with the ISS."""

import random

import numpy as np
import pytest

from rtl.tile.tile import Tile
from sim_models import tile_weights
from sim_models.tile_isa import VOPS, Instruction, TileConfig
from verification.runner import SIMULATORS, run_cocotb
from verification.tile.tb_tile import write_cases

TILE = TileConfig(spad_words=1024, lanes=4, rows=2, cols=2, interleave=4, vpu_max_k=4,
                  vpu_rope_length=16, kv_pages=8, kv_seqs=4, kv_max_pages_per_seq=4)
PROG_WORDS = 128


def I(name, **fields):  # noqa: E743 - reads like assembly
    return Instruction(name, fields)


def _fbits(x):
    return int(np.array(np.float32(x)).view(np.uint32))


def _cases():
    rng = random.Random(24)
    table = np.arange(48, dtype=np.float32).reshape(6, 8) * 0.25 - 3
    image = b"\0" * 64 + table.tobytes()
    values = np.array([rng.uniform(-3, 3) for _ in range(512)], dtype=np.float32).view(np.uint32)
    spad = {a: int(v) for a, v in enumerate(values)}
    spad.update({600: 4, 601: 0, 602: 5})                             # token ids
    for a, special in zip((3, 17, 40, 77), (0x7FC00000, 0x7F800000, 0x80000000, 0x00000005), strict=True):
        spad[a] = special
    scalar = [I("LI", rd=1, imm=0xFFFF_FFFF), I("ADDI", rd=2, rs=1, imm=2), I("LI", rd=3, imm=0),
              I("LI", rd=4, imm=3), I("STW", rs=3, addr=700, addr_r=3), I("ADDI", rd=3, rs=3, imm=1),
              I("BLT", rs=3, rt=4, target=4), I("LDW", rd=5, addr=701), I("HALT")]
    copies = [I("LI", rd=3, imm=2), I("LOAD", dst=700, words=8, w=64, w_r=3, w_stride=32),
              I("LOAD", dst=710, words=3, w=68),
              I("EMBED", dst=720, ids=600, count=3, w=64, row=8, vocab=6), I("HALT")]
    vops = [I("LI", rd=5, imm=_fbits(1.5))]
    for i, op in enumerate(VOPS):
        length = 10 if op == "rope" else 9                            # rope: beats that wrap
        f = dict(op=i, len=length, rows=2, dst=520 + 20 * i, dst_s=length, a=8 * i, a_s=length,
                 b=200 + 4 * i, b_s=length, c=320 + 3 * i, c_s=length)
        if op == "topk":
            f["imm"] = 3
        elif op == "rmsnorm":
            f["imm"] = _fbits(1e-5)
        elif op in ("scale", "clamp"):
            f.update(imm=_fbits(-0.75), imm1_r=5)
        vops += [I("VOP", **f), I("STW", rs=0, addr=1000 + i)]          # a marker between results
    vops.append(I("HALT"))
    in_place = [I("VOP", op=VOPS.index("rope"), len=8, rows=3, dst=100, dst_s=8, a=100, a_s=8, b=200,
                  b_s=0, c=300, c_s=0),
                I("VOP", op=VOPS.index("rmsnorm"), len=6, rows=2, dst=0, dst_s=6, a=0, a_s=6, b=400, b_s=0,
                  imm=_fbits(1e-6)),
                I("VOP", op=VOPS.index("softmax"), len=11, rows=2, dst=40, dst_s=16, a=40, a_s=16), I("HALT")]
    faults = [I("LI", rd=1, imm=1), I("VOP", op=VOPS.index("topk"), len=8, rows=1, dst=900, imm=5),
              I("HALT")]
    weight_fault = [I("LOAD", dst=700, words=8, w=64 + 4 * 48 - 16), I("HALT")]
    cases = [dict(name=name, program=program, image=image, spad=spad, regs={7: 7})
             for name, program in (("scalar", scalar), ("copies", copies), ("every_vop", vops),
                                   ("in_place", in_place), ("vpu_refused", faults),
                                   ("weight_range", weight_fault))]
    # GEMMs on the RTL quantizer and MAC array, a partial last N-tile, then a VOP on their output
    nprng = np.random.default_rng(5)
    codes = nprng.integers(0, 16, size=(64, 20), dtype=np.uint8)
    scales = nprng.integers(118, 136, size=(2, 20), dtype=np.uint8)
    weights = b"\0" * 64 + tile_weights.pack_mx(codes, scales, "e2m1", TILE.tile_cols).tobytes()
    gemm = [I("LI", rd=3, imm=1),
            I("GEMM", dst=600, src=0, m=3, k=64, n=20, w=64, af=0, wf=0),
            I("GEMM", dst=700, dst_r=3, src=100, m=1, k=64, n=20, w=0, w_r=3, w_stride=64),
            I("VOP", op=VOPS.index("add"), len=20, rows=1, dst=800, a=600, b=701), I("HALT")]
    cases.append(dict(name="gemm", program=gemm, image=weights, spad=spad))
    # KV kept in the tile: a prompt of three positions appended and attended as one batch, then a
    # decode step; the RTL KV-cache controller, KV and attention engines and vector unit. The KV
    # cache lives on from case to case (the ISS starts each afresh): the fault opens sequences 0
    # and 1, the attention case uses 2 and 3 (r2 = 2).
    scale = _fbits(1 / np.sqrt(32))
    attention = [I("KVOPEN", seq=0, seq_r=2, count=2),
                 I("KVAPPEND", layer=0, kvh=2, hd=32, count=3, k=0, v=192, pos_r=0, seq_r=2),
                 I("ATTN", layer=0, heads=4, kvh=2, hd=32, count=3, dst=384, q=384, pos_r=0, seq_r=2,
                   scale=scale),
                 I("LI", rd=1, imm=3),
                 I("KVAPPEND", layer=0, kvh=2, hd=32, count=1, k=32, v=224, pos_r=1, seq_r=2),
                 I("ATTN", layer=0, heads=4, kvh=2, hd=32, count=1, dst=800, q=0, pos_r=1, seq_r=2,
                   scale=scale), I("HALT")]
    kv_fault = [I("KVOPEN", seq=1, count=1), I("KVOPEN", seq=0, count=2), I("HALT")]   # 1 is live
    cases += [dict(name="kv_error", program=kv_fault, image=image, spad=spad),
              dict(name="attention", program=attention, image=image, spad=spad, regs={2: 2})]
    return cases


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMULATORS)
def test_tile_programs_match_the_iss(sim, tmp_path):
    cases = tmp_path / "cases.json"
    write_cases(cases, TILE, _cases())
    tile = {k: getattr(TILE, k) for k in ("spad_words", "lanes", "rows", "cols", "interleave", "vpu_max_k",
                                           "vpu_rope_length", "kv_pages", "kv_seqs", "kv_max_pages_per_seq")}
    run_cocotb(lambda: Tile(TILE, prog_words=PROG_WORDS), toplevel="tile",
               config={"tile": tile, "prog_words": PROG_WORDS},
               test_module="verification.tile.tb_tile", sim=sim,
               testcase="programs_match_the_iss", extra_env={"POBLANO_TILE_CASES": str(cases)},
               ports_only=True)
