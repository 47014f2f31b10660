"""The tile's instruction set and instruction-level model, instruction by instruction: encoding,
the weight layout, each instruction's effect against the golden operations, counters and faults."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_models import mx, tile_isa, tile_weights, vpu
from sim_models import transformer as tf
from sim_models.tile_isa import FORMATS, INSTRUCTIONS, VOPS, Instruction, IsaError, TileConfig
from sim_models.tile_iss import TileFault, TileIss

DETERMINISTIC = settings(derandomize=True, deadline=None, max_examples=60)
TILE = TileConfig(spad_words=4096, kv_pages=8, kv_seqs=4, kv_max_pages_per_seq=4)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def I(name, **fields):  # noqa: E743 - reads like assembly
    return Instruction(name, fields)


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _fbits(value):
    return int(np.array(np.float32(value)).view(np.uint32))


def _iss(weights=b"\0" * 64, head_dim=32, tile=TILE):
    return TileIss(tile, weights, head_dim)


def _fault(iss, program, status):
    with pytest.raises(TileFault) as info:
        iss.run(program)
    assert info.value.status_name == status, str(info.value)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"instruction {info.value.pc} (")
    return info.value


# -- encoding ---------------------------------------------------------------------------------------

@st.composite
def _instructions(draw):
    name = draw(st.sampled_from(sorted(INSTRUCTIONS)))
    fields = {}
    for f in INSTRUCTIONS[name][1]:
        if f.kind == "s":
            fields[f.name] = draw(st.integers(-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1))
        else:
            fields[f.name] = draw(st.integers(0, (1 << f.bits) - 1))
    return Instruction(name, fields)


@DETERMINISTIC
@given(st.lists(_instructions(), min_size=1, max_size=8))
def test_encoding_round_trips(program):
    image = tile_isa.encode_program(program)
    assert len(image) == 32 * len(program)
    assert tile_isa.decode_program(image) == program


def test_encoding_errors():
    with pytest.raises(IsaError, match="does not fit 4 bits"):
        tile_isa.encode(I("LI", rd=16))
    with pytest.raises(IsaError, match="signed"):
        tile_isa.encode(I("ADDI", imm=1 << 31))
    with pytest.raises(IsaError, match="unknown opcode 200"):
        tile_isa.decode(200)
    with pytest.raises(IsaError, match="bits above"):
        tile_isa.decode(1 | 1 << 100)
    with pytest.raises(IsaError, match="no field 'x'"):
        I("GEMM", x=1)
    with pytest.raises(IsaError, match="unknown instruction"):
        I("JUMP")


def test_vector_operations_follow_the_rtl_numbering():
    from rtl.vpu import layouts
    assert VOPS == tuple(op.name.lower() for op in layouts.Op)
    assert tile_isa.VOP_OPERANDS == {op.name.lower(): s for op, s in layouts.OPERANDS.items()}
    assert tile_isa.VOP_PASSES == {op.name.lower(): n for op, n in layouts.PASSES.items()}
    assert FORMATS == mx.FORMATS


def test_docs_hold_the_encoding_table():
    assert tile_isa.encoding_table() in (DOCS / "tile_isa.md").read_text()


def test_tile_config_validation():
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        TileConfig(lanes=6)
    with pytest.raises(ValueError, match="spad_words must be a positive integer"):
        TileConfig(spad_words=0)
    for bad in (("e9m9",), (), ["e2m1"], ("e2m1", "e2m1")):
        with pytest.raises(ValueError, match="mac_formats must be"):
            TileConfig(mac_formats=bad)
    assert TileConfig().tile_cols == 32 and TileConfig().mac_formats == ("e2m1",)


# -- weight layout ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n,tile_cols", [(40, 32), (7, 32), (64, 8)])
def test_weight_layout_round_trips(fmt, n, tile_cols):
    rng = np.random.default_rng(3)
    codes, scales = mx.quantize(rng.normal(size=(n, 64)).astype(np.float32), "floor", format=fmt)
    b_codes, b_scales = codes.T.copy(), scales.T.copy()
    data = tile_weights.pack_mx(b_codes, b_scales, fmt, tile_cols)
    assert data.size == tile_weights.mx_bytes(64, n, fmt) == 2 * n * (4 * mx.element_format(fmt).bits + 1)
    back = tile_weights.unpack_mx(data, 64, n, fmt, tile_cols)
    assert np.array_equal(back[0], b_codes) and np.array_equal(back[1], b_scales)


def test_weight_layout_is_the_b_stream_order():
    codes = np.zeros((64, 3), dtype=np.uint8)
    codes[0, 0], codes[1, 0], codes[32, 2] = 1, 2, 5
    scales = np.array([[10, 11, 12], [13, 14, 15]], dtype=np.uint8)
    data = tile_weights.pack_mx(codes, scales, "e2m1", 2)
    # tile 0 (columns 0, 1): k-block 0 col 0, col 1, k-block 1 col 0, col 1; tile 1: column 2
    assert data[0] == 0x21 and data[16] == 10 and data[17 + 16] == 11
    assert list(data[17 * 2 + 16::17][:2]) == [13, 14]
    assert data[17 * 4 + 16] == 12 and data[17 * 5] == 5 and data[17 * 5 + 16] == 15


# -- scalar, control, scratchpad --------------------------------------------------------------------

def test_registers_branches_and_words():
    iss = _iss()
    program = [I("LI", rd=1, imm=0xFFFF_FFFF), I("ADDI", rd=2, rs=1, imm=2), I("LI", rd=0, imm=5),
               I("LI", rd=3, imm=0), I("LI", rd=4, imm=3),
               I("STW", rs=3, addr=100, addr_r=3), I("ADDI", rd=3, rs=3, imm=1),     # loop: 5
               I("BLT", rs=3, rt=4, target=5),
               I("LDW", rd=5, addr=101), I("ADD", rd=6, rs=5, rt=2), I("BNE", rs=6, rt=0, target=12),
               I("LI", rd=7, imm=99), I("HALT")]
    assert iss.run(program) == 5 + 3 * 3 + 3 + 1
    assert iss.regs[:8] == [0, 0xFFFF_FFFF, 1, 3, 3, 1, 2, 0]
    assert list(iss.spad[100:104]) == [0, 1, 2, 0]
    assert iss.counters()["by_opcode"]["BLT"] == 3


def test_control_faults():
    _fault(_iss(), [I("LI", rd=1, imm=1)], "pc_range")
    assert _fault(_iss(), [I("LI", rd=1, imm=1), I("BNE", rs=0, rt=1, target=7)], "pc_range").pc == 1
    _fault(_iss(), [I("LI", rd=1, imm=1), I("BLT", rs=0, rt=1, target=2)], "pc_range")
    with pytest.raises(TileFault, match="step_limit"):
        _iss().run([I("LI", rd=1, imm=1), I("BLT", rs=0, rt=1, target=0), I("HALT")], max_steps=50)
    fault = _fault(_iss(), [I("LI", rd=1, imm=4000), I("LDW", rd=2, addr=96, addr_r=1)], "spad_range")
    assert fault.pc == 1 and "(LDW)" in str(fault)
    with pytest.raises(TileFault, match="bad_opcode"):
        _iss().run(b"\x63" + b"\0" * 31)


# -- weight memory ----------------------------------------------------------------------------------

def test_load_and_embed():
    table = np.arange(40, dtype=np.float32).reshape(5, 8) + 0.5
    weights = b"\0" * 64 + table.tobytes()
    iss = _iss(weights)
    iss.write_words(0, np.array([4, 0, 2], dtype=np.uint32))
    iss.run([I("LI", rd=3, imm=2),
             I("LOAD", dst=10, words=8, w=64, w_r=3, w_stride=32),
             I("EMBED", dst=20, ids=0, count=3, w=64, row=8, vocab=5), I("HALT")])
    assert np.array_equal(iss.read_floats(10, 8), table[2])
    assert np.array_equal(iss.read_floats(20, 24).reshape(3, 8), table[[4, 0, 2]])
    assert iss.counters()["weight_bytes"] == 32 + 3 * 32
    iss.write_words(0, np.array([5], dtype=np.uint32))
    assert "token id 5" in str(_fault(iss, [I("EMBED", dst=20, ids=0, count=1, w=64, row=8, vocab=5)],
                                      "token_range"))
    _fault(iss, [I("LOAD", dst=10, words=8, w=64 + 4 * 40 - 16)], "weight_range")
    _fault(iss, [I("LOAD", dst=10, words=1, w=66)], "weight_range")
    _fault(iss, [I("LOAD", dst=4090, words=8, w=64)], "spad_range")
    _fault(iss, [I("LOAD", dst=10, words=0, w=64)], "bad_field")


# -- MAC array --------------------------------------------------------------------------------------

@pytest.mark.parametrize("afmt,wfmt,buffer_beats", [("e2m1", "e2m1", 1024), ("e4m3", "e2m1", 24),
                                                     ("e2m3", "e5m2", 23)])
def test_gemm_equals_the_mx_layer(afmt, wfmt, buffer_beats):
    """The MX layer's result and the counters; the weight (k / 32 * interleave = 24 B beats an
    N-tile) is streamed once when the B buffer holds an N-tile, else once per M-tile."""
    rng = np.random.default_rng(7)
    m, k, n = 5, 96, 40
    layer = tf.MXLinear(rng.normal(size=(n, k)).astype(np.float32), wfmt)
    packed = tile_weights.pack_mx(layer.codes, layer.scales, wfmt, TILE.tile_cols).tobytes()
    weights = b"\0" * 128 + packed + packed           # two "experts" at a stride of len(packed)
    x = rng.normal(size=(m, k)).astype(np.float32)
    iss = _iss(weights, tile=replace(TILE, mac_formats=FORMATS, weight_buffer_beats=buffer_beats))
    iss.write_words(0, x)
    iss.run([I("LI", rd=4, imm=1),
             I("GEMM", dst=1000, src=0, m=m, k=k, n=n, w=128, w_r=4, w_stride=len(packed),
               af=FORMATS.index(afmt), wf=FORMATS.index(wfmt)), I("HALT")])
    assert np.array_equal(_bits(iss.read_floats(1000, m * n).reshape(m, n)), _bits(layer(x, afmt)))
    counts = iss.counters()
    m_tiles = 1 if buffer_beats >= 24 else 2                               # ceil(5 / 4) M-tiles
    assert counts["weight_bytes"] == m_tiles * len(packed)
    assert counts["mac_block_pairs"] == m * n * 3
    assert counts["mac_beats"] == 2 * 2 * 3 * 8 and counts["quantizer_blocks"] == m * 3


def test_gemm_faults():
    iss = _iss(b"\0" * 4096)
    _fault(iss, [I("GEMM", dst=100, src=0, m=1, k=48, n=4)], "bad_field")
    _fault(iss, [I("GEMM", dst=100, src=0, m=0, k=32, n=4)], "bad_field")
    _fault(iss, [I("GEMM", dst=100, src=0, m=1, k=32, n=4, af=7)], "bad_field")
    assert "the MAC array runs e2m1 only" in str(
        _fault(iss, [I("GEMM", dst=100, src=0, m=1, k=32, n=4, af=3)], "bad_field"))
    _fault(_iss(b"\0" * 4096, tile=replace(TILE, mac_formats=("e2m1", "e4m3"))),
           [I("GEMM", dst=100, src=0, m=1, k=32, n=4, wf=4)], "bad_field")
    _fault(iss, [I("GEMM", dst=4090, src=0, m=1, k=32, n=8)], "spad_range")
    _fault(iss, [I("GEMM", dst=100, src=0, m=1, k=32, n=8, w=4000)], "weight_range")


# -- vector unit ------------------------------------------------------------------------------------

_GOLDEN = {
    "add": lambda a, b, c: vpu.add(a, b), "sub": lambda a, b, c: vpu.sub(a, b),
    "mul": lambda a, b, c: vpu.mul(a, b), "fma": vpu.fma, "max": lambda a, b, c: vpu.max(a, b),
    "min": lambda a, b, c: vpu.min(a, b), "scale": lambda a, b, c: vpu.scale(a, np.float32(0.75)),
    "clamp": lambda a, b, c: vpu.clamp(a, np.float32(-0.5), np.float32(0.5)),
    "swiglu": lambda a, b, c: vpu.swiglu(a, b),
    "to_bf16": lambda a, b, c: vpu.to_bfloat16(a).astype(np.uint32).view(np.float32),
    "from_bf16": lambda a, b, c: vpu.from_bfloat16(vpu.to_bfloat16(a)),
    "sum": lambda a, b, c: vpu.sum(a, lanes=8)[:, None],
    "sum_squares": lambda a, b, c: vpu.sum_squares(a, lanes=8)[:, None],
    "max_reduce": lambda a, b, c: vpu.max_reduce(a)[:, None],
    "rmsnorm": lambda a, b, c: vpu.rmsnorm(a, b, np.float32(1e-5), lanes=8),
    "softmax": lambda a, b, c: vpu.softmax(a), "rope": vpu.rope,
} | {op: (lambda f: lambda a, b, c: f(a))(vpu.UNARY[op]) for op in vpu.UNARY}


@pytest.mark.parametrize("op", [op for op in VOPS if op != "topk"])
def test_vop_equals_the_vector_unit(op):
    rng = np.random.default_rng(VOPS.index(op))
    rows, length, stride = 3, 20, 24
    data = {name: _f32(rng.normal(size=(rows, stride)) * 2) for name in "abc"}
    if op == "from_bf16":
        data["a"] = vpu.to_bfloat16(data["a"]).astype(np.uint32).view(np.float32)
    iss = _iss()
    for i, name in enumerate("abc"):
        iss.write_words(1000 * i, data[name])
    scalar = {"scale": _fbits(0.75), "clamp": _fbits(-0.5), "rmsnorm": _fbits(1e-5)}.get(op, 0)
    iss.run([I("LI", rd=9, imm=_fbits(0.5)),
             I("VOP", op=VOPS.index(op), len=length, rows=rows, dst=3000, dst_s=stride, a=0, a_s=stride,
               b=1000, b_s=stride, c=2000, c_s=stride, imm=scalar, imm1_r=9), I("HALT")])
    a, b, c = (data[n][:, :length] for n in "abc")
    if op == "from_bf16":
        expected = vpu.from_bfloat16((_bits(a) & 0xFFFF).astype(np.uint16))
    else:
        expected = _GOLDEN[op](a, b, c)
    width = expected.shape[1]
    got = iss.read_floats(3000, rows * stride).reshape(rows, stride)[:, :width]
    assert np.array_equal(_bits(got), _bits(expected))
    assert iss.counters()["vpu_elements"] == rows * length * tile_isa.VOP_PASSES.get(op, 1)


def test_vop_broadcasts_registers_and_topk():
    iss = _iss()
    x = _f32([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    iss.write_words(0, x)
    iss.write_words(100, _f32([0.5, 0.25]))
    iss.write_words(200, _f32([0.0]))
    iss.run([I("LI", rd=5, imm=3),
             I("VOP", op=VOPS.index("topk"), len=8, rows=2, dst=300, dst_s=6, a=0, a_s=8, imm_r=5),
             I("VOP", op=VOPS.index("fma"), len=8, rows=2, dst=400, dst_s=8, a=100, a_s=1, b=0, b_s=8,
               c=200, bcast=0b101), I("HALT")])
    values, index = vpu.topk(x, 3)
    got = iss.spad[300:312].reshape(2, 6)
    assert np.array_equal(got[:, :3].view(np.float32), values) and np.array_equal(got[:, 3:], index)
    expected = vpu.fma(np.broadcast_to(_f32([[0.5], [0.25]]), x.shape), x, np.zeros_like(x))
    assert np.array_equal(iss.read_floats(400, 16).reshape(2, 8), expected)


def test_vop_faults():
    iss = _iss()
    topk = VOPS.index("topk")
    assert "k must be" in str(_fault(iss, [I("VOP", op=topk, len=4, rows=1, imm=5)], "vpu_refused"))
    _fault(iss, [I("VOP", op=31, len=4, rows=1)], "bad_field")
    _fault(iss, [I("VOP", op=0, len=0, rows=1)], "bad_field")
    _fault(iss, [I("VOP", op=0, len=4, rows=0)], "bad_field")
    _fault(iss, [I("VOP", op=0, len=8, rows=2, a=4088, a_s=8)], "spad_range")
    _fault(iss, [I("VOP", op=0, len=8, rows=2, dst=4088, dst_s=1)], "spad_range")
    _fault(iss, [I("VOP", op=VOPS.index("rope"), len=5, rows=1)], "vpu_refused")


def test_vop_limits_of_the_vector_unit_and_overlaps():
    iss = _iss()
    topk, rope, add = VOPS.index("topk"), VOPS.index("rope"), VOPS.index("add")
    assert "max_k" in str(_fault(iss, [I("VOP", op=topk, len=16, rows=1, dst=100, imm=9)], "vpu_refused"))
    assert "rope_length" in str(_fault(iss, [I("VOP", op=rope, len=258, rows=1, dst=1000, b=300, c=600)],
                                       "vpu_refused"))
    # the destination is checked before the unit could refuse
    _fault(iss, [I("VOP", op=topk, len=16, rows=1, dst=4090, imm=9)], "spad_range")
    # in place: the very rows of an operand; a partial overlap is refused
    iss.run([I("VOP", op=add, len=8, rows=3, dst=16, dst_s=8, a=16, a_s=8, b=100, b_s=8), I("HALT")])
    for bad in (dict(a=17, a_s=8), dict(a=16, a_s=9), dict(a=16, a_s=4), dict(a=16, a_s=8, bcast=1)):
        assert "overlaps operand a" in str(_fault(
            iss, [I("VOP", op=add, len=8, rows=3, dst=16, dst_s=8, b=100, b_s=8, **bad)], "bad_field"))
    iss.run([I("VOP", op=add, len=8, rows=3, dst=16, dst_s=8, a=40, a_s=8, b=100), I("HALT")])


# -- KV cache and attention -------------------------------------------------------------------------

def test_kv_append_and_attention_equal_the_golden_attention():
    rng = np.random.default_rng(11)
    hd, kvh, heads, t = 32, 2, 4, 5
    iss = _iss()
    k, v = (_f32(rng.normal(size=(t, kvh * hd))) for _ in range(2))
    q = _f32(rng.normal(size=(t, heads * hd)))
    iss.write_words(0, k)
    iss.write_words(400, v)
    iss.write_words(800, q)
    scale = tf.attention_scale(hd)
    common = dict(layer=1, kvh=kvh, hd=hd, pos_r=1)
    iss.run([I("KVOPEN", count=4),
             I("KVAPPEND", count=2, k=0, v=400, **common),
             I("LI", rd=1, imm=2),
             I("KVAPPEND", count=3, k=2 * kvh * hd, v=400 + 2 * kvh * hd, **common),
             I("ATTN", heads=heads, count=3, dst=1600, q=800 + 2 * heads * hd, scale=_fbits(scale),
               **common), I("HALT")])
    cache = tf.KVCache(2, kvh, hd)
    cache.append(1, k.reshape(t, kvh, hd).transpose(1, 0, 2), v.reshape(t, kvh, hd).transpose(1, 0, 2))
    for g in range(kvh):
        keys, values = iss.kv_records(2 + g)
        assert np.array_equal(keys, cache.key_bits(1)[g]) and np.array_equal(values, cache.value_bits(1)[g])
    assert iss.kv.length[:2] == [0, 0]
    expected = tf.attention(q.reshape(t, heads, hd)[2:], cache.keys(1), cache.values(1), [2, 3, 4], scale)
    assert np.array_equal(_bits(iss.read_floats(1600, 3 * heads * hd)), _bits(expected).ravel())
    counts = iss.counters()
    assert counts["kv_bytes_written"] == t * kvh * 4 * hd
    assert counts["kv_bytes_read"] == (3 + 4 + 5) * kvh * 4 * hd


def test_kv_faults():
    common = dict(layer=0, kvh=2, hd=32, count=1, pos_r=1)
    iss = _iss()
    _fault(iss, [I("KVAPPEND", **common)], "kv_error")                          # not open
    iss.run([I("KVOPEN", count=2), I("KVAPPEND", **common), I("HALT")])
    assert "holds 1 positions, KVAPPEND writes position 0" in str(
        _fault(iss, [I("KVAPPEND", **common)], "kv_error"))
    _fault(iss, [I("KVOPEN", count=1)], "kv_error")                              # already live
    _fault(iss, [I("LI", rd=1, imm=1), I("ATTN", heads=2, **common)], "kv_error")   # beyond the length
    _fault(iss, [I("ATTN", heads=3, **common)], "bad_field")
    _fault(iss, [I("KVAPPEND", **(common | {"hd": 64}))], "bad_field")
    _fault(iss, [I("KVOPEN", seq=3, count=2)], "kv_error")                       # bad_seq 4
