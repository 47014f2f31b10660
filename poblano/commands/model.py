"""``poblano model``: Hugging Face checkpoints for the tile.

``poblano model init --config C.json --out DIR [--seed S] [--force]`` writes a randomly initialized
checkpoint of the configuration ``C.json`` (``LlamaForCausalLM`` or ``MixtralForCausalLM``): ``DIR/
config.json`` and ``DIR/model.safetensors`` with float32 tensors under Hugging Face's names. Linear
and embedding weights are normal with standard deviation ``initializer_range`` (0.02 by default, as
the reference implementations), norm weights are 1; the seed fixes every bit. An existing checkpoint
in ``DIR`` is only replaced with ``--force``. The format and the shipped configurations
(``models/``) are described in ``docs/models.md``.
"""

from pathlib import Path

from poblano.errors import UsageError

NAME = "model"
HELP = "model checkpoints: write a randomly initialized Hugging Face checkpoint (init)"


def add_arguments(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="write a random checkpoint (config.json + model.safetensors)",
                              description="Write a randomly initialized Hugging Face checkpoint.")
    init.add_argument("--config", required=True, metavar="C.json",
                      help="Hugging Face config.json (LlamaForCausalLM or MixtralForCausalLM)")
    init.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory to write")
    init.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    init.add_argument("--force", action="store_true", help="replace a checkpoint already in DIR")


def run(args):
    from sim_models import checkpoint

    try:
        config = checkpoint.load_config(args.config)
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {str(out)!r} exists and is not a directory")
        existing = [name for name in (checkpoint.CONFIG_FILE, checkpoint.WEIGHTS_FILE)
                    if (out / name).exists()]
        if existing and not args.force:
            raise UsageError(f"{str(out)!r} already holds {existing[0]}; choose another --out or pass "
                             f"--force to replace it")
        if args.seed < 0:
            raise UsageError(f"--seed must be non-negative, got {args.seed}")
        tensors = checkpoint.random_weights(config, args.seed)
        checkpoint.save_checkpoint(out, config, tensors)
    except checkpoint.CheckpointError as exc:
        raise UsageError(str(exc)) from None
    params = sum(t.size for t in tensors.values())
    kind = (f"{config.num_local_experts} experts, top-{config.num_experts_per_tok}" if config.is_moe
            else "dense")
    print(f"{config.architecture} ({kind}): {config.num_hidden_layers} layers, hidden "
          f"{config.hidden_size}, {params:,} parameters, seed {args.seed} -> {out}")
    return 0
