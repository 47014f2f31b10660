"""Reusable cocotb environment of :class:`rtl.vpu.vector_unit.VectorUnit`: commands in, results checked.

:class:`VpuJob` is one command with its operand rows; :func:`expected_beats` turns it into the
result beats the golden model (``sim_models.vpu``) promises, in the unit's beat format; :class:`VpuEnv`
drives the command and operand streams (with random idle cycles), sinks ``o`` (with random stalls),
checks every beat in order on a scoreboard and watches the protocol of every stream. The testbench,
the benchmark and the ``poblano vpu --sim`` command all use it.
"""

from dataclasses import dataclass

import numpy as np

from rtl.vpu.layouts import OPERANDS, PASSES, Op, VpuCommand, result_beat, vector_beat
from sim_models import vpu
from verification.scoreboard import InOrderScoreboard
from verification.stream import StreamDriver, StreamMonitor, StreamSink

__all__ = ["VpuJob", "VpuEnv", "expected_beats", "operand_beats", "operand_stream", "model_result",
           "random_job", "random_composite_job", "random_rope_job", "random_topk_job", "SPECIALS"]

SPECIALS = np.array([0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0001,
                     0x7F80_0001, 0x0000_0001, 0x807F_FFFF, 0x0080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF,
                     0x3F80_0000, 0xBF80_0000, 0x42FF_FFFF, 0xC300_0000], dtype=np.uint32)
"""Special binary32 classes mixed into every random operand."""


def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _u32(x):
    return np.ascontiguousarray(x).view(np.uint32)


@dataclass
class VpuJob:
    """One command: ``op`` over ``x`` (rows x length, uint32 bit patterns), with ``b``/``c`` operands
    of the same shape where the operation takes them, and the command's scalars (bit patterns)."""
    op: Op
    x: np.ndarray
    b: np.ndarray | None = None
    c: np.ndarray | None = None
    scalar0: int = 0
    scalar1: int = 0
    length: int | None = None        # a command length other than x's (error tests)

    @property
    def rows(self):
        return self.x.shape[0]

    @property
    def n(self):
        return self.x.shape[1] if self.length is None else self.length

    def command(self):
        return {"op": self.op.value, "length": self.n, "rows": self.rows, "scalar0": self.scalar0,
                "scalar1": self.scalar1}


def model_result(job, lanes, slots):
    """The golden model's result of ``job`` as uint32 patterns: (rows, n), or (rows,) for reductions."""
    x, b, c = _f32(job.x), job.b, job.c
    op = job.op
    s0, s1 = _f32(np.uint32(job.scalar0)), _f32(np.uint32(job.scalar1))
    simple = {Op.ADD: vpu.add, Op.SUB: vpu.sub, Op.MUL: vpu.mul, Op.MAX: vpu.max, Op.MIN: vpu.min,
              Op.SWIGLU: vpu.swiglu}
    unary = {Op.EXP: vpu.exp, Op.RECIPROCAL: vpu.reciprocal, Op.RSQRT: vpu.rsqrt,
             Op.SIGMOID: vpu.sigmoid, Op.SILU: vpu.silu}
    if op in simple:
        return _u32(simple[op](x, _f32(b)))
    if op in unary:
        return _u32(unary[op](x))
    if op == Op.FMA:
        return _u32(vpu.fma(x, _f32(b), _f32(c)))
    if op == Op.SCALE:
        return _u32(vpu.scale(x, s0))
    if op == Op.CLAMP:
        return _u32(vpu.clamp(x, s0, s1))
    if op == Op.TO_BF16:
        return vpu.to_bfloat16(x).astype(np.uint32)
    if op == Op.FROM_BF16:
        return _u32(vpu.from_bfloat16((job.x & 0xFFFF).astype(np.uint16)))
    if op == Op.SUM:
        return _u32(vpu.sum(x, lanes=lanes, slots=slots))
    if op == Op.SUM_SQUARES:
        return _u32(vpu.sum_squares(x, lanes=lanes, slots=slots))
    if op == Op.MAX_REDUCE:
        return _u32(vpu.max_reduce(x))
    if op == Op.RMSNORM:
        eps = np.uint32(job.scalar0 & 0x7FFF_FFFF).view(np.float32)
        return _u32(vpu.rmsnorm(x, _f32(b), eps, lanes=lanes, slots=slots))
    if op == Op.SOFTMAX:
        return _u32(vpu.softmax(x))
    if op == Op.ROPE:
        return _u32(vpu.rope(x, _f32(b), _f32(c)))
    raise ValueError(f"no model adapter for {op}")


def operand_beats(rows, lanes, rng=None):
    """Beats of ``rows`` (rows x n uint32): ``ceil(n / lanes)`` per row, the unused lanes filled
    with random patterns (the unit must ignore them) or zeros."""
    count, n = rows.shape
    per_row = -(-n // lanes)
    padded = np.zeros((count, per_row * lanes), dtype=np.uint32)
    if rng is not None:
        padded[:] = rng.integers(0, 2 ** 32, padded.shape, dtype=np.uint64).astype(np.uint32)
    padded[:, :n] = rows
    return [[int(v) for v in beat] for beat in padded.reshape(count * per_row, lanes)]


def operand_stream(job, name, lanes, rng=None):
    """The beats of operand stream ``name`` for ``job``: each row's beats once, or for a composite's
    ``a`` :data:`~rtl.vpu.layouts.PASSES` times in a row, row after row."""
    rows = {"a": job.x, "b": job.b, "c": job.c}[name]
    if name != "a" or job.op not in PASSES:
        return operand_beats(rows, lanes, rng)
    beats = []
    for row in rows:
        for index in range(PASSES[job.op]):
            if job.op == Op.ROPE and index == 0:          # x rotated by half its length
                row_in = np.roll(row, -(len(row) // 2))
            else:
                row_in = row
            beats += operand_beats(row_in[None, :], lanes, rng)
    return beats


def expected_beats(job, lanes, slots, max_length=vpu.MAX_LENGTH, supported=None, rope_length=256, max_k=8):
    """The result beats (dicts of ``result_beat``) the unit must produce for ``job``."""
    eps = job.scalar0
    bad_eps = job.op == Op.RMSNORM and ((eps >> 23) & 0xFF == 0xFF or (eps >> 31 and eps & 0x7FFF_FFFF))
    bad_rope = job.op == Op.ROPE and (job.n % 2 == 1 or job.n > rope_length)
    bad_k = job.op == Op.TOPK and not 1 <= job.scalar0 <= min(job.n, max_k)
    if (job.n == 0 or job.n > max_length or (supported is not None and job.op not in supported) or bad_eps
            or bad_rope or bad_k):
        return [{"data": [0] * lanes, "last": 1, "error": 1}]
    beats = []
    if job.op == Op.TOPK:                                # per row: the values' beats, the indices' beats
        values, indices = vpu.topk(_f32(job.x), job.scalar0)
        for v_row, i_row in zip(_u32(values), indices.astype(np.uint32), strict=True):
            for data in operand_beats(v_row[None, :], lanes) + operand_beats(i_row[None, :], lanes):
                beats.append({"data": data, "last": 0, "error": 0})
        beats[-1]["last"] = 1
        return beats
    want = model_result(job, lanes, slots)
    if want.ndim == 1:                                   # one result per row
        for value in want:
            beats.append({"data": [int(value)] + [0] * (lanes - 1), "last": 0, "error": 0})
    else:
        for data in operand_beats(want, lanes):
            beats.append({"data": data, "last": 0, "error": 0})
    beats[-1]["last"] = 1
    return beats


class VpuEnv:
    """Drivers, sink, monitors and scoreboard around a ``VectorUnit`` of ``lanes`` lanes.

    With ``check`` (default) every result beat is compared in order with the golden model's; without
    it the beats are collected in :attr:`received` for the caller (``poblano vpu --sim`` compares
    them itself, to report every mismatch rather than the first)."""

    def __init__(self, dut, lanes, slots, rng, *, max_length=vpu.MAX_LENGTH, supported=None,
                 rope_length=256, max_k=8, idle_prob=0.0, stall_prob=0.0, check=True):
        self.lanes, self.slots, self.rng = lanes, slots, rng
        self.max_length, self.supported, self.rope_length = max_length, supported, rope_length
        self.max_k = max_k
        beat = vector_beat(lanes)
        self.cmd = StreamDriver(dut, "cmd", dut.clk, layout=VpuCommand, idle_prob=idle_prob)
        self.operands = {name: StreamDriver(dut, name, dut.clk, layout=beat, idle_prob=idle_prob)
                         for name in "abc"}
        self.scoreboard = InOrderScoreboard("vpu.o", formatter=_format_beat)
        self.received = []
        self.check = check
        self.sink = StreamSink(dut, "o", dut.clk, layout=result_beat(lanes), stall_prob=stall_prob,
                               callback=self.scoreboard.got if check else self.received.append)
        self.monitors = [StreamMonitor(dut, name, dut.clk) for name in ("cmd", "a", "b", "c", "o")]
        self.results = 0

    def submit(self, job):
        """Queue ``job``'s command and operand beats and (when checking) its expected results."""
        beats = expected_beats(job, self.lanes, self.slots, self.max_length, self.supported, self.rope_length,
                               self.max_k)
        for beat in beats:
            if self.check:
                self.scoreboard.expect(beat)
            self.results += 1
        self.cmd.append(job.command())
        if beats[0]["error"]:
            return
        for name in OPERANDS[job.op]:
            for beat in operand_stream(job, name, self.lanes, self.rng):
                self.operands[name].append(beat)

    def done(self):
        """Every result beat of the submitted jobs has arrived (and matched, when checking)."""
        return (self.scoreboard.matched if self.check else len(self.received)) == self.results


def _format_beat(beat):
    data = " ".join(f"{v:08x}" for v in beat["data"])
    return f"[{data}] last={beat['last']} error={beat['error']}"


def random_operand(rng, rows, n):
    """rows x n binary32 patterns: a third uniform bits, a third in [-130, 130], a third wide-range
    normals, with specials sprinkled in (uint32)."""
    count = rows * n
    kind = rng.integers(0, 3, count)
    bits = rng.integers(0, 2 ** 32, count, dtype=np.uint64).astype(np.uint32)
    near = rng.uniform(-130, 130, count).astype(np.float32).view(np.uint32)
    with np.errstate(over="ignore"):
        wide = (rng.standard_normal(count) * np.exp2(rng.integers(-140, 120, count))).astype(np.float32)
    out = np.where(kind == 0, bits, np.where(kind == 1, near, wide.view(np.uint32)))
    sprinkle = rng.random(count) < 0.08
    out[sprinkle] = rng.choice(SPECIALS, int(sprinkle.sum()))
    return out.reshape(rows, n).astype(np.uint32)


def random_job(rng, op, lanes, *, max_rows=3, max_n=None):
    """A random command of ``op`` with operands of every class; lengths hit multiples of ``lanes``,
    partial last beats and single elements."""
    max_n = max_n or 5 * lanes
    rows = int(rng.integers(1, max_rows + 1))
    n = int(rng.choice([1, lanes, lanes + 1, 2 * lanes - 1, int(rng.integers(1, max_n + 1))]))
    x = random_operand(rng, rows, n)
    b = random_operand(rng, rows, n) if "b" in OPERANDS[op] else None
    c = random_operand(rng, rows, n) if "c" in OPERANDS[op] else None
    s0 = int(random_operand(rng, 1, 1)[0, 0])
    s1 = int(random_operand(rng, 1, 1)[0, 0])
    if op == Op.CLAMP:
        lo, hi = sorted(rng.uniform(-200, 200, 2).astype(np.float32))
        s0, s1 = int(np.float32(lo).view(np.uint32)), int(np.float32(hi).view(np.uint32))
    return VpuJob(op, x, b, c, s0, s1)


EPS_CHOICES = np.array([0x0000_0000, 0x3586_37BD, 0x3727_C5AC, 0x0000_0001, 0x3F80_0000, 0x7F7F_FFFF,
                        0x8000_0000], dtype=np.uint32)
"""rmsnorm's eps: 0, 1e-6, 1e-5, the smallest subnormal, 1, the largest finite, -0."""


def _composite_row(rng, n, op):
    """One row for a composite: mostly finite values of one scale, sometimes specials or extremes."""
    kind = int(rng.integers(0, 8))
    if kind == 0:                                       # uniform finite bit patterns
        row = rng.integers(0, 0x7F80_0000, n, dtype=np.uint64).astype(np.uint32)
        row |= (rng.integers(0, 2, n, dtype=np.uint64) << 31).astype(np.uint32)
    elif kind == 1:                                     # all zeros (rmsnorm with eps 0: NaN)
        row = np.zeros(n, np.uint32)
    elif kind == 2:                                     # subnormals
        row = rng.integers(0, 1 << 23, n, dtype=np.uint64).astype(np.uint32)
    else:
        with np.errstate(over="ignore", under="ignore"):
            scale = np.exp2(float(rng.integers(-140, 120))) if kind == 3 else 4.0 ** float(rng.integers(0, 4))
            row = (rng.standard_normal(n) * scale).astype(np.float32).view(np.uint32)
    if rng.random() < 0.25:                              # a few specials (softmax: -Inf is harmless)
        count = int(rng.integers(1, 3))
        where = rng.integers(0, n, count)
        pool = [0xFF80_0000] * 4 + list(SPECIALS) if op == Op.SOFTMAX else list(SPECIALS)
        row[where] = rng.choice(np.array(pool, dtype=np.uint32), count)
    return row.astype(np.uint32)


def random_composite_job(rng, op, lanes, *, max_rows=3, max_n=None):
    """A random rmsnorm or softmax command whose rows are mostly finite (so their outputs are not
    all NaN), with lengths that hit multiples of ``lanes``, partial last beats and single elements."""
    max_n = max_n or 5 * lanes
    rows = int(rng.integers(1, max_rows + 1))
    n = int(rng.choice([1, lanes, lanes + 1, 2 * lanes - 1, int(rng.integers(1, max_n + 1))]))
    x = np.stack([_composite_row(rng, n, op) for _ in range(rows)])
    b = None
    s0 = 0
    if op == Op.RMSNORM:
        b = np.stack([_composite_row(rng, n, op) if rng.random() < 0.3 else
                      rng.normal(1.0, 0.2, n).astype(np.float32).view(np.uint32) for _ in range(rows)])
        s0 = int(rng.choice(EPS_CHOICES)) if rng.random() < 0.8 else int(rng.integers(0, 0x7F80_0000))
    return VpuJob(op, x, b, None, s0, 0)


def random_rope_job(rng, lanes, *, max_rows=3, max_n=None):
    """A random rope command: an even head dimension (a multiple of ``lanes``, or not), ``x`` of every
    class, and ``cos``/``sin`` from :func:`sim_models.vpu.rope_tables` or of every class."""
    max_n = max_n or 6 * lanes
    rows = int(rng.integers(1, max_rows + 1))
    n = 2 * int(rng.choice([1, lanes, lanes + 1, int(rng.integers(1, max_n // 2 + 1))]))
    x = random_operand(rng, rows, n)
    if rng.random() < 0.6:
        positions = rng.integers(0, 1 << 17, rows)
        cos, sin = vpu.rope_tables(positions, n, theta=float(rng.choice([1e4, 5e5, 1e6])))
        cos, sin = cos.view(np.uint32), sin.view(np.uint32)
    else:
        cos, sin = random_operand(rng, rows, n), random_operand(rng, rows, n)
    return VpuJob(Op.ROPE, x, cos, sin)


def random_topk_job(rng, lanes, max_k, *, max_rows=3, max_n=None):
    """A random topk command: ``k`` from 1 to ``max_k``, rows with many ties (few distinct values), NaN,
    infinities and signed zeros, or uniform patterns."""
    max_n = max_n or 6 * lanes
    rows = int(rng.integers(1, max_rows + 1))
    n = int(rng.choice([1, lanes, lanes + 1, int(rng.integers(1, max_n + 1))]))
    if rng.random() < 0.5:                               # ties: a few distinct values, specials among them
        pool = np.concatenate([SPECIALS, random_operand(rng, 1, 4)[0]])
        x = rng.choice(pool[: int(rng.integers(2, len(pool) + 1))], (rows, n))
    else:
        x = random_operand(rng, rows, n)
    k = int(rng.integers(1, min(n, max_k) + 1))
    return VpuJob(Op.TOPK, x.astype(np.uint32), scalar0=k)
