"""The vector unit's transcendental functions on one shared divider: exp, reciprocal, rsqrt, sigmoid, silu."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.divider import OPERAND_BITS, QUOTIENT_BITS, Divider
from rtl.vpu.exp_core import ExpCore
from rtl.vpu.isqrt import IntegerSqrt
from rtl.vpu.layouts import Op
from rtl.vpu.round_pack import QNAN, RoundPack

__all__ = ["FunctionUnit", "FUNCTIONS", "EXPONENT"]

FUNCTIONS = (Op.EXP, Op.RECIPROCAL, Op.RSQRT, Op.SIGMOID, Op.SILU)
"""The element-wise functions this unit computes (and softmax's quotient, ``Op.SOFTMAX``); any other
``op`` gives a meaningless result."""

_ONE = 0x3F80_0000
_EXP_LIMIT_BIASED = 134        # |x| >= 128: exp, sigmoid and silu saturate
_EXPONENT = signed(12)         # every exponent on the way; covers -362..+184 with room
EXPONENT = _EXPONENT
"""Shape of the unit's exponents (``divisor_exp``)."""

# What travels beside the operands from the decode stage to the divider's inputs.
_Decoded = data.StructLayout({
    "op": Op,
    "sign": 1,
    "sig": 24,                 # significand normalized to bit 23 (meaningless for zero)
    "lsb": _EXPONENT,          # its weight
    "half": _EXPONENT,         # rsqrt: h, the exponent of the square root's lsb
    "override": 1,             # the result is ``value`` (a special case decided at decode)
    "value": 32,
})

# What travels through the divider to the final rounding.
_Quotient = data.StructLayout({
    "exp": 1,                  # exp: round (magnitude, exponent) below, not the quotient
    "sign": 1,
    "magnitude": OPERAND_BITS,
    "exponent": _EXPONENT,
    "override": 1,
    "value": 32,
})


def _delay(m, en, value, cycles, name):
    """``value`` delayed by ``cycles`` enabled clock cycles (registers without reset)."""
    for index in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{index}", reset_less=True)
        with m.If(en):
            m.d.sync += reg.eq(value)
        value = reg
    return value


def _register(m, en, values, name):
    """Each of ``values`` (a dict of name -> Value) through one register enabled by ``en``."""
    out = {}
    for key, value in values.items():
        reg = Signal.like(value, name=f"{name}_{key}", reset_less=True)
        with m.If(en):
            m.d.sync += reg.eq(value)
        out[key] = reg
    return out


def _normalize34(m, value, name):
    """``(value << shift, shift)`` with ``shift`` placing the top set bit of ``value`` at bit 33.

    ``value`` (at most 34 bits wide) must be non-zero for a meaningful result."""
    width = len(value)
    zeros = leading_zeros(m, value, f"{name}_lz")
    shift = Signal(range(OPERAND_BITS + 1), name=f"{name}_shift")
    m.d.comb += shift.eq(zeros + (OPERAND_BITS - width))
    out = Signal(OPERAND_BITS, name=f"{name}_norm")
    m.d.comb += out.eq(value << shift)
    return out, shift


class FunctionUnit(wiring.Component):
    """``exp``, ``reciprocal``, ``rsqrt``, ``sigmoid`` and ``silu`` of binary32, bit-exact to the model.

    The three integer units of the contract (``docs/vpu_numerics.md``) feed one divider and one
    final rounding, shared by all five functions:

    * decode, over two cycles: specials (NaN, ±Inf, ±0, ``|x| >= 128``) decide an override value and
      the significand's leading zeros are counted; then it is normalized (subnormals by that count)
      and rsqrt's radicand ``sig << (36 + p)`` and ``h`` are formed; sigmoid and silu feed ``-x`` to
      the exponential core;
    * :class:`~rtl.vpu.exp_core.ExpCore` and :class:`~rtl.vpu.isqrt.IntegerSqrt` in parallel (the
      shorter one's outputs delayed to match the longer);
    * the divider's operands, over three cycles (the sums; the leading-zero counts and shifts; the
      choice and the exponents): ``1 / sig`` (reciprocal), ``1 / isqrt`` (rsqrt), ``1 / (1 + e**-x)``
      (sigmoid), ``x / (1 + e**-x)`` (silu), each normalized to 34 bits (``1 + e**-x`` formed as the
      model's ``_one_plus_exp_neg``); exp passes ``(m, n - 32)`` around the divider;
    * :class:`~rtl.vpu.divider.Divider`, then :class:`~rtl.vpu.round_pack.RoundPack` of
      ``2 * quotient + sticky`` (or of exp's ``m``), then the override.

    ``Op.SOFTMAX`` computes softmax's output ``divide_core(m, n - 32, divisor, divisor_exp)`` for
    ``x = fl(x_i - max) <= 0`` (``exp_core(x) = (m, n)``; ``+0`` for ``x <= -128`` and ``-Inf``), and
    shows the exponential core's ``(m, n)`` and that zero verdict on ``core_m``, ``core_n`` and
    ``core_zero`` :attr:`core_latency` cycles after ``x``: the terms of softmax's exact sum.

    Parameters
    ----------
    multiplier : ``"dsp"`` or ``"lut"``
        Implementation of the exponential core's products (10 ``MULT18X18D`` or none).

    Interface attributes
    --------------------
    op : ``In(Op)``
        One of :data:`FUNCTIONS` or ``Op.SOFTMAX``, sampled with ``x``.
    x : ``In(32)``
        Binary32 operand.
    divisor : ``In(34)``, divisor_exp : ``In(EXPONENT)``
        Softmax's denominator ``divisor * 2**divisor_exp`` (``divisor`` normalized: bit 33 set), read
        :attr:`divisor_latency` cycles after ``x``.
    core_m : ``Out(34)``, core_n : ``Out(signed(9))``, core_zero : ``Out(1)``
        ``exp_core(x)`` and whether the softmax term is zero, :attr:`core_latency` cycles after ``x``.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 result, :attr:`latency` enabled cycles after ``x``.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles for every function, one result per cycle; no valid signal and no stall
    logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    def __init__(self, *, multiplier="dsp"):
        self._multiplier = multiplier
        self._exp_core = ExpCore(tag_width=0, multiplier=multiplier)
        self._sqrt = IntegerSqrt()
        self._divider = Divider(tag_width=_Quotient.size)
        self._round = RoundPack(OPERAND_BITS, _EXPONENT.width)
        super().__init__({
            "op": In(Op),
            "x": In(32),
            "divisor": In(OPERAND_BITS),
            "divisor_exp": In(_EXPONENT),
            "en": In(1, init=1),
            "result": Out(32),
            "core_m": Out(OPERAND_BITS),
            "core_n": Out(signed(9)),
            "core_zero": Out(1),
        })

    @property
    def middle_latency(self):
        """Cycles of the parallel exponential core and square root."""
        return max(self._exp_core.latency, self._sqrt.latency)

    DECODE_STAGES = 2
    """Cycles of the decode: the specials and the leading-zero count; the normalization."""

    OPERAND_STAGES = 3
    """Cycles of the divider's operands: the sums, the normalizations, the choice and exponents."""

    @property
    def core_latency(self):
        """Cycles from ``x`` to ``core_m``, ``core_n`` and ``core_zero``."""
        return self.DECODE_STAGES + self.middle_latency

    @property
    def divisor_latency(self):
        """Cycles from ``x`` to the use of ``divisor`` and ``divisor_exp`` (softmax)."""
        return self.core_latency + self.OPERAND_STAGES - 1

    @property
    def latency(self):
        """Cycles from ``x`` to ``result``: decode, core, operands, divider, rounding, override."""
        return (self.DECODE_STAGES + self.middle_latency + self.OPERAND_STAGES + self._divider.latency
                + self._round.latency + 1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.exp_core = exp_core = self._exp_core
        m.submodules.sqrt = sqrt = self._sqrt
        m.submodules.divider = divider = self._divider
        m.submodules.round = rnd = self._round
        en = self.en
        for unit in (exp_core, sqrt, divider, rnd):
            m.d.comb += unit.en.eq(en)

        # ---- decode, 1: the specials, the override and the leading-zero count ----------------------
        x = self.x
        sign, biased, frac = x[31], x[23:31], x[:23]
        nan = (biased == 0xFF) & (frac != 0)
        inf = (biased == 0xFF) & (frac == 0)
        zero = x[:31] == 0
        sig24 = Cat(frac, biased != 0)
        zeros = leading_zeros(m, sig24, "sig_lz")
        big = ~nan & (biased >= _EXP_LIMIT_BIASED)
        high, low = big & ~sign, big & sign
        core_x = Signal(32)                      # exp_core input: x, or -x for the sigmoids
        negate = (self.op == Op.SIGMOID) | (self.op == Op.SILU)
        m.d.comb += core_x.eq(Mux(nan | big, 0, x ^ (negate << 31)))

        override = Signal()
        value = Signal(32)
        neg_zero = Const(0x8000_0000, 32)
        with m.Switch(self.op):
            with m.Case(Op.EXP):
                m.d.comb += [override.eq(nan | big), value.eq(Mux(nan, QNAN, Mux(high, 0x7F80_0000, 0)))]
            with m.Case(Op.RECIPROCAL):
                m.d.comb += [override.eq(nan | inf | zero),
                             value.eq(Mux(nan, QNAN, Cat(Const(0, 31), sign) | Mux(zero, 0x7F80_0000, 0)))]
            with m.Case(Op.RSQRT):
                m.d.comb += [override.eq(nan | inf | zero | sign),
                             value.eq(Mux(zero, Cat(Const(0x7F80_0000, 31), sign),
                                          Mux(nan | sign, QNAN, 0)))]
            with m.Case(Op.SIGMOID):
                m.d.comb += [override.eq(nan | big), value.eq(Mux(nan, QNAN, Mux(high, _ONE, 0)))]
            with m.Case(Op.SILU):
                m.d.comb += [override.eq(nan | big | zero),
                             value.eq(Mux(nan, QNAN, Mux(low, neg_zero, x)))]
            with m.Case(Op.SOFTMAX):             # x = fl(x_i - max) <= 0: -Inf and x <= -128 give +0
                m.d.comb += [override.eq(nan | big), value.eq(Mux(nan, QNAN, 0))]
            with m.Default():
                m.d.comb += [override.eq(1), value.eq(QNAN)]
        first = _register(m, en, {"op": self.op, "sign": sign, "sig24": sig24, "zeros": zeros,
                                  "subnormal": biased == 0, "biased": biased, "override": override,
                                  "value": value, "core_x": core_x}, "decode")

        # ---- decode, 2: the normalized significand, its weight and rsqrt's radicand ---------------
        nsig = Signal(24)
        nlsb = Signal(_EXPONENT)
        m.d.comb += [
            nsig.eq(first["sig24"] << first["zeros"]),
            nlsb.eq(Mux(first["subnormal"], -149, first["biased"] - 150) - first["zeros"]),
        ]
        parity = nlsb[0]
        radicand = Signal(61)
        m.d.comb += radicand.eq(Mux(parity, nsig << 37, nsig << 36))
        decoded = Signal(_Decoded)
        m.d.comb += [
            decoded.op.eq(first["op"]), decoded.sign.eq(first["sign"]), decoded.sig.eq(nsig),
            decoded.lsb.eq(nlsb), decoded.half.eq((nlsb - 36 - parity) >> 1),
            decoded.override.eq(first["override"]), decoded.value.eq(first["value"]),
        ]
        d_reg = Signal(_Decoded)
        core_x_reg = Signal(32)
        radicand_reg = Signal(61)
        with m.If(en):
            m.d.sync += [d_reg.eq(decoded), core_x_reg.eq(first["core_x"]), radicand_reg.eq(radicand)]

        # ---- exponential core and square root in parallel ----------------------------------------
        middle = self.middle_latency
        m.d.comb += [exp_core.x.eq(core_x_reg), sqrt.radicand.eq(radicand_reg)]
        em = _delay(m, en, exp_core.m, middle - exp_core.latency, "exp_m")
        exp_n = _delay(m, en, exp_core.n, middle - exp_core.latency, "exp_n")
        root = _delay(m, en, sqrt.root, middle - sqrt.latency, "root")
        d = _delay(m, en, d_reg, middle, "decoded")
        m.d.comb += [self.core_m.eq(em), self.core_n.eq(exp_n), self.core_zero.eq(d.override)]

        # ---- the divider's operands: 1. the sums ---------------------------------------------------
        # 1 + e**-x (sim_models.vpu._one_plus_exp_neg): n >= 0 adds 2**(32 - n) (dropped above 32);
        # n < 0 is 2**40 + e in units of 2**-40 (41 bits), then truncated to 34 bits.
        n0 = Signal(signed(9))
        m.d.comb += n0.eq(exp_n)
        one_up = Signal(OPERAND_BITS)
        m.d.comb += one_up.eq(Mux(n0 <= 32, Const(1, OPERAND_BITS) << (32 - n0)[:6], 0))
        big_d0 = Signal(OPERAND_BITS)            # n >= 0: m + 2**(32 - n), 33 or 34 bits
        m.d.comb += big_d0.eq(em + one_up)
        e40 = Signal(41)
        shift_left = n0 + 8                      # n + 8 >= 0: m << (n + 8), else m >> -(n + 8)
        m.d.comb += e40.eq(Mux(shift_left >= 0, em << shift_left[:4], em >> (-shift_left)[:8]))
        small_d0 = Signal(41)
        m.d.comb += small_d0.eq((1 << 40) + e40)
        sums = _register(m, en, {"em": em, "n": n0, "root": root, "d": d.as_value(), "big_d": big_d0,
                                 "small_d": small_d0}, "sums")

        # ---- 2. the normalizations ------------------------------------------------------------------
        one_plus_norm0, one_plus_shift0 = _normalize34(m, sums["big_d"], "one_plus")
        root_norm0, root_shift0 = _normalize34(m, sums["root"], "root")
        normal = _register(m, en, {"em": sums["em"], "n": sums["n"], "d": sums["d"],
                                   "small_d": sums["small_d"], "one_plus_norm": one_plus_norm0,
                                   "one_plus_shift": one_plus_shift0, "root_norm": root_norm0,
                                   "root_shift": root_shift0}, "normal")

        # ---- 3. the choice and the exponents, into the divider ---------------------------------------
        em, n, small_d = normal["em"], normal["n"], normal["small_d"]
        d = data.View(_Decoded, normal["d"])
        one_plus_norm, one_plus_shift = normal["one_plus_norm"], normal["one_plus_shift"]
        root_norm, root_shift = normal["root_norm"], normal["root_shift"]

        num = Signal(OPERAND_BITS)
        den = Signal(OPERAND_BITS)
        e_num = Signal(_EXPONENT)
        e_den = Signal(_EXPONENT)
        x_num = Cat(Const(0, OPERAND_BITS - 24), d.sig)           # the significand as a 34-bit operand
        x_num_exp = d.lsb - (OPERAND_BITS - 24)
        unit = Const(1 << (OPERAND_BITS - 1), OPERAND_BITS)        # 1 = 2**33 * 2**-33
        m.d.comb += [num.eq(unit), e_num.eq(-(OPERAND_BITS - 1))]
        with m.Switch(d.op):
            with m.Case(Op.RECIPROCAL):
                m.d.comb += [den.eq(x_num), e_den.eq(x_num_exp)]
            with m.Case(Op.RSQRT):
                m.d.comb += [den.eq(root_norm), e_den.eq(d.half - root_shift)]
            with m.Case(Op.SIGMOID, Op.SILU):
                with m.If(n >= 0):
                    m.d.comb += [den.eq(one_plus_norm), e_den.eq(n - 32 - one_plus_shift)]
                with m.Else():
                    m.d.comb += [den.eq(small_d[41 - OPERAND_BITS:]), e_den.eq(-40 + (41 - OPERAND_BITS))]
                with m.If(d.op == Op.SILU):
                    m.d.comb += [num.eq(x_num), e_num.eq(x_num_exp)]
            with m.Case(Op.SOFTMAX):             # m * 2**(n - 32) / divisor, m normalized to 34 bits
                m.d.comb += [num.eq(Mux(em[OPERAND_BITS - 1], em, em << 1)),
                             e_num.eq(n - 32 - ~em[OPERAND_BITS - 1]),
                             den.eq(self.divisor), e_den.eq(self.divisor_exp)]
            with m.Default():                    # exp: the quotient is not used
                m.d.comb += [num.eq(unit), e_num.eq(0), den.eq(unit), e_den.eq(0)]
        quotient_tag = Signal(_Quotient)
        m.d.comb += [
            quotient_tag.exp.eq(d.op == Op.EXP),
            quotient_tag.sign.eq(((d.op == Op.SILU) | (d.op == Op.RECIPROCAL)) & d.sign),
            quotient_tag.magnitude.eq(em),
            quotient_tag.exponent.eq(Mux(d.op == Op.EXP, n - 32, e_num - e_den - QUOTIENT_BITS)),
            quotient_tag.override.eq(d.override),
            quotient_tag.value.eq(d.value),
        ]
        with m.If(en):
            m.d.sync += [divider.num.eq(num), divider.den.eq(den), divider.tag.eq(quotient_tag)]

        # ---- rounding and override -----------------------------------------------------------------
        q = Signal(_Quotient)
        m.d.comb += q.eq(divider.tag_out)
        m.d.comb += [
            rnd.sign.eq(q.sign),
            rnd.magnitude.eq(Mux(q.exp, q.magnitude, Cat(divider.sticky, divider.quotient))),
            rnd.exponent.eq(q.exponent),
        ]
        late = _delay(m, en, Cat(q.override, q.value), rnd.latency, "override")
        with m.If(en):
            m.d.sync += self.result.eq(Mux(late[0], late[1:], rnd.result))
        return m
