"""Per operating point (model, system, input and output lengths, concurrency): prefill time and
time to first token, decode time per token split into compute, HBM, on-die fabric, die-to-die
latency and bandwidth and synchronization, tokens/s/user, tokens/s per die and per MW, and the
bound that limits it, for the best mapping found (``docs/perf_model.md`` has the equations).

:func:`estimate` is the entry point; it raises :class:`FitError` when no mapping fits.
"""

import math
from dataclasses import asdict, dataclass, field

from .energy import Activity, energy_joules
from .mapping import Mapping, candidates
from .tile_costs import TILE_COSTS, attention_cycles, gemm_cycles, vop_cycles

__all__ = ["FitError", "Point", "estimate", "point", "OBJECTIVES", "decode_step", "prefill", "ACT_BYTES"]

ACT_BYTES = 2            # activations cross links and fabrics as bfloat16


class FitError(ValueError):
    """The model does not fit the system at this operating point (one line)."""


@dataclass
class Point:
    """One operating point's figures (seconds, tokens/s, watts)."""

    concurrency: int
    mapping: str
    dies: int
    tp: int
    pp: int
    ttft_s: float
    decode_s: float                  # per output token (one step)
    split: dict = field(default_factory=dict)   # decode step: seconds per component
    bound: str = ""
    tokens_per_s_user: float = 0.0
    tokens_per_s: float = 0.0        # the system's output tokens/s, prefills included
    tokens_per_s_die: float = 0.0
    power_w: float = 0.0
    tokens_per_s_mw: float = 0.0
    energy_per_token_j: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _tile_config(die):
    from sim_models.tile_isa import TileConfig

    return TileConfig(rows=die.rows, cols=die.cols, interleave=die.interleave, lanes=die.lanes)


def _tile_layer_seconds(model, die, tokens, context, decode):
    """Seconds of one layer of ``tokens`` tokens on a die of tiles priced by :mod:`.tile_costs`
    (the compiler's program: per-token expert GEMMs, attention on the vector unit), the work
    spread evenly over the die's tiles."""
    tile = _tile_config(die)
    h, wb = model.hidden, die.weight_bits / 8
    port = die.hbm_bytes_per_s / die.tiles / die.clock_hz          # weight bytes per tile cycle

    def gemm(m, k, n):
        k = 32 * math.ceil(k / 32)
        return gemm_cycles(m, k, n, tile, port, k * n * wb)
    qd, kvd = model.heads * model.head_dim, model.kv_heads * model.head_dim
    if model.attention == "mla":
        kvd = model.kv_lora_rank + model.rope_dim
    cycles = gemm(tokens, h, qd) + 2 * gemm(tokens, h, kvd) + \
        gemm(tokens, model.heads * model.v_head_dim, h)
    hd, kvh = (model.head_dim, model.kv_heads) if model.attention == "gqa" else \
        (model.kv_lora_rank + model.rope_dim, 1)
    hd = die.lanes * math.ceil(hd / die.lanes)
    if decode:
        cycles += tokens * attention_cycles(hd, kvh, model.heads, 1, context - 1, die.lanes)
    else:
        cycles += attention_cycles(hd, kvh, model.heads, tokens, 0, die.lanes)
    if model.experts:
        e = model.expert_ffn
        cycles += tokens * model.top_k * (2 * gemm(1, h, e) + gemm(1, e, h) +
                                          vop_cycles("swiglu", 1, e, die.lanes))
        cycles += gemm(tokens, h, model.experts) + vop_cycles("topk", tokens, model.experts, die.lanes)
    else:
        f = model.dense_ffn
        cycles += 2 * gemm(tokens, h, f) + gemm(tokens, f, h) + vop_cycles("swiglu", tokens, f, die.lanes)
    cycles += 2 * vop_cycles("rmsnorm", tokens, h, die.lanes) + 2 * vop_cycles("add", tokens, h, die.lanes)
    cycles += vop_cycles("rope", tokens * (model.heads + kvh), min(hd, 256), die.lanes)
    cycles += 40 * TILE_COSTS.issue                                  # about 40 instructions a layer
    return cycles / die.clock_hz / die.tiles


def _allreduce(bytes_, tp, links):
    """(latency, bandwidth) seconds of an all-reduce of ``bytes_`` over ``tp`` dies (recursive
    halving and doubling: 2 log2 tp steps, 2 (tp - 1) / tp of the data through each die's link)."""
    if tp <= 1:
        return 0.0, 0.0
    steps = 2 * math.ceil(math.log2(tp))
    return steps * links.scale_up_latency_ns * 1e-9, 2 * (tp - 1) / tp * bytes_ / links.scale_up_bytes_per_s


def _fabric(die, bytes_):
    """Seconds to move ``bytes_`` of activations across the die's mesh: the mean hop count times
    the router latency, plus the bytes through the bisection (``min(mesh)`` links of a flit a cycle)."""
    hops = (die.mesh_x + die.mesh_y) / 2
    lat = hops * die.fabric_hop_cycles / die.fabric_clock_hz
    return lat + bytes_ / (die.flit_bytes * die.fabric_clock_hz * min(die.mesh_x, die.mesh_y)), hops


def _memory_and_compute(model, die, tp, tokens, kv, flops, context, decode):
    """(weight bytes, HBM seconds, compute seconds) of a pass of ``tokens`` tokens over a stage of
    ``tp`` dies: the dense, head and touched-expert weights plus ``kv`` bytes through the HBM;
    ``flops`` at the peak (roofline dies) or the tile costs (tile dies)."""
    params = model.dense_params() + model.embedding_params() + \
        model.moe_layers() * model.experts_touched(tokens) * model.expert_params()
    weights = params * die.weight_bits / 8
    hbm = (weights + kv) / (tp * die.hbm_bytes_per_s * die.hbm_efficiency)
    if die.engine == "roofline":
        compute = flops / (tp * die.flops * die.mac_efficiency)
    else:
        compute = model.layers * _tile_layer_seconds(model, die, tokens, context, decode) / tp
    return weights, hbm, compute


def decode_step(model, system, mapping: Mapping, concurrency, context):
    """(seconds per component, activity) of one decode step of ``concurrency`` sequences at
    ``context`` positions: each pipeline stage runs ``concurrency / pp`` of them."""
    die, links = system.die, system.links
    tp, pp = mapping.tp, mapping.pp
    b = math.ceil(concurrency / pp)
    kv = b * model.kv_bytes_read(context, die.kv_bytes_per_element)
    flops = b * model.flops_per_token(context)
    weights, hbm, compute = _memory_and_compute(model, die, tp, b, kv, flops, context, True)
    act = b * model.hidden * ACT_BYTES
    fab, hops = _fabric(die, act)
    lat, bw = _allreduce(act, tp, links)
    split = {"compute": compute, "hbm": hbm, "fabric": 2 * model.layers * fab,
             "d2d_latency": 2 * model.layers * lat, "d2d_bandwidth": 2 * model.layers * bw,
             "sync": (pp - 1) * (links.scale_up_latency_ns * 1e-9 + act / links.scale_up_bytes_per_s)}
    # per step, all stages: each stage handles its own b sequences
    activity = Activity(macs=pp * flops / 2, hbm_bits=8 * pp * (weights + kv),
                        sram_bits=2 * 8 * pp * (weights + kv),
                        flit_hops=pp * 2 * model.layers * tp * act / die.flit_bytes * hops,
                        serdes_bits=8 * pp * model.layers * 2 * 2 * (tp - 1) * act + 8 * (pp - 1) * act * pp)
    return split, activity


def _step_seconds(split):
    """A decode step: compute and HBM overlap; fabric, links and synchronization add."""
    rest = sum(v for k, v in split.items() if k not in ("compute", "hbm"))
    return max(split["compute"], split["hbm"]) + rest


def prefill(model, system, mapping: Mapping, tokens):
    """(seconds, activity) of one request's prefill of ``tokens`` (alone on the mapping's dies)."""
    die, links = system.die, system.links
    tp = mapping.tp
    kv = model.kv_bytes_stored(tokens, die.kv_bytes_per_element)
    flops = model.prefill_flops(tokens)
    weights, hbm, compute = _memory_and_compute(model, die, tp, tokens, kv, flops, tokens, False)
    act = tokens * model.hidden * ACT_BYTES
    fab, hops = _fabric(die, act)
    lat, bw = _allreduce(act, tp, links)
    seconds = max(compute, hbm) + 2 * model.layers * (fab + lat + bw) + \
        (mapping.pp - 1) * (links.scale_up_latency_ns * 1e-9 + act / links.scale_up_bytes_per_s)
    activity = Activity(macs=flops / 2, hbm_bits=8 * (weights + kv), sram_bits=16 * (weights + kv),
                        flit_hops=2 * model.layers * tp * act / die.flit_bytes * hops,
                        serdes_bits=8 * model.layers * 4 * (tp - 1) * act)
    return seconds, activity


def point(model, system, mapping, isl, osl, concurrency) -> Point:
    """The figures of one mapping at one operating point (decode at the mean context ``isl + osl / 2``)."""
    split, step_act = decode_step(model, system, mapping, concurrency, isl + osl // 2)
    step = _step_seconds(split)
    ttft, pre_act = prefill(model, system, mapping, isl)
    # a round: every sequence's prefill, then osl decode steps of all of them
    round_s = concurrency * ttft + osl * step
    tokens = concurrency * osl
    energy = energy_joules(_scaled(pre_act, concurrency) + _scaled(step_act, osl), system.energy,
                           mapping.dies, round_s)
    power = energy["total"] / round_s
    bound = max(split, key=split.get)
    return Point(concurrency=concurrency, mapping=mapping.describe(), dies=mapping.dies,
                 tp=mapping.tp, pp=mapping.pp, ttft_s=ttft,
                 decode_s=step, split=split, bound=bound, tokens_per_s_user=1 / step,
                 tokens_per_s=tokens / round_s, tokens_per_s_die=tokens / round_s / mapping.dies,
                 power_w=power, tokens_per_s_mw=tokens / round_s / (power / 1e6),
                 energy_per_token_j=energy["total"] / tokens)


def _scaled(activity, k):
    return Activity(*(v * k for v in vars(activity).values()))


OBJECTIVES = ("user", "die")


def estimate(model, system, isl, osl, concurrency, objective="user") -> Point:
    """The best mapping's figures. Objective ``user``: the highest tokens/s/user, on the fewest dies
    within 5 % of it; ``die``: the highest tokens/s per die."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    found = candidates(model, system, concurrency, isl + osl)
    if not found:
        need = model.total_params() * system.die.weight_bits / 8 / 1e9
        raise FitError(f"{model.name} ({need:.3g} GB of weights at {system.die.weight_bits} bits, plus KV "
                       f"of {concurrency} x {isl + osl} positions) does not fit {system.name}: "
                       f"{system.links.max_dies} dies of {system.die.hbm_bytes / 1e9:.3g} GB")
    points = [point(model, system, m, isl, osl, concurrency) for m in found]
    if objective == "die":
        return max(points, key=lambda p: (p.tokens_per_s_die, -p.dies))
    best = max(p.tokens_per_s_user for p in points)
    return min((p for p in points if p.tokens_per_s_user >= 0.95 * best),
               key=lambda p: (p.dies, -p.tokens_per_s_user))
