"""One lane of the vector unit: every element-wise operation on one binary32 element per cycle."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.vpu.divider import OPERAND_BITS
from rtl.vpu.fp32_compare import Fp32MinMax
from rtl.vpu.fp32_fma import Fp32Fma
from rtl.vpu.function_unit import EXPONENT, FUNCTIONS, FunctionUnit
from rtl.vpu.layouts import ELEMENTWISE, Op
from rtl.vpu.rms_output import RmsOutput
from rtl.vpu.rms_scale import SCALE_EXPONENT
from rtl.vpu.round_pack import QNAN, delay_line

__all__ = ["Lane", "LANE_OPS", "GRID_BITS"]

LANE_OPS = ELEMENTWISE + (Op.RMSNORM, Op.SOFTMAX, Op.ROPE)
"""What a lane computes: the element-wise operations and the per-element work of the composites."""
GRID_BITS = 62
"""Width of a softmax term on the 2**-60 grid, ``floor(E * 2**60) <= 2**60`` (with room)."""

_ONE = 0x3F80_0000
_NEG_ZERO = 0x8000_0000
_FMA_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.FMA, Op.SCALE)


class Lane(wiring.Component):
    """Element-wise operations of the vector unit on one lane, bit-exact to ``sim_models.vpu``.

    Three units and two small paths, all pipelined, with one result register after a multiplexer:

    * :class:`~rtl.vpu.fp32_fma.Fp32Fma` computes ``fma`` and, with a neutral operand, ``add``
      (``a * 1 + b``), ``sub`` (``a * 1 + (-b)``), ``mul`` and ``scale`` (``a * b + (-0)``): each is
      the exact value rounded once, which is the IEEE result of the operation itself;
    * :class:`~rtl.vpu.function_unit.FunctionUnit` computes ``exp``, ``reciprocal``, ``rsqrt``,
      ``sigmoid`` and ``silu``; ``swiglu`` chains ``silu(a)`` into the FMA as ``silu(a) * b + (-0)``
      (``b`` delayed to meet it);
    * two :class:`~rtl.vpu.fp32_compare.Fp32MinMax` give ``max``, ``min`` and ``clamp`` (``max`` with
      ``scalar0``, then ``min`` with ``scalar1``);
    * ``to_bf16`` (round to nearest even on the bit pattern, NaN to ``0x7FC0``, result in bits 15..0)
      and ``from_bf16`` (``a[15:0] << 16``, NaN to the canonical NaN) take one cycle;
    * ``rmsnorm``: :class:`~rtl.vpu.rms_output.RmsOutput` of ``a`` (``x``) and ``b`` (the gain) with the
      row's scale ``r_sig * 2**r_lsb``;
    * ``softmax``: ``d = fl(a - max)`` on the FMA (``a * 1 + neg_max``), chained into the function
      unit's softmax quotient by ``divisor * 2**divisor_exp``; ``grid`` shows ``floor(exp(d) * 2**60)``
      (the term of the row's exact sum) :attr:`grid_latency` cycles after ``a``;
    * ``rope``: the products ``fl(a * gain)`` on the ``RmsOutput`` with ``r = 1``: with ``rope_sin``
      set, ``gain = c`` (sin) and ``a`` negated when ``negate`` is set, shown on ``product``
      :attr:`product_latency` cycles later (``q``, stored by the caller); otherwise ``gain = b`` (cos),
      and the product ``p`` goes on to the FMA as ``p * 1 + rope_q``, ``rope_q`` being the ``q`` of the
      same element, presented when ``p`` reaches the FMA.

    There is no valid signal: the caller issues operands every cycle it likes and knows that the
    result of ``op`` appears :meth:`latency_of` cycles later. ``op``, ``scalar0`` and ``scalar1``
    must stay constant while operations of one command are in the lane (the caller changes them only
    when the lane is empty): each path has its own latency and the output multiplexer follows ``op``.

    Parameters
    ----------
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the products (FMA and exponential core): ``MULT18X18D`` or LUTs.

    Interface attributes
    --------------------
    op : ``In(Op)``
        One of :data:`rtl.vpu.layouts.ELEMENTWISE`.
    a, b, c : ``In(32)``
        Operands (binary32 patterns; ``a[15:0]`` a bfloat16 pattern for ``from_bf16``).
    scalar0, scalar1 : ``In(32)``
        The command's scalars: the factor of ``scale``, the bounds of ``clamp``.
    r_sig : ``In(24)``, r_lsb : ``In(SCALE_EXPONENT)``
        RMSNorm's row scale, read with ``a``.
    neg_max : ``In(32)``
        Softmax: minus the row's maximum, read with ``a``.
    divisor : ``In(34)``, divisor_exp : ``In(EXPONENT)``
        Softmax: the row's sum, read when the element reaches the divider (held for the whole pass).
    rope_sin, negate : ``In(1)``
        RoPE: the pass of ``q = fl(rot(x) * sin)``; the element is in the row's first half.
    rope_q : ``In(32)``
        RoPE: the element's ``q``, :attr:`product_latency` cycles after ``a``.
    result : ``Out(32)``
        The result of the operands issued :meth:`latency_of` ``(op)`` cycles earlier.
    grid : ``Out(GRID_BITS)``
        Softmax's term of the ``a`` issued :attr:`grid_latency` cycles earlier.
    product : ``Out(32)``
        RoPE: the product of the ``a`` issued :attr:`product_latency` cycles earlier.
    """

    def __init__(self, *, multiplier="dsp"):
        self._fma = Fp32Fma(multiplier=multiplier)
        self._functions = FunctionUnit(multiplier=multiplier)
        self._minmax = Fp32MinMax()
        self._clamp_hi = Fp32MinMax()
        self._rms = RmsOutput(multiplier=multiplier)
        super().__init__({
            "op": In(Op),
            "a": In(32),
            "b": In(32),
            "c": In(32),
            "scalar0": In(32),
            "scalar1": In(32),
            "r_sig": In(24),
            "r_lsb": In(SCALE_EXPONENT),
            "neg_max": In(32),
            "divisor": In(OPERAND_BITS),
            "divisor_exp": In(EXPONENT),
            "rope_sin": In(1),
            "negate": In(1),
            "rope_q": In(32),
            "result": Out(32),
            "grid": Out(GRID_BITS),
            "product": Out(32),
        })

    @property
    def product_latency(self):
        """Cycles from ``a`` to ``product`` (rope), and to the use of ``rope_q``."""
        return self._rms.latency

    @property
    def grid_latency(self):
        """Cycles from ``a`` to ``grid`` (softmax)."""
        return self._fma.latency + self._functions.core_latency + 1

    def latency_of(self, op):
        """Cycles from operands to ``result`` for ``op`` (an :class:`Op` of :data:`LANE_OPS`)."""
        op = Op(op)
        if op in _FMA_OPS:
            path = self._fma.latency
        elif op in FUNCTIONS:
            path = self._functions.latency
        elif op == Op.SWIGLU:
            path = self._functions.latency + self._fma.latency
        elif op in (Op.MAX, Op.MIN):
            path = self._minmax.latency
        elif op == Op.CLAMP:
            path = self._minmax.latency + self._clamp_hi.latency
        elif op in (Op.TO_BF16, Op.FROM_BF16):
            path = 1
        elif op == Op.RMSNORM:
            path = self._rms.latency
        elif op == Op.SOFTMAX:
            path = self._fma.latency + self._functions.latency
        elif op == Op.ROPE:
            path = self._rms.latency + self._fma.latency
        else:
            raise ValueError(f"{op} is not an element-wise operation")
        return path + 1

    @property
    def max_latency(self):
        return max(self.latency_of(op) for op in LANE_OPS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fma = fma = self._fma
        m.submodules.functions = functions = self._functions
        m.submodules.minmax = minmax = self._minmax
        m.submodules.clamp_hi = clamp_hi = self._clamp_hi
        m.submodules.rms = rms = self._rms
        op, a, b, c = self.op, self.a, self.b, self.c

        # Function unit: swiglu runs silu; softmax takes fl(a - max) from the FMA.
        m.d.comb += [
            functions.op.eq(Mux(op == Op.SWIGLU, Op.SILU, op)),
            functions.x.eq(Mux(op == Op.SOFTMAX, fma.result, a)),
            functions.divisor.eq(self.divisor), functions.divisor_exp.eq(self.divisor_exp),
        ]
        # Softmax's term on the 2**-60 grid: m * 2**(n + 28), truncated (m << 28 >> -n, n <= 0).
        shift = Signal(7)
        m.d.comb += shift.eq(Mux(functions.core_n >= 0, 0,
                                 Mux(functions.core_n < -(GRID_BITS - 1), GRID_BITS, -functions.core_n)))
        with m.If(functions.core_zero):
            m.d.sync += self.grid.eq(0)
        with m.Else():
            m.d.sync += self.grid.eq(Cat(Const(0, 28), functions.core_m)[:GRID_BITS] >> shift)

        # RMSNorm's output; rope's products (the caller sets r = 1).
        m.d.comb += [rms.x.eq(a ^ (self.negate << 31)), rms.gain.eq(Mux(self.rope_sin, c, b)),
                     rms.r_sig.eq(self.r_sig), rms.r_lsb.eq(self.r_lsb), self.product.eq(rms.result)]

        # FMA operands.
        b_late = delay_line(m, b, functions.latency, "swiglu_up")
        with m.Switch(op):
            with m.Case(Op.ADD, Op.SUB):
                m.d.comb += [fma.a.eq(a), fma.b.eq(_ONE), fma.c.eq(b ^ ((op == Op.SUB) << 31))]
            with m.Case(Op.MUL):
                m.d.comb += [fma.a.eq(a), fma.b.eq(b), fma.c.eq(_NEG_ZERO)]
            with m.Case(Op.SCALE):
                m.d.comb += [fma.a.eq(a), fma.b.eq(self.scalar0), fma.c.eq(_NEG_ZERO)]
            with m.Case(Op.SWIGLU):
                m.d.comb += [fma.a.eq(functions.result), fma.b.eq(b_late), fma.c.eq(_NEG_ZERO)]
            with m.Case(Op.SOFTMAX):
                m.d.comb += [fma.a.eq(a), fma.b.eq(_ONE), fma.c.eq(self.neg_max)]
            with m.Case(Op.ROPE):
                m.d.comb += [fma.a.eq(rms.result), fma.b.eq(_ONE), fma.c.eq(self.rope_q)]
            with m.Default():
                m.d.comb += [fma.a.eq(a), fma.b.eq(b), fma.c.eq(c)]

        # max / min / clamp.
        m.d.comb += [
            minmax.a.eq(a),
            minmax.b.eq(Mux(op == Op.CLAMP, self.scalar0, b)),
            minmax.op.eq(op == Op.MIN),
            clamp_hi.a.eq(minmax.result),
            clamp_hi.b.eq(self.scalar1),
            clamp_hi.op.eq(1),
        ]

        # bfloat16 conversions, one register.
        a_nan = (a[23:31] == 0xFF) & (a[:23] != 0)
        to_bf16 = Signal(16)
        m.d.comb += to_bf16.eq((a + 0x7FFF + a[16])[16:32])
        bf16 = Signal(32)
        from_nan = (a[7:15] == 0xFF) & (a[:7] != 0)
        with m.If(op == Op.TO_BF16):
            m.d.sync += bf16.eq(Mux(a_nan, 0x7FC0, to_bf16))
        with m.Else():
            m.d.sync += bf16.eq(Mux(from_nan, QNAN, a[:16] << 16))

        # Output multiplexer.
        with m.Switch(op):
            with m.Case(*_FMA_OPS, Op.SWIGLU, Op.ROPE):
                m.d.sync += self.result.eq(fma.result)
            with m.Case(*FUNCTIONS, Op.SOFTMAX):
                m.d.sync += self.result.eq(functions.result)
            with m.Case(Op.RMSNORM):
                m.d.sync += self.result.eq(rms.result)
            with m.Case(Op.MAX, Op.MIN):
                m.d.sync += self.result.eq(minmax.result)
            with m.Case(Op.CLAMP):
                m.d.sync += self.result.eq(clamp_hi.result)
            with m.Case(Op.TO_BF16, Op.FROM_BF16):
                m.d.sync += self.result.eq(bf16)
            with m.Default():
                m.d.sync += self.result.eq(Const(QNAN, 32))
        return m
