"""Mappings of a model onto dies: tensor parallelism (experts spread over the same dies: expert
parallelism), pipeline parallelism, and where the KV cache lives.

A :class:`Mapping` puts ``pp`` pipeline stages of ``tp`` dies each; every stage holds
``layers / pp`` layers, its attention and dense weights split over its ``tp`` dies and its routed
experts spread over them (``ep = tp``). KV lives with the attention: split by KV head when there
are at least ``tp`` KV heads, otherwise (MLA's one latent, few KV heads) split by position, each die
attending to its share of the context and the partial results combined in the attention's
all-reduce (flash-decoding across dies). :func:`candidates` lists every mapping that fits the
system's memory; :func:`search` (in :mod:`.estimate`) picks one per operating point.
"""

import math
from dataclasses import dataclass

__all__ = ["Mapping", "candidates", "weight_bytes_total", "fits"]


@dataclass(frozen=True)
class Mapping:
    tp: int
    pp: int
    kv: str                      # "heads" or "positions"

    @property
    def dies(self) -> int:
        return self.tp * self.pp

    def describe(self) -> str:
        return f"{self.dies} dies: TP{self.tp} x PP{self.pp}, EP{self.tp}, KV by {self.kv}"


def weight_bytes_total(model, die) -> float:
    """Bytes of all the model's weights at the die's weight format (``weight_bits``)."""
    return model.total_params() * die.weight_bits / 8


def fits(model, system, mapping, concurrency, context) -> bool:
    """True when the weights and ``concurrency`` sequences of ``context`` KV positions fit the
    HBM of the mapping's dies (evenly split)."""
    die = system.die
    need = weight_bytes_total(model, die) + \
        concurrency * model.kv_bytes_stored(context, die.kv_bytes_per_element)
    return need <= mapping.dies * die.hbm_bytes


def candidates(model, system, concurrency, context) -> list[Mapping]:
    """Every mapping on a power-of-two number of dies (up to the scale-up domain) that fits."""
    out = []
    dies = 1
    while dies <= system.links.max_dies:
        for tp in (2 ** i for i in range(int(math.log2(dies)) + 1)):
            pp = dies // tp
            if pp > model.layers:
                continue
            kv = "heads" if model.attention == "gqa" and model.kv_heads % tp == 0 else "positions"
            m = Mapping(tp, pp, kv)
            if fits(model, system, m, concurrency, context):
                out.append(m)
        dies *= 2
    return out
