"""``poblano run``: generate tokens from a Hugging Face checkpoint on the golden model or the tile.

``poblano run --model DIR --prompt 1,2,3 --generate N [--golden | --iss | --sim] [--logits L.npy]
[--report r.json] [--listing P.txt]`` prefills the prompt as one batch, then decodes ``N`` tokens
greedily, and prints the prompt and the generated ids.

* ``--golden`` (the default) runs :mod:`sim_models.transformer`.
* ``--iss`` compiles the model for the tile (``poblano.compiler``: weight image and programs), runs
  the programs on the instruction-level model (:mod:`sim_models.tile_iss`) and checks its tokens and
  logits against the golden model bit for bit: exit status 1 on any mismatch.
* ``--sim`` does the same, then replays every run on the RTL tile (``rtl.tile.tile.Tile`` built with
  the tile parameters, Verilator by default: ``--simulator``), which must leave the ISS's logits
  and scratchpad (:mod:`verification.tile.model_run`): exit status 1 on any mismatch. The first run
  of a tile configuration builds its simulation model (minutes); later runs reuse it.

``--logits`` writes the float32 logits ``(N, vocab)``, one row per generated token (the row that
chose it); ``--report`` (with ``--iss`` or ``--sim``) writes the tile's counters per phase (prefill,
each decode step) as JSON: ``{"tile": parameters, "phases": [...]}``, each phase with the ISS's
counters (``TileIss.counters()``: instructions, weight and KV bytes, MAC block pairs and beats, ...)
and, with ``--sim``, the RTL tile's cycles (``rtl_cycles``) and ``rtl``, the breakdown measured by
its performance counters (:func:`rtl_breakdown`); ``--listing`` writes the annotated prefill and
decode programs. The
tile's parameters are options (defaults: the RTL defaults). A missing or malformed checkpoint, an
unsupported architecture, a prompt token outside the vocabulary or a model that does not fit the
tile's memories is a one-line error with exit status 2.
"""

import json
from pathlib import Path

import numpy as np

from poblano.commands._values import comma_separated
from poblano.errors import UsageError

NAME = "run"
HELP = "generate tokens from a checkpoint on the golden model, the tile's instruction-level model or its RTL"


def add_arguments(parser):
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="checkpoint directory (config.json + model.safetensors)")
    parser.add_argument("--prompt", required=True, metavar="IDS", help="prompt token ids, e.g. 1,2,3")
    parser.add_argument("--generate", type=int, default=8, metavar="N",
                        help="tokens to generate (default 8)")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--golden", action="store_true", help="run the golden model (default)")
    engine.add_argument("--iss", action="store_true",
                        help="run the tile's programs on its instruction-level model, checked "
                             "against the golden model")
    engine.add_argument("--sim", action="store_true",
                        help="--iss, then the same runs on the RTL tile in a simulator, checked "
                             "against the instruction-level model")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator",
                        help="simulator of --sim (default verilator)")
    parser.add_argument("--logits", metavar="L.npy", help="write the logits (N, vocab) float32")
    parser.add_argument("--report", metavar="R.json",
                        help="write the tile's counters per phase (--iss, --sim)")
    parser.add_argument("--listing", metavar="P.txt",
                        help="write the prefill and decode listings (--iss, --sim)")
    tile = parser.add_argument_group("tile parameters")
    tile.add_argument("--spad-words", type=int, default=65536, help="scratchpad words (default 65536)")
    tile.add_argument("--mac-rows", type=int, default=4, help="MAC array rows (default 4)")
    tile.add_argument("--mac-cols", type=int, default=4, help="MAC array columns (default 4)")
    tile.add_argument("--interleave", type=int, default=8, help="accumulators per PE (default 8)")
    tile.add_argument("--lanes", type=int, default=8, help="vector-unit lanes (default 8)")
    tile.add_argument("--kv-pages", type=int, default=64, help="KV-cache pages (default 64)")
    tile.add_argument("--kv-page-tokens", type=int, default=16, help="positions per page (default 16)")
    tile.add_argument("--kv-seqs", type=int, default=16, help="KV sequences (default 16)")
    tile.add_argument("--kv-pages-per-seq", type=int, default=16, help="pages per sequence (default 16)")
    tile.add_argument("--vpu-max-k", type=int, default=8, help="vector unit's largest top-k (default 8)")
    tile.add_argument("--vpu-rope-length", type=int, default=256,
                      help="vector unit's longest rope row (default 256)")
    tile.add_argument("--weight-format", default="e2m1", help="MX element format of the weights")
    tile.add_argument("--act-format", default="e2m1", help="MX element format of the activations")


def _prompt(text):
    return np.array(comma_separated(text, "--prompt"), dtype=np.int64)


def _tile(args):
    from sim_models.tile_isa import TileConfig

    try:
        return TileConfig(spad_words=args.spad_words, rows=args.mac_rows, cols=args.mac_cols,
                          interleave=args.interleave, lanes=args.lanes, kv_pages=args.kv_pages,
                          kv_page_tokens=args.kv_page_tokens, kv_seqs=args.kv_seqs,
                          kv_max_pages_per_seq=args.kv_pages_per_seq, vpu_max_k=args.vpu_max_k,
                          vpu_rope_length=args.vpu_rope_length,
                          # the modelled tile's MAC array runs the formats asked for (the RTL
                          # array runs e2m1 x e2m1 today: TileConfig.mac_formats)
                          mac_formats=tuple(dict.fromkeys((args.act_format, args.weight_format))))
    except ValueError as exc:
        raise UsageError(f"tile parameter: {exc}") from None


def _first_difference(ids, logits, ref_ids, ref_logits):
    for step in range(len(ref_ids)):
        if ids[step] != ref_ids[step]:
            return f"step {step}: token {ids[step]}, golden {ref_ids[step]}"
        differ = np.nonzero(logits[step].view(np.uint32) != ref_logits[step].view(np.uint32))[0]
        if differ.size:
            j = int(differ[0])
            return (f"step {step}: logit {j} is {logits[step, j]!r}, golden {ref_logits[step, j]!r} "
                    f"({differ.size} logits differ)")
    return None


def rtl_breakdown(measured, iss_report, tile):
    """The ``rtl`` entry of a ``--sim`` report phase: what the RTL tile's counters measured in one run.

    ``measured`` is a run of :func:`verification.tile.model_run.run_on_rtl`: ``cycles``,
    ``instructions``, the cycles per instruction class (``gemm_cycles``, ``attn_cycles``,
    ``vop_cycles``, ``kv_cycles``, ``copy_cycles``, ``other_cycles``: they add up to ``cycles``),
    ``weight_stall_cycles``, ``weight_bytes``, ``weight_beats``, ``kv_reads``, ``kv_appends``,
    ``kv_bytes_read``, ``kv_bytes_written`` (``docs/tile.md``, "Performance counters"). Added:
    ``mac_utilization``, the ISS's useful MAC block pairs (``m n k / 32``, exact) over the
    ``rows * cols`` block pairs the array could have done in the run's measured cycles.
    """
    out = {k: v for k, v in measured.items() if k != "phase"}
    peak = tile.rows * tile.cols * measured["cycles"]
    out["mac_utilization"] = round(iss_report["mac_block_pairs"] / peak, 6) if peak else 0.0
    return out


def run(args):
    from poblano.compiler import CompileError, TileRunner, listing
    from sim_models import checkpoint, transformer
    from sim_models.tile_iss import TileFault

    if args.generate < 0:
        raise UsageError(f"--generate must be non-negative, got {args.generate}")
    tiled = args.iss or args.sim
    if not tiled and (args.report or args.listing):
        raise UsageError("--report and --listing need --iss or --sim")
    prompt = _prompt(args.prompt)
    tile = _tile(args)
    if args.sim and tile.mac_formats != ("e2m1",):
        raise UsageError(f"--sim: the RTL MAC array runs e2m1 x e2m1 only, not "
                         f"{args.act_format} x {args.weight_format} (--iss models the others)")
    try:
        model = transformer.Transformer(checkpoint.load_checkpoint(args.model), act_format=args.act_format,
                                        weight_format=args.weight_format, lanes=args.lanes)
        transformer.check_tokens(prompt, model.config.vocab_size, "prompt token")
        if tiled:
            runner = TileRunner(model, tile)
            runner.check_context(len(prompt), args.generate)
        ids, logits = transformer.generate(model, prompt, args.generate)
    except CompileError as exc:
        raise UsageError(f"the model does not fit the tile: {exc}") from None
    except (checkpoint.CheckpointError, transformer.TransformerError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    status = 0
    if tiled:
        try:
            tile_ids, tile_logits = runner.generate(prompt, args.generate)
        except TileFault as exc:
            print(f"iss: the tile stopped: {exc}")
            return 1
        if args.sim:
            if not runner.trace:
                raise UsageError("--sim needs at least one generated token (--generate 1 or more)")
            from verification.runner import RunFailed
            from verification.tile.model_run import run_on_rtl

            print(f"sim: replaying {len(runner.trace)} runs on the RTL tile in {args.simulator} "
                  f"(the first run of a configuration builds it) ...", flush=True)
            try:
                rtl = run_on_rtl(runner, sim=args.simulator)
            except RunFailed as exc:
                print(f"sim: MISMATCH: the RTL tile differs from the instruction-level model: {exc}")
                return 1
            for report, measured in zip(runner.reports, rtl, strict=True):
                report["rtl_cycles"] = measured["cycles"]
                report["rtl"] = rtl_breakdown(measured, report, tile)
        if args.listing:
            prefill = runner.compiled.forward(len(prompt), open_kv=True)
            decode = runner.compiled.forward(1)
            Path(args.listing).write_text(f"; prefill of {len(prompt)} tokens\n" + listing(prefill) +
                                          "\n; decode step\n" + listing(decode))
        if args.report:
            Path(args.report).write_text(json.dumps({"tile": vars(tile), "phases": runner.reports},
                                                    indent=2) + "\n")
        difference = _first_difference(tile_ids, tile_logits, ids, logits)
        if difference:
            print(f"iss: MISMATCH against the golden model: {difference}")
            status = 1
        ids, logits = tile_ids, tile_logits
    print("prompt:   ", " ".join(str(i) for i in prompt))
    print("generated:", " ".join(str(i) for i in ids))
    if tiled and status == 0:
        total = sum(r["instructions"] for r in runner.reports)
        weights = sum(r["weight_bytes"] for r in runner.reports)
        print(f"iss: tokens and logits equal the golden model bit for bit ({total} instructions, "
              f"{weights:,} weight bytes read)")
    if args.sim and status == 0:
        phases = ", ".join(f"{r['phase']} {r['rtl_cycles']:,}" for r in runner.reports)
        print(f"sim: the RTL tile's logits and scratchpad equal the instruction-level model's after "
              f"every run (cycles: {phases})")
        for r in runner.reports:
            m = r["rtl"]
            print(f"  {r['phase']:8} {m['cycles']:>10,} cycles: GEMM {m['gemm_cycles']:,}, ATTN "
                  f"{m['attn_cycles']:,}, VOP {m['vop_cycles']:,}, KV {m['kv_cycles']:,}, copies "
                  f"{m['copy_cycles']:,}, other {m['other_cycles']:,}; weight stalls "
                  f"{m['weight_stall_cycles']:,}; MAC utilization {100 * m['mac_utilization']:.1f}%")
    if args.logits:
        np.save(args.logits, logits.astype(np.float32))
    return status
