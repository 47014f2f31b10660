"""Compiled tile programs on the instruction-level model equal the golden model bit for bit: tiny
LLaMA and Mixtral checkpoints, random configurations; MoE decode streams only the selected experts;
the assembler round-trips every program; models that do not fit get one-line errors."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poblano.compiler import AsmError, CompileError, TileRunner, assemble, compile_model, disassemble, listing
from sim_models import checkpoint as ck
from sim_models import transformer as tf
from sim_models.tile_isa import TileConfig

MODELS = Path(__file__).resolve().parents[2] / "models"
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def _model(kind, seed=0, **kwargs):
    config = ck.load_config(MODELS / kind / "config.json")
    return tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, seed)), **kwargs)


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-mixtral"])
def model(request):
    return _model(request.param)


def _golden_cache(model, prompt, ids):
    cache = model.new_cache()
    model.forward(prompt, cache)
    for token in ids[:-1]:
        model.forward([int(token)], cache)
    return cache


def test_generate_equals_the_golden_model(model):
    ids, logits = tf.generate(model, PROMPT, 5)
    runner = TileRunner(model)
    tile_ids, tile_logits = runner.generate(PROMPT, 5)
    assert np.array_equal(tile_ids, ids)
    assert np.array_equal(_bits(tile_logits), _bits(logits))
    cache = _golden_cache(model, PROMPT, ids)
    c = model.config
    for layer in range(c.num_hidden_layers):
        for g in range(c.num_key_value_heads):
            keys, values = runner.iss.kv_records(layer * c.num_key_value_heads + g)
            assert np.array_equal(keys, cache.key_bits(layer)[g])
            assert np.array_equal(values, cache.value_bits(layer)[g])
    assert [r["phase"] for r in runner.reports] == ["prefill"] + ["decode"] * 4
    assert [r["position"] for r in runner.reports] == [0, 8, 9, 10, 11]


def test_prefill_rows_and_chunks_equal_forward(model):
    tokens = np.random.default_rng(2).integers(0, model.config.vocab_size, 7)
    expected = model.forward(tokens, model.new_cache())
    runner = TileRunner(model)
    first = runner.run(tokens[:4], open_kv=True, all_logits=True)
    rest = runner.run(tokens[4:], open_kv=False, all_logits=True)          # chunked prefill
    assert np.array_equal(_bits(np.concatenate([first, rest])), _bits(expected))


def test_kv_fill_appends_kv_without_attention(model):
    """A KV fill (``attention=False``) is the prefill program without its ATTNs; it appends the same
    layer-0 K and V as a prefill (later layers' inputs depend on attention), and the context grows."""
    compiled = compile_model(model)
    full, fill = compiled.forward(8, open_kv=True), compiled.forward(8, open_kv=True, attention=False)
    def shape(program):                      # branch targets move with the ATTNs left out
        return [(i.name, {k: v for k, v in i.fields.items() if k != "target"}) for i in program.instructions]
    assert [i for i in shape(full) if i[0] != "ATTN"] == shape(fill)
    assert any(i.name == "ATTN" for i in full.instructions)
    prefilled, filled = TileRunner(model), TileRunner(model)
    prefilled.run(PROMPT, open_kv=True)
    filled.run(PROMPT[:5], open_kv=True, attention=False)
    filled.run(PROMPT[5:], open_kv=False, attention=False)
    c = model.config
    for g in range(c.num_key_value_heads):
        assert all(np.array_equal(a, b) for a, b in zip(filled.iss.kv_records(g), prefilled.iss.kv_records(g),
                                                          strict=True))
    last = (c.num_hidden_layers - 1) * c.num_key_value_heads
    assert not np.array_equal(filled.iss.kv_records(last)[0], prefilled.iss.kv_records(last)[0])
    filled.run(PROMPT[:1], open_kv=False)
    assert [(r["phase"], r["position"]) for r in filled.reports] == [("fill", 0), ("fill", 5), ("decode", 8)]


@st.composite
def _configs(draw):
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 2))
    head_dim = draw(st.sampled_from([32, 64]))
    raw = {"vocab_size": draw(st.integers(40, 90)), "hidden_size": 32 * draw(st.integers(1, 3)),
           "intermediate_size": 32 * draw(st.integers(1, 3)), "head_dim": head_dim,
           "num_hidden_layers": draw(st.integers(1, 2)), "num_attention_heads": heads,
           "num_key_value_heads": kv, "tie_word_embeddings": draw(st.booleans()),
           "rope_theta": draw(st.sampled_from([10000.0, 500000.0]))}
    experts = draw(st.integers(0, 4))
    if experts >= 2:
        raw |= {"architectures": ["MixtralForCausalLM"], "num_local_experts": experts,
                "num_experts_per_tok": draw(st.integers(1, min(experts, 3)))}
    else:
        raw["architectures"] = ["LlamaForCausalLM"]
    return ck.ModelConfig.from_dict(raw)


@settings(derandomize=True, deadline=None, max_examples=8)
@given(_configs(), st.integers(1, 5), st.integers(0, 2 ** 16))
def test_random_configurations_equal_the_golden_model(config, prompt_len, seed):
    model = tf.Transformer(ck.Checkpoint(config, ck.random_weights(config, seed % 7)))
    prompt = np.random.default_rng(seed).integers(0, config.vocab_size, prompt_len)
    ids, logits = tf.generate(model, prompt, 3)
    tile_ids, tile_logits = TileRunner(model).generate(prompt, 3)
    assert np.array_equal(tile_ids, ids) and np.array_equal(_bits(tile_logits), _bits(logits))


def test_w4a8_equals_the_golden_model():
    model = _model("tiny-llama", act_format="e4m3")
    ids, logits = tf.generate(model, PROMPT[:3], 2)
    tile = TileConfig(mac_formats=("e2m1", "e4m3"))          # W4A8: the ISS, not today's MAC array
    tile_ids, tile_logits = TileRunner(model, tile).generate(PROMPT[:3], 2)
    assert np.array_equal(tile_ids, ids) and np.array_equal(_bits(tile_logits), _bits(logits))


def test_moe_decode_streams_only_the_selected_experts():
    model = _model("tiny-mixtral", seed=3)
    c = model.config
    runner = TileRunner(model)
    runner.run(PROMPT, open_kv=True)
    token = 17
    record = {}
    cache = model.new_cache()
    model.forward(PROMPT, cache)
    model.forward([token], cache, record)
    runner.run([token], open_kv=False)
    symbols = runner.compiled.image.symbols
    size = {name: s.nbytes for name, s in symbols.items()}
    expected = 4 * c.hidden_size + 4 * 2 * c.head_dim + 4 * c.hidden_size + size["lm_head"]
    for layer in range(c.num_hidden_layers):
        p = f"model.layers.{layer}."
        expected += 2 * 4 * c.hidden_size + size[p + "block_sparse_moe.gate"]
        expected += sum(size[p + f"self_attn.{n}_proj"] for n in "qkvo")
        for expert in record["experts"][layer][0]:
            expected += sum(size[f"{p}block_sparse_moe.experts.{expert}.{w}"] for w in ("w1", "w3", "w2"))
    report = runner.reports[-1]
    assert report["weight_bytes"] == expected
    all_experts = sum(n for name, n in size.items() if ".experts." in name)
    assert report["weight_bytes"] < len(runner.compiled.image.data) - all_experts / 2
    assert report["by_opcode"]["GEMM"] == c.num_hidden_layers * (5 + 3 * c.num_experts_per_tok) + 1
    assert report["kv_bytes_read"] == c.num_hidden_layers * c.num_key_value_heads * 9 * 4 * c.head_dim


def test_assembler_round_trips_compiled_programs(model):
    compiled = compile_model(model)
    for program, symbols in ((compiled.forward(1), compiled.symbols(1)),
                             (compiled.forward(5, open_kv=True), compiled.symbols(5))):
        at = {index: name for name, index in program.labels.items()}
        for table in (None, symbols):
            text = "".join((f"{at[i]}:\n" if i in at else "") + disassemble(instr, table, program.labels)
                           + "\n" for i, instr in enumerate(program.instructions))
            assert assemble(text, symbols).binary == program.binary
        numeric = "\n".join(disassemble(instr) for instr in program.instructions)
        assert assemble(numeric).binary == program.binary
        assert listing(program).count("\n") == len(program) + len(program.labels)
        assert "GEMM" in listing(program, symbols, source=False)


def test_assembler_errors():
    with pytest.raises(AsmError, match="line 2: unknown instruction 'JMP'"):
        assemble("HALT\nJMP target=0\n")
    with pytest.raises(AsmError, match="line 1: 'r16' is not a register"):
        assemble("LI rd=r16 imm=1")
    with pytest.raises(AsmError, match="unknown symbol 's:nowhere'"):
        assemble("LDW rd=r1 addr=s:nowhere")
    with pytest.raises(AsmError, match="GEMM has no field 'x'"):
        assemble("GEMM x=1")
    with pytest.raises(AsmError, match="does not fit 20 bits"):
        assemble("LDW rd=r1 addr=2000000")
    with pytest.raises(AsmError, match="repeated label"):
        assemble("a:\na: HALT")
    program = assemble("top: LI rd=r1 imm=1 ; one\n  BLT rs=r0 rt=r1 target=top\nVOP op=scale len=8 rows=1 "
                       "imm=0.1 bcast=ab\nHALT")
    assert program.labels == {"top": 0} and program.instructions[1]["target"] == 0
    assert program.instructions[2]["imm"] == int(np.array(np.float32(0.1)).view(np.uint32))
    assert disassemble(program.instructions[2]) == "VOP op=scale len=8 rows=1 bcast=ab imm=0.1"


def test_models_that_do_not_fit():
    model = _model("tiny-llama")
    with pytest.raises(CompileError, match=r"needs [\d,]+ scratchpad words, the tile has 1,000$"):
        TileRunner(model, TileConfig(spad_words=1000)).generate(PROMPT, 2)
    with pytest.raises(CompileError, match="needs 4 KV sequences .* has 2"):
        compile_model(model, TileConfig(kv_seqs=2))
    with pytest.raises(CompileError, match="lanes"):
        compile_model(model, TileConfig(lanes=4))
    runner = TileRunner(model, TileConfig(kv_pages=8, kv_max_pages_per_seq=8))
    assert runner.compiled.max_context == 32
    with pytest.raises(CompileError, match="need 33 KV positions, the tile holds 32"):
        runner.generate(PROMPT, 26)
    with pytest.raises(tf.TransformerError, match="outside the vocabulary"):
        runner.generate([1, 256], 1)
