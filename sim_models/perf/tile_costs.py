"""Cycles of the compute tile's instructions, derived from how its engines work.

:func:`instruction_cycles` prices one executed instruction (its fields with the registers applied)
on a :class:`~sim_models.tile_isa.TileConfig`; :func:`trace_program` records the instructions a
compiled model executes on the instruction-level model (:mod:`sim_models.tile_iss`), and
:func:`predict_run` adds them up per class, like the RTL tile's performance counters
(``docs/tile.md``, "Performance counters"). Every parameter of :data:`TILE_COSTS` names the
benchmark, docstring or test it comes from (``docs/perf_model.md``); nothing is fitted per run.
"""

import math
from dataclasses import dataclass

__all__ = ["TileCosts", "TILE_COSTS", "instruction_cycles", "trace_program", "predict_run",
           "attention_cycles", "gemm_cycles", "vop_cycles", "CLASSES"]

CLASSES = ("gemm_cycles", "attn_cycles", "vop_cycles", "kv_cycles", "copy_cycles", "other_cycles")
"""The RTL tile's cycle classes (they add up to ``cycles``)."""


@dataclass(frozen=True)
class TileCosts:
    """Cycle parameters of the tile's engines; each field's comment names its source."""

    # sequencer: fetch 2 + decode 1 + next-pc 1 per instruction (docs/tile.md, PERF_OTHER_CYCLES)
    issue: int = 4
    # scalar instructions execute within those cycles; a branch refetches (fetch 2 + decode 1):
    # tile.json's tiny-mixtral prefill, 128 BLTs, 386 cycles beyond 4 per instruction
    branch: int = 3
    # vector unit, from benchmarks/results/vpu.md (4 lanes, n = 64, cycles - n / lanes):
    # latency from a command's first beat to its last result beyond the beats themselves
    lat_elementwise: int = 18      # add, sub, mul, fma, scale, ...: 34 - 16
    lat_transcendental: int = 46   # exp, reciprocal, rsqrt, sigmoid, silu: 62 - 16
    lat_sum: int = 31              # sum, sum_squares: 47 - 16
    lat_rmsnorm: int = 115         # 147 - 2 * 16 (two passes)
    lat_softmax: int = 102         # 150 - 3 * 16 (three passes)
    lat_rope: int = 46             # 78 - 2 * 8 (two passes of 32)
    lat_topk: int = 58             # 74 - 16
    # VOP engine (rtl/tile/vop_engine.py docstring): one scratchpad operand beat per cycle, so a
    # pass reading j scratchpad operands takes j cycles a beat; a command's checks, start and
    # final status: the one parameter estimated from the tile runs' ATTN cycles (docs/perf_model.md)
    vop_command: int = 10
    # a row boundary costs the reader one cycle (the decode marginal cost per record, tile.json)
    vop_row: int = 1
    # attention engine (rtl/tile/attention_engine.py docstring): records staged per chunk, query
    # heads per set; staging widens a record in hd / lanes cycles
    stage_records: int = 32
    max_group: int = 4
    # a chained fma row waits for the result one set back: the unit's 18-cycle latency plus the
    # writer's and reader's registers (4): 22 cycles a record unless the set's rows take longer
    fma_chain: int = 22
    # GEMM engine (rtl/tile/gemm_engine.py, benchmarks/results/gemm_engine.md): the first row block
    # is quantized before the first tile (k / lanes), then the array's fill and drain
    gemm_fill: int = 30
    # KV engine (docs/tile.md): 2 hd / lanes + 1 cycles per appended record, an open per sequence
    kv_open: int = 6
    kv_record_extra: int = 1
    # copies (docs/tile.md): one scratchpad word per cycle, plus the range checks
    copy_start: int = 6


TILE_COSTS = TileCosts()

_ROW_SERIAL = {"rmsnorm", "softmax"}
_TRANSCENDENTAL = {"exp", "reciprocal", "rsqrt", "sigmoid", "silu", "swiglu"}
_PASS_OPERANDS = {"rmsnorm": ("a", "ab"), "softmax": ("a", "a", "a"), "rope": ("ac", "ab"),
                  "topk": ("a",), "sum": ("a",), "sum_squares": ("a",), "max_reduce": ("a",)}


def _latency(op, costs):
    if op in _TRANSCENDENTAL:
        return costs.lat_transcendental
    return {"sum": costs.lat_sum, "sum_squares": costs.lat_sum, "rmsnorm": costs.lat_rmsnorm,
            "softmax": costs.lat_softmax, "rope": costs.lat_rope, "topk": costs.lat_topk,
            "max_reduce": 9, "max": 6, "min": 6, "to_bf16": 6, "from_bf16": 6,
            "clamp": 7}.get(op, costs.lat_elementwise)


def vop_cycles(op, rows, length, lanes, spad_operands=None, costs=TILE_COSTS):
    """Cycles of one ``VOP`` of ``rows`` rows of ``length``: every pass streams its operands (``j``
    scratchpad operands take ``j`` cycles a beat), plus a row switch, the unit's latency (per row
    for ``rmsnorm`` and ``softmax``, whose passes wait for the row's reduction) and the command's
    overhead. ``spad_operands``: operand streams per pass (default: the ISA's)."""
    from sim_models.tile_isa import VOP_OPERANDS

    passes = spad_operands or _PASS_OPERANDS.get(op, (VOP_OPERANDS[op],))
    beats = math.ceil(length / lanes)
    per_row = sum(max(1, len(p)) * beats for p in passes) + costs.vop_row
    if op in _ROW_SERIAL:                # the next pass needs the row's reduction (docs/vpu.md)
        return rows * (per_row + _latency(op, costs)) + costs.vop_command
    return rows * per_row + _latency(op, costs) + costs.vop_command


def gemm_cycles(m, k, n, tile, data_bytes, weight_bytes, costs=TILE_COSTS):
    """Cycles of one ``GEMM`` (``m x k`` activations, ``k x n`` weight of ``weight_bytes``).

    The B FIFO holds two k-blocks, so the array works on one while the next streams in: an M-tile
    whose B beats are streamed takes the longer of the stream and its beats; the M-tiles that
    replay the B buffer take their beats. Without room in the buffer every M-tile streams."""
    blocks = k // 32
    m_tiles = math.ceil(m / tile.rows)
    row_beats = math.ceil(n / tile.tile_cols) * blocks * tile.interleave   # one M-tile's beats
    stream = math.ceil(weight_bytes / data_bytes)
    streamed = max(stream, row_beats)
    if blocks * tile.interleave > tile.weight_buffer_beats:
        body = m_tiles * streamed          # re-streamed per M-tile
    else:
        body = streamed + (m_tiles - 1) * row_beats
    return body + math.ceil(tile.rows * k / tile.lanes / 2) + costs.gemm_fill


def attention_cycles(hd, kvh, heads, count, pos, lanes, costs=TILE_COSTS):
    """Cycles of one ``ATTN`` of ``count`` queries from position ``pos``: per query, per set of up
    to ``max_group`` heads of a KV head, per chunk of ``stage_records`` records: stage K, ``mul``,
    ``sum``, stage V, chained ``fma``; per set a ``scale`` and a ``softmax`` over the ``n`` scores."""
    group = heads // kvh
    sets = [min(costs.max_group, group - s) for s in range(0, group, costs.max_group)]
    b = math.ceil(hd / lanes)
    lat = costs.lat_elementwise
    total = 0
    for i in range(count):
        n = pos + i + 1
        for g in sets:
            full, last = divmod(n, costs.stage_records)
            for r, times in ((costs.stage_records, full), (last, 1 if last else 0)):
                chunk = (2 * r * b                                   # stage K and V
                         + 2 * g * r * (b + costs.vop_row)           # mul, sum
                         + r * max(g * (b + costs.vop_row), costs.fma_chain)   # chained fma
                         + 2 * lat + costs.lat_sum + 5 * costs.vop_command)
                total += times * chunk
            beats = math.ceil(n / lanes)
            total += (g * beats + lat + g * (3 * beats + costs.lat_softmax) + 2 * costs.vop_command)
    return kvh * total + kvh * costs.vop_command     # + the one-record read per KV head


def instruction_cycles(name, f, regs, tile, head_dim, data_bytes, costs=TILE_COSTS):
    """(class, cycles) of executing one instruction with fields ``f`` and registers ``regs``."""
    from sim_models import tile_weights
    from sim_models.tile_isa import FORMATS, VOPS

    if name == "GEMM":
        nbytes = tile_weights.mx_bytes(f["k"], f["n"], FORMATS[f["wf"]])
        return "gemm_cycles", gemm_cycles(f["m"], f["k"], f["n"], tile, data_bytes, nbytes, costs)
    if name == "ATTN":
        pos = regs[f["pos_r"]] if f["pos_r"] else 0
        return "attn_cycles", attention_cycles(f["hd"], f["kvh"], f["heads"], f["count"], pos,
                                               tile.lanes, costs)
    if name == "VOP":
        return "vop_cycles", vop_cycles(VOPS[f["op"]], f["rows"], f["len"], tile.lanes, costs=costs)
    if name == "KVAPPEND":
        per = 2 * math.ceil(f["hd"] / tile.lanes) + costs.kv_record_extra
        return "kv_cycles", f["count"] * f["kvh"] * per + costs.kv_open
    if name == "KVOPEN":
        return "kv_cycles", f["count"] * costs.kv_open
    if name == "LOAD":
        return "copy_cycles", f["words"] + costs.copy_start
    if name == "EMBED":
        return "copy_cycles", f["count"] * (f["row"] + 1) + costs.copy_start
    return "other_cycles", costs.branch if name in ("BLT", "BNE") else 0


def trace_program(runner, token_ids, open_kv, attention=True):
    """Run ``token_ids`` on a :class:`poblano.compiler.TileRunner`'s ISS (``TileRunner.run``'s
    arguments) and return the executed instructions as ``(name, fields, registers)`` plus the
    ISS's counters of the run."""
    from sim_models.tile_isa import INSTRUCTIONS

    iss, executed = runner.iss, []
    originals = {}
    for name in INSTRUCTIONS:
        if name == "HALT":
            continue
        originals[name] = getattr(iss, "_x_" + name)

        def traced(f, name=name):
            executed.append((name, dict(f), list(iss.regs)))
            return originals[name](f)
        setattr(iss, "_x_" + name, traced)
    try:
        runner.run(token_ids, open_kv=open_kv, attention=attention)
    finally:
        for name in originals:
            delattr(iss, "_x_" + name)
    return executed, runner.reports[-1]


def predict_run(executed, counters, tile, head_dim, data_bytes, costs=TILE_COSTS):
    """Predicted cycles of one traced run, per class (the RTL counters' names) and in total."""
    out = dict.fromkeys(CLASSES, 0)
    for name, f, regs in executed:
        cls, cycles = instruction_cycles(name, f, regs, tile, head_dim, data_bytes, costs)
        out[cls] += cycles
    out["other_cycles"] += costs.issue * counters["instructions"]
    out["cycles"] = sum(out[c] for c in CLASSES)
    return out
