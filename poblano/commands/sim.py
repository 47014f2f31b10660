"""``poblano sim``: the main demo (``make sim``): a small LLaMA-architecture model on the RTL tile.

Writes a randomly initialized checkpoint of ``models/tiny-llama`` (or takes ``--model DIR``),
generates tokens with the golden model, compiles the model for a small tile, runs the programs on
the instruction-level model, then replays the prefill and every decode step on the RTL tile in
Verilator (:mod:`verification.tile.model_run`), which must leave the same logits and scratchpad;
prints the tokens and the tile's cycles per phase. The first run builds the tile's simulation model
(about two minutes); later runs reuse it.

``poblano sim --gemm`` is the earlier demo: an MXFP4 GEMM on the MAC-array RTL, every output bit
checked against ``sim_models.mx.matmul``, with the cycle count, the MAC utilization, the error
against a float64 GEMM of the unquantized inputs and the simulation speed.
"""

import time
from pathlib import Path

import numpy as np

NAME = "sim"
HELP = "main demo: a small model's prefill and decode on the RTL tile, bit-exact against the golden model"

MODELS = Path(__file__).resolve().parents[2] / "models"


def add_arguments(parser):
    parser.add_argument("--model", metavar="DIR",
                        help="checkpoint to run (default: a random tiny-llama written under build/)")
    parser.add_argument("--prompt", default="3,1,4,1", metavar="IDS",
                        help="prompt token ids (default 3,1,4,1)")
    parser.add_argument("--generate", type=int, default=3, metavar="N", help="tokens to generate (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                        help="simulator (default verilator)")
    parser.add_argument("--golden", action="store_true", help="golden model and ISS only, no RTL")
    gemm = parser.add_argument_group("the MAC-array GEMM demo (--gemm)")
    gemm.add_argument("--gemm", action="store_true", help="run the MXFP4 GEMM demo instead")
    gemm.add_argument("--m", type=int, default=32, help="rows of A (default 32)")
    gemm.add_argument("--k", type=int, default=256, help="inner dimension, a multiple of 32 (default 256)")
    gemm.add_argument("--n", type=int, default=64, help="columns of B (default 64)")
    gemm.add_argument("--rows", type=int, default=4, help="array rows (default 4)")
    gemm.add_argument("--cols", type=int, default=4, help="array columns (default 4)")


def run(args):
    return _gemm_demo(args) if args.gemm else _model_demo(args)


def _model_demo(args):
    from poblano.commands.run import _prompt
    from poblano.compiler import CompileError, TileRunner
    from poblano.errors import UsageError
    from sim_models import checkpoint, transformer
    from verification.runner import BUILD_ROOT, RunFailed
    from verification.tile.model_run import SMALL_TILE, SMALL_TILE_PROG_WORDS, run_on_rtl

    if args.generate < 1:
        raise UsageError(f"--generate must be at least 1, got {args.generate}")
    directory = Path(args.model) if args.model else BUILD_ROOT / "demo" / f"tiny-llama-seed{args.seed}"
    if not args.model:
        config = checkpoint.load_config(MODELS / "tiny-llama" / "config.json")
        checkpoint.save_checkpoint(directory, config, checkpoint.random_weights(config, args.seed))
    prompt = _prompt(args.prompt)
    try:
        model = transformer.Transformer(checkpoint.load_checkpoint(directory), lanes=SMALL_TILE.lanes)
        transformer.check_tokens(prompt, model.config.vocab_size, "prompt token")
        runner = TileRunner(model, SMALL_TILE)
        runner.check_context(len(prompt), args.generate)
    except CompileError as exc:
        raise UsageError(f"the model does not fit the demo tile: {exc}") from None
    except (checkpoint.CheckpointError, transformer.TransformerError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    c = model.config
    print(f"model: {directory} ({c.architecture}, {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
          f"{c.num_attention_heads} heads / {c.num_key_value_heads} KV heads of {c.head_dim}, "
          f"vocab {c.vocab_size}; MXFP4 weights and activations)")
    print(f"tile:  {SMALL_TILE.rows}x{SMALL_TILE.cols} MAC array (interleave {SMALL_TILE.interleave}), "
          f"{SMALL_TILE.lanes}-lane vector unit, {SMALL_TILE.spad_words} scratchpad words, KV cache of "
          f"{SMALL_TILE.kv_pages} pages x {SMALL_TILE.kv_page_tokens} positions")
    ids, logits = transformer.generate(model, prompt, args.generate)
    tile_ids, tile_logits = runner.generate(prompt, args.generate)
    print("prompt:   ", " ".join(str(i) for i in prompt))
    print("generated:", " ".join(str(i) for i in ids), "(golden model, greedy)")
    same_logits = np.array_equal(tile_logits.view(np.uint32), logits.view(np.uint32))
    if not (np.array_equal(tile_ids, ids) and same_logits):
        print("iss: MISMATCH against the golden model")
        return 1
    print(f"iss: the compiled programs give the same tokens and logits, bit for bit "
          f"({sum(r['instructions'] for r in runner.reports)} instructions)")
    if args.golden:
        return 0
    print(f"sim: replaying the prefill and {len(runner.trace) - 1} decode steps on the RTL tile in "
          f"{args.sim} (the first run builds it) ...", flush=True)
    start = time.monotonic()
    try:
        cycles = run_on_rtl(runner, sim=args.sim, prog_words=SMALL_TILE_PROG_WORDS)
    except RunFailed as exc:
        print(f"sim: MISMATCH: the RTL tile differs from the instruction-level model: {exc}")
        return 1
    for run in cycles:
        print(f"  {run['phase']:8} {run['instructions']:4} instructions {run['cycles']:8,} cycles")
    print(f"sim: the RTL tile's logits and scratchpad equal the golden model's after every run, bit for "
          f"bit ({time.monotonic() - start:.0f} s including the build)")
    return 0


def _gemm_demo(args):
    from poblano.commands import gemm
    from poblano.errors import UsageError
    from sim_models import mx

    if min(args.m, args.k, args.n) <= 0 or args.k % 32:
        raise UsageError("M, K and N must be positive and K a multiple of 32")
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal((args.m, args.k)).astype(np.float32)
    b = (rng.standard_normal((args.k, args.n)) * 0.05).astype(np.float32)
    start = time.perf_counter()
    a_codes, a_scales = mx.quantize(a)
    bt_codes, bt_scales = mx.quantize(b.T)             # blocks run along K for both operands
    b_codes, b_scales = bt_codes.T.copy(), bt_scales.T.copy()
    golden = mx.matmul(a_codes, a_scales, b_codes, b_scales)
    golden_ms = (time.perf_counter() - start) * 1e3
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rel = np.linalg.norm(golden - exact) / np.linalg.norm(exact)

    print(f"MXFP4 GEMM {args.m}x{args.k} @ {args.k}x{args.n}, random N(0,1) x N(0,0.05^2) inputs "
          f"quantized with FLOOR scales (seed {args.seed})")
    print(f"  golden model (quantize + matmul): {golden_ms:.1f} ms")
    print(f"  error vs float64 GEMM of the unquantized inputs: relative Frobenius {rel:.4f}, "
          f"max |error| {np.max(np.abs(golden - exact)):.4g} (max |C| {np.max(np.abs(exact)):.4g})")
    if args.golden:
        return 0
    print(f"  running on the {args.rows}x{args.cols} MAC-array RTL in {args.sim} "
          f"(the first run builds the model) ...", flush=True)
    result, stats = gemm.run_on_rtl(a_codes, a_scales, b_codes, b_scales, None, rows=args.rows,
                                    cols=args.cols, sim=args.sim)
    gemm.print_stats(stats)
    bad = int(np.count_nonzero(result.view(np.uint32) != golden.view(np.uint32)))
    if bad:
        print(f"  RTL vs golden model: {bad} of {result.size} outputs DIFFER")
        return 1
    print(f"  RTL vs golden model: all {result.size} outputs bit-exact")
    return 0
