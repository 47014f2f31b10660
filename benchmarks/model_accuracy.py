"""Accuracy of the golden model against float64: whole-model logits, per MX format pair.

The golden model (``sim_models.transformer``) fixes the tile's bits; this benchmark measures how far its
logits are from the model the checkpoint describes, evaluated in float64 with no quantization
(``sim_models.transformer_reference.ReferenceModel``).

For the tiny LLaMA and Mixtral of ``models/`` (random weights, ``sim_models.checkpoint.random_weights``
seed 0; ``--seeds`` for others): an 8-token prompt (``numpy.random.default_rng(seed)``, the recipe of
``tests/sim_models/test_transformer_reference.py``) and 32 greedy decode steps on the golden model
(``sim_models.transformer.generate``); the float64 reference runs on the same tokens (the prompt
plus the generated ids) and ``compare_logits`` compares the 32 logits rows that chose the generated
ids. Per model and format pair (weights in e2m1 or e4m3, activations in every format of
``sim_models.mx.FORMATS``):

* cosine similarity of the logits rows, the minimum and the mean over the rows;
* top-1 agreement: the fraction of rows whose largest golden logit has the reference's index;
* whether the RTL tile runs the pair today (``sim_models.tile_isa.TileConfig().mac_formats``); the
  other pairs are the golden model's, ahead of the MAC array's support of the mixed MX formats.

With several seeds the rows of all seeds are pooled (minimum, mean and agreement over all of them).
Each figure is measured twice: at the reference initialization (std 0.02), where attention is nearly
uniform and the position-dependent parts barely move the logits, and with sharpened attention (the
q and k projections scaled by 8, as in the tests), where they matter.

Run: ``.venv/bin/python -m benchmarks.model_accuracy`` (or ``make bench``); writes
``benchmarks/results/model_accuracy.md`` and ``.json`` (1 to 1.5 minutes on one core for seed 0).
``--seeds 0 1 2 3`` pools more checkpoints. ``--quick``: the tiny LLaMA, e2m1 x e2m1 and 8 decode
steps, nothing recorded.
"""

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from sim_models import checkpoint as ck
from sim_models import mx
from sim_models import transformer as tf
from sim_models import transformer_reference as tr
from sim_models.tile_isa import TileConfig

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = Path(__file__).resolve().parent.parent / "models"

KINDS = ("tiny-llama", "tiny-mixtral")
WEIGHT_FORMATS = ("e2m1", "e4m3")
ACT_FORMATS = mx.FORMATS
PROMPT_TOKENS = 8
DECODE_STEPS = 32
QUICK_STEPS = 8
#: Factor on the q and k projections of the sharpened-attention checkpoints (the tests' ``SHARPEN``).
SHARPEN = 8.0
#: Attention variants: the factor on q and k, and the heading of their table.
VARIANTS = {"reference init": 1.0, f"q, k x {SHARPEN:g}": SHARPEN}
HEADINGS = {"reference init": "Reference initialization (std 0.02)",
            f"q, k x {SHARPEN:g}": f"Sharpened attention (q and k projections x {SHARPEN:g})"}


def checkpoint(kind: str, seed: int, qk_factor: float = 1.0) -> ck.Checkpoint:
    """The random checkpoint of ``models/<kind>`` at ``seed``, q and k projections scaled by ``qk_factor``."""
    return ck.sharpened_checkpoint(ck.load_config(MODELS / kind / "config.json"), seed, qk_factor)


def prompt(config: ck.ModelConfig, seed: int) -> np.ndarray:
    """The ``PROMPT_TOKENS`` prompt ids of ``seed``."""
    return np.random.default_rng(seed).integers(0, config.vocab_size, PROMPT_TOKENS)


def golden_decode(checkpoint, prompt_ids, steps, weight_format, act_format):
    """Greedy decode on the golden model: the generated ids ``(steps,)`` and the logits rows that
    chose them ``(steps, vocab)``."""
    model = tf.Transformer(checkpoint, act_format=act_format, weight_format=weight_format)
    return tf.generate(model, prompt_ids, steps)


def reference_rows(checkpoint, prompt_ids, ids) -> np.ndarray:
    """float64 logits of the rows that chose ``ids`` after ``prompt_ids``: the reference runs the
    prompt plus every generated id but the last, and the rows from the prompt's last position on
    are those of the decode steps."""
    tokens = np.concatenate([prompt_ids, ids[:-1]])
    return tr.ReferenceModel(checkpoint).logits(tokens)[len(prompt_ids) - 1:]


def measure(kind, weight_format, act_format, seeds=(0,), steps=DECODE_STEPS, qk_factor=1.0) -> dict:
    """The accuracy figures of one model and format pair, the rows of every seed pooled.

    Returns ``cosine_min``, ``cosine_mean``, ``top1`` and ``rows`` (as
    :func:`sim_models.transformer_reference.compare_logits`) and ``per_seed``, the same per seed.
    """
    golden, reference, per_seed = [], [], []
    for seed in seeds:
        point = checkpoint(kind, seed, qk_factor)
        prompt_ids = prompt(point.config, seed)
        ids, logits = golden_decode(point, prompt_ids, steps, weight_format, act_format)
        rows = reference_rows(point, prompt_ids, ids)
        golden.append(logits)
        reference.append(rows)
        per_seed.append({"seed": seed, **tr.compare_logits(logits, rows)})
    return {**tr.compare_logits(np.concatenate(golden), np.concatenate(reference)), "per_seed": per_seed}


def on_rtl(weight_format: str, act_format: str) -> bool:
    """Whether the RTL tile's MAC array runs this pair today."""
    formats = TileConfig().mac_formats
    return weight_format in formats and act_format in formats


def run(kinds, pairs, seeds, steps):
    """Every model x variant x pair, printed as it goes; returns the rows and the seconds per model."""
    rows, seconds = [], {}
    for kind in kinds:
        start = time.monotonic()
        for variant, factor in VARIANTS.items():
            for weight_format, act_format in pairs:
                figures = measure(kind, weight_format, act_format, seeds, steps, factor)
                rows.append({"model": kind, "attention": variant, "qk_factor": factor,
                             "weight_format": weight_format, "act_format": act_format,
                             "rtl": on_rtl(weight_format, act_format), **figures})
                print(f"{kind:12s} {variant:14s} w {weight_format} a {act_format}: cosine min "
                      f"{figures['cosine_min']:.4f} mean {figures['cosine_mean']:.4f}, top-1 "
                      f"{figures['top1']:.3f}", flush=True)
        seconds[kind] = round(time.monotonic() - start, 1)
    return rows, seconds


def table(rows, variant) -> str:
    lines = ["| model | weights | activations | on the RTL tile | cosine min | cosine mean | top-1 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["attention"] == variant:
            rtl = "yes" if r["rtl"] else "golden model only"
            lines.append(f"| {r['model']} | {r['weight_format']} | {r['act_format']} | {rtl} "
                         f"| {r['cosine_min']:.4f} | {r['cosine_mean']:.4f} | {r['top1']:.3f} |")
    return "\n".join(lines)


def _command(seeds) -> str:
    tail = "" if list(seeds) == [0] else " --seeds " + " ".join(str(s) for s in seeds)
    return f".venv/bin/python -m benchmarks.model_accuracy{tail}"


def _markdown(rows, seeds, seconds) -> str:
    total = sum(seconds.values())
    weights = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}, rows pooled"
    rtl = " and ".join(TileConfig().mac_formats)
    tables = "\n\n".join(f"## {HEADINGS[variant]}\n\n{table(rows, variant)}" for variant in VARIANTS)
    return f"""# Golden model against float64: logits per format pair

Measured by `{_command(seeds)}` (the module's docstring says how):
{total:.0f} s on one core ({platform.machine()}, numpy {np.__version__}).

The tiny LLaMA and Mixtral of `models/`, random weights ({weights}); an 8-token prompt, then
{DECODE_STEPS} greedy decode steps on the golden model (`sim_models/transformer.py`); the float64
reference of the unquantized checkpoint (`sim_models/transformer_reference.py`) evaluated on the
same tokens. Per row, over the {DECODE_STEPS * len(seeds)} logits rows that chose the generated ids:
cosine similarity of golden and reference logits (minimum, mean) and top-1 agreement (the golden
model's largest logit at the reference's index).

"On the RTL tile": the MAC array runs {rtl} on both operands today (`TileConfig.mac_formats`).
The other pairs are the golden model's (it accepts every format of `sim_models.mx.FORMATS` on
either side), ahead of the MAC array's support of the mixed MX formats.

Random checkpoints have nearly flat logits, so top-1 agreement is noisy on them; cosine similarity
is the stable figure. At the reference initialization (std 0.02) attention is nearly uniform, so
the second table scales the q and k projections by {SHARPEN:g}: there RoPE, the causal mask and the
grouped-query mapping move the logits (`docs/transformer_numerics.md`, "Accuracy against float64").

{tables}
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny-llama, e2m1 x e2m1, {QUICK_STEPS} decode steps, nothing recorded")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], metavar="SEED",
                        help="checkpoint and prompt seeds, their rows pooled (default: 0)")
    args = parser.parse_args(argv)
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        parser.error("--seeds must be distinct non-negative integers")
    if args.quick:
        kinds, pairs, steps = KINDS[:1], [("e2m1", "e2m1")], QUICK_STEPS
    else:
        kinds, steps = KINDS, DECODE_STEPS
        pairs = [(w, a) for w in WEIGHT_FORMATS for a in ACT_FORMATS]
    rows, seconds = run(kinds, pairs, args.seeds, steps)
    for variant in VARIANTS:
        print(f"\nattention: {variant}\n{table(rows, variant)}")
    print(f"\n{sum(seconds.values()):.1f} s")
    if args.quick:
        return 0
    RESULTS.mkdir(exist_ok=True)
    record = {"protocol": {"prompt_tokens": PROMPT_TOKENS, "decode_steps": DECODE_STEPS, "seeds": args.seeds,
                           "sharpen": SHARPEN, "command": _command(args.seeds)},
              "rtl_formats": list(TileConfig().mac_formats), "rows": rows, "seconds": seconds,
              "machine": f"{platform.machine()}, numpy {np.__version__}"}
    (RESULTS / "model_accuracy.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / "model_accuracy.md").write_text(_markdown(rows, args.seeds, seconds))
    print(f"wrote {RESULTS / 'model_accuracy.md'} and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
