"""Layouts of the vector unit: the one definition of its operations, commands and beats.

``lib.data.StructLayout`` puts its first field in the least significant bits and ``ArrayLayout`` puts
element 0 there; testbenches, the command line and the golden-model adapters pack these layouts with
:mod:`verification.packing`, never by hand.
"""

from amaranth.lib import data, enum

__all__ = ["FP32", "MAX_LENGTH", "Op", "ELEMENTWISE", "REDUCTIONS", "COMPOSITES", "OPERANDS", "PASSES",
           "VpuCommand", "vector_beat", "result_beat"]

FP32 = 32
"""Width of one IEEE 754 binary32 bit pattern."""

MAX_LENGTH = 8192
"""Longest row a command may name (``sim_models.vpu.MAX_LENGTH``)."""


class Op(enum.Enum, shape=5):
    """Operations of the vector unit; each is the ``sim_models.vpu`` function of the same name."""
    ADD = 0
    SUB = 1
    MUL = 2
    FMA = 3
    MAX = 4
    MIN = 5
    SCALE = 6
    CLAMP = 7
    EXP = 8
    RECIPROCAL = 9
    RSQRT = 10
    SIGMOID = 11
    SILU = 12
    SWIGLU = 13
    TO_BF16 = 14
    FROM_BF16 = 15
    SUM = 16
    SUM_SQUARES = 17
    MAX_REDUCE = 18
    RMSNORM = 19
    SOFTMAX = 20
    ROPE = 21
    TOPK = 22


ELEMENTWISE = (Op.ADD, Op.SUB, Op.MUL, Op.FMA, Op.MAX, Op.MIN, Op.SCALE, Op.CLAMP, Op.EXP,
               Op.RECIPROCAL, Op.RSQRT, Op.SIGMOID, Op.SILU, Op.SWIGLU, Op.TO_BF16, Op.FROM_BF16)
"""One result per element, one beat out per beat in."""
REDUCTIONS = (Op.SUM, Op.SUM_SQUARES, Op.MAX_REDUCE)
"""One result per row (in lane 0 of a single beat)."""
COMPOSITES = (Op.RMSNORM, Op.SOFTMAX, Op.ROPE, Op.TOPK)
"""Operations of several steps over a whole row."""

PASSES = {Op.RMSNORM: 2, Op.SOFTMAX: 3, Op.ROPE: 2}
"""Times each row of these composites arrives on operand stream ``a``, back to back (the unit keeps
no copy of a row): rmsnorm's sum of squares, then its output; softmax's maximum, its sum, then its
output; rope's ``x`` rotated by half its length (``x[n/2:]``, then ``x[:n/2]``), then ``x``. The other
operands arrive once per row, with the pass that reads them: rmsnorm's gain (``b``) and rope's
``cos`` (``b``) with the last pass, rope's ``sin`` (``c``) with the first."""

OPERANDS = {
    Op.ADD: "ab", Op.SUB: "ab", Op.MUL: "ab", Op.FMA: "abc", Op.MAX: "ab", Op.MIN: "ab",
    Op.SCALE: "a", Op.CLAMP: "a", Op.EXP: "a", Op.RECIPROCAL: "a", Op.RSQRT: "a", Op.SIGMOID: "a",
    Op.SILU: "a", Op.SWIGLU: "ab", Op.TO_BF16: "a", Op.FROM_BF16: "a",
    Op.SUM: "a", Op.SUM_SQUARES: "a", Op.MAX_REDUCE: "a",
    Op.RMSNORM: "ab", Op.SOFTMAX: "a", Op.ROPE: "abc", Op.TOPK: "a",
}
"""Operand streams each operation consumes, one beat per ``lanes`` elements of every row: ``a`` is
the input (``gate`` of swiglu, ``x`` of rope), ``b`` the second operand (``up`` of swiglu, the gain of
rmsnorm, ``cos`` of rope), ``c`` the third (the addend of fma, ``sin`` of rope)."""


VpuCommand = data.StructLayout({
    "op": Op,
    "length": 14,
    "rows": 12,
    "scalar0": FP32,
    "scalar1": FP32,
})
"""One command: ``rows`` rows (1..4095; 0 acts as 1) of ``length`` elements each (1..8192; 0 and
lengths above :data:`MAX_LENGTH` are errors). ``scalar0`` is the factor of scale, ``lo`` of clamp,
``eps`` of rmsnorm and ``k`` (an integer) of topk; ``scalar1`` is ``hi`` of clamp."""


def vector_beat(lanes):
    """One operand beat: ``lanes`` binary32 patterns, element ``j`` of the beat in bits ``32j..32j+31``."""
    return data.ArrayLayout(FP32, lanes)


def result_beat(lanes):
    """One result beat: the data, the command's last-beat flag, and an error flag.

    ``error`` is set on the single beat that answers a rejected command (its data are zero)."""
    return data.StructLayout({"data": vector_beat(lanes), "last": 1, "error": 1})
