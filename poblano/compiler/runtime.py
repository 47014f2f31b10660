"""The host side of a run: load a compiled model into a tile and generate tokens, as a driver would.

:class:`TileRunner` drives the instruction-level model (:class:`sim_models.tile_iss.TileIss`): it
writes the prompt ids into the scratchpad, sets the position and sequence registers, runs the
prefill program, then the decode program once per generated token, reading the logits row after
each run and choosing the next token greedily (:func:`sim_models.transformer.greedy`). Every run's
counters are kept as one report per phase.
"""

import numpy as np

from poblano.compiler.errors import CompileError
from poblano.compiler.lowering import R_POS, R_SEQ, compile_model
from sim_models import transformer
from sim_models.tile_isa import TileConfig
from sim_models.tile_iss import TileIss

__all__ = ["TileRunner"]


class TileRunner:
    """A model compiled for ``tile`` and loaded into a fresh instruction-level model.

    ``iss`` is the machine (scratchpad, registers, KV cache, counters); ``reports`` the counters of
    every run so far, each with its ``phase`` (``"prefill"``, ``"decode"`` or ``"fill"``), ``tokens`` and
    ``position``; ``trace`` what the host did in each run, so another machine (the RTL tile) can
    replay it from the same fresh state: ``ids_addr`` and ``ids`` (written to the scratchpad),
    ``regs``, ``program`` (instructions), ``logits_addr`` and ``logits`` (the binary32 words the
    run left there).
    """

    def __init__(self, model, tile: TileConfig | None = None, max_context: int | None = None):
        self.compiled = compile_model(model, tile, max_context)
        self.tile = self.compiled.tile
        self.iss = TileIss(self.tile, self.compiled.image.data, model.config.head_dim)
        self.reports = []
        self.trace = []
        self._decode = None
        self.position = 0

    def check_context(self, prompt_tokens: int, n_new: int) -> None:
        """:class:`CompileError` unless a prompt and ``n_new`` generated tokens fit the KV cache."""
        needed = prompt_tokens + max(n_new - 1, 0)
        if needed > self.compiled.max_context:
            raise CompileError(f"a prompt of {prompt_tokens} tokens and {n_new} generated need {needed} "
                               f"KV positions, the tile holds {self.compiled.max_context} per sequence")
        self.compiled.symbols(prompt_tokens)          # the prefill's scratchpad plan must fit

    def run(self, token_ids, open_kv: bool, all_logits: bool = False, attention: bool = True) -> np.ndarray:
        """Run ``token_ids`` at the current position; returns the logits rows the program leaves.

        ``attention=False``: a KV fill (:meth:`CompiledModel.forward`), phase ``"fill"``: the
        context grows without attention's cost, and the logits are not the model's."""
        c = self.compiled.config
        ids = transformer.check_tokens(np.asarray(token_ids), c.vocab_size)
        t = len(ids)
        if self.position + t > self.compiled.max_context:
            raise CompileError(f"a context of {self.position + t} positions exceeds the tile's KV "
                               f"capacity of {self.compiled.max_context}")
        if t == 1 and not open_kv and not all_logits and attention:
            if self._decode is None:
                self._decode = self.compiled.forward(1)
            program = self._decode
        else:
            program = self.compiled.forward(t, open_kv=open_kv, all_logits=all_logits, attention=attention)
        symbols = self.compiled.symbols(t, all_logits)
        self.iss.write_words(symbols["s:ids"][0], ids.astype(np.uint32))
        self.iss.reset_counters()
        regs = {R_POS: self.position, R_SEQ: 0}
        self.iss.run(program.instructions, regs=regs)
        phase = "fill" if not attention else "prefill" if open_kv else "decode"
        report = {"phase": phase, "tokens": t, "position": self.position}
        report.update(self.iss.counters())
        self.reports.append(report)
        self.position += t
        rows = t if all_logits else 1
        logits = symbols["s:logits"][0]
        out = self.iss.read_floats(logits, rows * c.vocab_size)
        self.trace.append({"phase": report["phase"], "ids_addr": symbols["s:ids"][0],
                           "ids": [int(i) for i in ids], "regs": regs, "program": program.instructions,
                           "logits_addr": logits, "logits": [int(w) for w in out.view(np.uint32)]})
        return out.reshape(rows, c.vocab_size)

    def generate(self, prompt_ids, n_new: int) -> tuple[np.ndarray, np.ndarray]:
        """Prefill then greedy decode, like :func:`sim_models.transformer.generate`: the ``n_new``
        ids and the logits row that chose each."""
        vocab = self.compiled.config.vocab_size
        ids = transformer.check_tokens(prompt_ids, vocab, "prompt token")
        self.check_context(ids.size, n_new)
        out_ids = np.zeros(n_new, dtype=np.int64)
        out_logits = np.zeros((n_new, vocab), dtype=np.float32)
        if n_new == 0:
            return out_ids, out_logits
        row = self.run(ids, open_kv=True)[-1]
        for step in range(n_new):
            out_logits[step] = row
            out_ids[step] = transformer.greedy(row)
            if step + 1 < n_new:
                row = self.run(out_ids[step:step + 1], open_kv=False)[-1]
        return out_ids, out_logits
