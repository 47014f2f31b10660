"""Bounded equivalence of :class:`rtl.mx.fp32_accumulate.Fp32Accumulate` with an independent reference.

The reference forms the exact sum as one wide fixed-point integer (no operand swap, no alignment
by exponent difference) and rounds it to nearest-even by a direct leading-one search: the textbook
definition, a different algorithm from the adder's datapath.

Each proof fixes the accumulator's exponent field and the block exponent (constants fold the
alignment shifts away, which keeps the solver's work small) and lets the solver choose everything
else: both signs, the 23 fraction bits and the dot product (``|dot| <= 4608``). The pairs cover a
zero or subnormal accumulator, the smallest normal binades, and terms on the finest grid and two
binades up, so the checks cross rounding ties, carries into the next binade, the
subnormal/normal boundary, underflow to zero and exact cancellation. Wider exponents and every
exponent difference are checked by simulation (``tests/rtl/mx/test_fp32_accumulate.py``).

The inputs are held constant (``AnyConst``) and the adder has one pipeline register, so the solver
checks the datapath once, after the pipeline has filled, rather than one copy per cycle: the same
combinational function whatever the register placement. The placements of deeper pipelines are
checked by simulation as well.

The equivalence proofs tie ``bypass`` and ``term.nan`` low. Separate proofs (one pipeline
register, and a register after every step) leave every input free every cycle (any accumulator,
any bits in the term's fields, ``nan`` and ``bypass``, as an idle operand bus of ``MacPe`` presents
them) and check the two flags, each against the inputs of its own operation through the pipeline:
a bypassed operation returns its accumulator unchanged (a NaN as the canonical NaN) whatever the
term holds, a NaN term included; otherwise a NaN term gives the canonical NaN.
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, Signal, signed

from rtl.mx.fp32_accumulate import Fp32Accumulate, leading_zeros

from .proof import Proof, free, reset_at_start

_LSB = -151                 # weight of bit 0 of the fixed-point sum
_ACC_EXP_MAX = 2            # accumulator exponent field 0..2: value below 2**-124
_EXP_MAX = -147             # block exponent -149..-147: term below 2**-136
_WIDTH = 28
_STAGES = 1
_QNAN = 0x7FC0_0000


def _reference(m, acc, dot, exp):
    """binary32 bits of ``acc + dot * 2**(exp - 2)`` for inputs inside the window."""
    a_exp, a_frac = acc[23:31], acc[0:23]
    a_sig = Cat(a_frac, a_exp != 0)
    a_shift = Signal(range(64))                                  # lsb of acc above bit 0: 2..41
    m.d.comb += a_shift.eq(Mux(a_exp == 0, 1, a_exp) - 150 - _LSB)
    a_int = Signal(signed(_WIDTH + 2))
    m.d.comb += a_int.eq(Mux(acc[31], -(a_sig << a_shift), a_sig << a_shift))
    t_int = Signal(signed(_WIDTH + 2))
    t_shift = Signal(range(64))                                  # exp - 2 >= -151
    m.d.comb += t_shift.eq(exp - 2 - _LSB)
    m.d.comb += t_int.eq(dot << t_shift)
    total = Signal(signed(_WIDTH + 2))
    m.d.comb += total.eq(a_int + t_int)
    magnitude = Signal(_WIDTH)
    m.d.comb += magnitude.eq(Mux(total < 0, -total, total))
    bits = Signal(range(_WIDTH + 1))
    m.d.comb += bits.eq(_WIDTH - leading_zeros(m, magnitude, "ref_lz"))
    drop = Signal(range(_WIDTH + 1))                             # result lsb - _LSB
    m.d.comb += drop.eq(Mux(bits > 26, bits - 24, 2))
    kept = Signal(_WIDTH)
    m.d.comb += kept.eq(magnitude >> drop)
    remainder = Signal(_WIDTH)
    m.d.comb += remainder.eq(magnitude - (kept << drop))
    below = Signal(range(_WIDTH))
    m.d.comb += below.eq(drop - 1)
    half = Signal(_WIDTH)
    m.d.comb += half.eq(Const(1, _WIDTH) << below)
    up = (remainder > half) | ((remainder == half) & kept[0])
    packed = Signal(40)
    m.d.comb += packed.eq(((drop - 2) << 23) + kept + up)
    out = Signal(32)
    m.d.comb += out.eq(Mux(total == 0, 0, Cat(packed[0:31], total < 0)))
    return out


def _instance(m, name, acc_exp, term_exp):
    """One adder whose accumulator exponent field and block exponent are the constants given.

    Constant exponents make every alignment shift constant, so both the adder and the reference fold
    into small circuits; the solver still chooses the signs, the fraction and the dot product.
    Returns ``(result, want, acc)``, valid once the pipeline has filled.
    """
    m.submodules[name] = dut = Fp32Accumulate(stages=_STAGES)
    acc = Signal(32, name=f"{name}_acc")
    dot = Signal(signed(14), name=f"{name}_dot")
    m.d.comb += [
        acc.eq(Cat(AnyConst(23), Const(acc_exp, 8), AnyConst(1))),
        dot.eq(AnyConst(signed(14))),
        Assume((dot >= -4608) & (dot <= 4608)),
        dut.acc.eq(acc), dut.term.dot.eq(dot), dut.term.exp.eq(term_exp),
        dut.term.nan.eq(0), dut.bypass.eq(0), dut.en.eq(1),
    ]
    want = _reference(m, acc, dot, Const(term_exp, signed(9)))
    return dut.result, want, acc


def _harness(acc_exp, term_exp, cover=False):
    m = Module()
    started = reset_at_start(m)
    age = Signal(range(64), init=0)
    m.d.sync += age.eq(Mux(age == 63, 63, age + 1))
    # Inputs are constant, so the result is valid once the pipeline has filled.
    ready = started & (age >= Fp32Accumulate.TERM_LATENCY + _STAGES + 1)
    result, want, acc = _instance(m, "dut", acc_exp, term_exp)
    with m.If(ready):
        m.d.comb += Assert(result == want)
    if cover:
        # Not vacuous: the checked cycles reach a subnormal result, a negative one in the next
        # binade up, and an exact cancellation to +0 of a non-zero accumulator.
        m.d.comb += Cover(ready & (result[23:31] == 0) & (result[0:23] != 0))
        m.d.comb += Cover(ready & (result[23:31] == acc_exp + 1) & result[31])
        m.d.comb += Cover(ready & (acc[0:31] != 0) & (want == 0) & (result == 0))
    return m


def _bypass_harness(stages, cover=False):
    """Every input free every cycle; ``bypass`` and ``term.nan`` checked against their operation."""
    m = Module()
    started = reset_at_start(m)
    m.submodules.dut = dut = Fp32Accumulate(stages=stages)
    free(m, dut.term.as_value(), dut.bypass, dut.acc)
    m.d.comb += dut.en.eq(1)
    # The operation whose result is out now: its term and bypass came TERM_LATENCY + stages cycles
    # ago, its accumulator `stages` cycles ago. Delay lines like the adder's (no reset).
    def delayed(value, cycles, name):
        for index in range(cycles):
            reg = Signal(len(value), name=f"{name}_d{index}", reset_less=True)
            m.d.sync += reg.eq(value)
            value = reg
        return value
    bypass = delayed(dut.bypass, dut.latency, "bypass")
    nan = delayed(dut.term.nan, dut.latency, "nan")
    acc = delayed(dut.acc, stages, "acc")
    acc_nan = (acc[23:31] == 0xFF) & (acc[0:23] != 0)
    age = Signal(range(64), init=0)
    m.d.sync += age.eq(Mux(age == 63, 63, age + 1))
    ready = started & (age >= dut.latency + 1)
    result = dut.result
    with m.If(ready & bypass):
        m.d.comb += Assert(result == Mux(acc_nan, _QNAN, acc))
    with m.Elif(ready & nan):
        m.d.comb += Assert(result == _QNAN)
    if cover:
        # Not vacuous: a bypassed NaN term over a finite non-zero accumulator (passed through), a
        # bypassed non-canonical NaN accumulator (canonicalized), a live NaN term (canonical NaN).
        m.d.comb += Cover(ready & bypass & nan & (acc[23:31] != 0xFF) & (acc != 0) & (result == acc))
        m.d.comb += Cover(ready & bypass & acc_nan & (acc != _QNAN) & (result == _QNAN))
        m.d.comb += Cover(ready & ~bypass & nan & (acc[23:31] != 0xFF) & (result == _QNAN))
    return m


_DEPTH = Fp32Accumulate.TERM_LATENCY + _STAGES + 3       # reset, fill, then the last step checks

# (accumulator exponent field, block exponent): a zero or subnormal accumulator, the smallest normal
# binade and the next, against terms on the finest grid and two binades up. One proof per pair: the
# solver handles six small circuits far faster than one circuit holding all six.
_PAIRS = [(acc_exp, term_exp) for acc_exp in (0, 1, _ACC_EXP_MAX) for term_exp in (-149, _EXP_MAX)]

PROOFS = [
    *(Proof(f"mx_fp32_accumulate_e{acc_exp}_x{-term_exp}",
            lambda acc_exp=acc_exp, term_exp=term_exp: _harness(acc_exp, term_exp), mode="bmc",
            depth=_DEPTH,
            description=f"adder = fixed-point RNE reference, acc exponent field {acc_exp}, block "
                        f"exponent {term_exp}, any signs, fraction and dot product")
      for acc_exp, term_exp in _PAIRS),
    # A subnormal accumulator against the coarser term grid reaches all three scenarios.
    Proof("mx_fp32_accumulate_cover", lambda: _harness(0, _EXP_MAX, cover=True), mode="cover",
          depth=_DEPTH, description="reachability: subnormal result, carry into the next binade, "
                                    "exact cancellation to +0"),
    # The flags' properties, with every input free: cheap enough to check with a register after
    # every step as well as with the single register.
    *(Proof(f"mx_fp32_accumulate_bypass_s{stages}", lambda stages=stages: _bypass_harness(stages),
            mode="bmc", depth=Fp32Accumulate.TERM_LATENCY + stages + 3,
            description=f"{stages} stage(s), any inputs every cycle: bypass returns the accumulator (a "
                        f"NaN canonicalized) whatever the term, a NaN term included; otherwise a NaN "
                        f"term gives the canonical NaN")
      for stages in (_STAGES, 8)),
    Proof("mx_fp32_accumulate_bypass_cover", lambda: _bypass_harness(_STAGES, cover=True), mode="cover",
          depth=_DEPTH, description="reachability: bypassed NaN term over a finite accumulator, "
                                    "bypassed NaN accumulator canonicalized, live NaN term"),
]
