"""Bounded equivalence of the lane's addition, :class:`rtl.vpu.fp32_fma.Fp32Fma` computing ``a * 1 + b``,
with an independent reference.

The reference forms the exact sum as one fixed-point integer (no operand swap, no alignment window,
no sticky bit) and rounds it to nearest-even by a direct leading-one search: the textbook
definition, a different algorithm from the adder's datapath (and from its ``RoundPack``).

Each proof fixes the two exponent fields (constants fold the alignment shifts away, which keeps the
solver's work small) and lets the solver choose everything else: both signs, both 23-bit fractions
and ``subtract``. The pairs cover the smallest normals and exponent differences around the 24
to 26 places where Y becomes a tie, a sticky bit or nothing. Every exponent difference, special
values, overflow and the pipeline with ``en`` are checked by simulation
(``tests/rtl/vpu/test_fp32_fma.py``, ``test_lane.py``). The lane adds and subtracts with the FMA
(``Lane``: ``add = a * 1 + b``, ``sub = a * 1 + (-b)``), so this is the proof of its adder.

The inputs are held constant (``AnyConst``), so the solver checks the datapath once, after the
pipeline has filled.
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Cat, Const, Cover, Module, Mux, Signal, signed

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.fp32_fma import Fp32Fma

from .proof import Proof, reset_at_start

_DEPTH = 20        # cycles unrolled: the FMA's latency (12 with DSP products) plus the check
_INF = 0x7F80_0000


def _reference(m, a, b, a_field, b_field):
    """binary32 bits of ``a + b`` for operands whose exponent fields are the constants given."""
    a_be, b_be = max(a_field, 1), max(b_field, 1)
    base = min(a_be, b_be)                               # the sum's lsb has weight 2**(base - 150)
    width = 24 + abs(a_be - b_be) + 2
    a_int = Cat(a[:23], Const(a_field != 0, 1)) << (a_be - base)
    b_int = Cat(b[:23], Const(b_field != 0, 1)) << (b_be - base)
    total = Signal(signed(width), name="ref_total")
    m.d.comb += total.eq(Mux(a[31], -a_int, a_int) + Mux(b[31], -b_int, b_int))
    magnitude = Signal(width, name="ref_magnitude")
    m.d.comb += magnitude.eq(Mux(total < 0, -total, total))
    bits = Signal(range(width + 1), name="ref_bits")
    m.d.comb += bits.eq(width - leading_zeros(m, magnitude, "ref_lz"))
    # Bits dropped below the result's lsb: bits - 24 for a full significand; none (an exact result,
    # shifted left onto the binary32 grid by 24 - bits, never below biased exponent 1) otherwise.
    drop = Signal(range(width + 1), name="ref_drop")
    m.d.comb += drop.eq(Mux(bits > 24, bits - 24, 0))
    up_shift = Signal(range(25), name="ref_up_shift")
    m.d.comb += up_shift.eq(Mux(bits > 24, 0, Mux(24 - bits < base - 1, 24 - bits, base - 1)))
    kept = Signal(width + 24, name="ref_kept")
    m.d.comb += kept.eq(Mux(bits > 24, magnitude >> drop, magnitude << up_shift))
    remainder = Signal(width, name="ref_remainder")
    m.d.comb += remainder.eq(magnitude - ((magnitude >> drop) << drop))
    below = Signal(range(width), name="ref_below")
    m.d.comb += below.eq(drop - 1)
    half = Signal(width, name="ref_half")
    m.d.comb += half.eq(Const(1, width) << below)
    up = (drop != 0) & ((remainder > half) | ((remainder == half) & kept[0]))
    # biased exponent - 1 of the result's binade: base - 1 + drop - up_shift
    packed = Signal(40, name="ref_packed")
    m.d.comb += packed.eq(((base - 1 + drop - up_shift) << 23) + kept + up)
    out = Signal(32, name="ref_out")
    zero_sign = a[31] & b[31]                            # only (-0) + (-0) is -0
    with m.If(total == 0):
        m.d.comb += out.eq(Cat(Const(0, 31), zero_sign))
    with m.Elif(packed >= _INF):
        m.d.comb += out.eq(Cat(Const(_INF, 31), total < 0))
    with m.Else():
        m.d.comb += out.eq(Cat(packed[:31], total < 0))
    return out


def _harness(a_field, b_field, cover=False):
    m = Module()
    started = reset_at_start(m)
    m.submodules.dut = dut = Fp32Fma()
    assert dut.latency + 3 <= _DEPTH, "deepen _DEPTH to the FMA's latency"
    a = Signal(32, name="a")
    b = Signal(32, name="b")
    subtract = Signal(name="subtract")
    m.d.comb += [
        a.eq(Cat(AnyConst(23), Const(a_field, 8), AnyConst(1))),
        b.eq(Cat(AnyConst(23), Const(b_field, 8), AnyConst(1))),
        subtract.eq(AnyConst(1)),
        dut.a.eq(a), dut.b.eq(0x3F80_0000), dut.c.eq(Cat(b[:31], b[31] ^ subtract)), dut.en.eq(1),
    ]
    want = _reference(m, a, Cat(b[:31], b[31] ^ subtract), a_field, b_field)
    age = Signal(range(32), init=0)
    m.d.sync += age.eq(Mux(age == 31, 31, age + 1))
    ready = started & (age >= dut.latency + 1)          # inputs are constant: valid once filled
    with m.If(ready):
        m.d.comb += Assert(dut.result == want)
    if cover:
        # Not vacuous: a subnormal result, an exact cancellation to +0, a result in the binade
        # above the larger operand's.
        m.d.comb += Cover(ready & (dut.result[23:31] == 0) & (dut.result[:23] != 0))
        m.d.comb += Cover(ready & (a[:31] != 0) & (dut.result == 0))
        m.d.comb += Cover(ready & (dut.result[23:31] == max(a_field, b_field) + 1))
    return m


# (exponent field of a, of b): the smallest normals, and Y 24..26 binades below X (ties, sticky bits).
# Subnormal operands (0, 1) and massive cancellation of neighbouring binades (101, 100) take the solver
# 5 minutes or more through the FMA's wider datapath (12 s to 22 s for these), so they are left to
# simulation (test_fp32_fma.py: exact and almost exact cancellation, subnormal products and addends).
_PAIRS = [(1, 1), (2, 1), (26, 2), (27, 2), (28, 2), (127, 102)]

PROOFS = [
    *(Proof(f"vpu_fma_add_e{a_field}_{b_field}",
            lambda a_field=a_field, b_field=b_field: _harness(a_field, b_field), mode="bmc", depth=_DEPTH,
            description=f"FMA a*1+b = fixed-point RNE reference, exponent fields {a_field} and {b_field}, "
                        f"any signs, fractions and subtract")
      for a_field, b_field in _PAIRS),
    Proof("vpu_fma_add_cover", lambda: _harness(1, 1, cover=True), mode="cover", depth=_DEPTH,
          description="reachability: subnormal result, exact cancellation to +0, carry into the next binade"),
]
