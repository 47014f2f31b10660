"""Pipelined restoring divider of the vector unit: 27 quotient bits and a sticky bit."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error

__all__ = ["Divider"]

OPERAND_BITS = 34
"""Width of the normalized dividend and divisor (``sim_models.vpu._DIV_BITS``)."""
QUOTIENT_BITS = 27
"""Quotient bits, bit 26 down to bit 0 (``sim_models.vpu._QUOTIENT_BITS``)."""
DIGITS = (QUOTIENT_BITS - 1) // 2
"""Radix-4 digits below quotient bit 26."""
UNITS = DIGITS + 1
"""Pipeline units: quotient bit 26, then the radix-4 digits."""


def stage_sizes(steps, steps_per_stage):
    """Steps done by each register stage: ``steps_per_stage`` each, the remainder in the first.

    Shared by the digit-recurrence units (:class:`Divider`, :class:`rtl.vpu.isqrt.IntegerSqrt`).
    """
    stages = -(-steps // steps_per_stage)
    return [steps - steps_per_stage * (stages - 1)] + [steps_per_stage] * (stages - 1)


def check_tag_width(component, tag_width):
    """Raise :class:`ValueError` unless ``tag_width`` is a non-negative ``int``."""
    if not isinstance(tag_width, int) or isinstance(tag_width, bool) or tag_width < 0:
        raise parameter_error(component, ValueError,
                              f"tag_width must be a non-negative integer, got {tag_width!r}")


class Divider(wiring.Component):
    """Restoring division of two normalized 34-bit significands: 27 quotient bits and a sticky bit.

    The integer core of :func:`sim_models.vpu.divide_core`, bit for bit: for ``2**33 <= num, den <
    2**34`` it returns ``quotient = floor(num * 2**26 / den)`` (so ``2**25 < quotient < 2**27``) and
    ``sticky = (num * 2**26 mod den != 0)``. ``2 * quotient + sticky`` is then the magnitude a caller
    rounds once (``encode_rne``) to get a correctly rounded binary32 quotient.

    Datapath. Restoring division, most significant quotient bit first, the partial remainder ``R``
    always non-negative and below ``den``. Bit 26 compares ``num`` with ``den`` (``num < 2 * den``, so
    one subtraction suffices) while ``3 * den`` is formed beside it. The other 26 bits come two at a
    time as radix-4 digits: ``4R - den``, ``4R - 2 den`` and ``4R - 3 den`` are three parallel 37-bit
    subtractions, the largest non-negative one (or ``4R``) is the new remainder and its multiple the
    digit, so a digit costs one carry chain and a 4-way multiplexer: the same quotient and
    remainders as 26 radix-2 restoring steps, at the delay of one. The sticky bit of the last digit
    is taken without a reduction after its multiplexer: the final remainder is non-zero exactly
    when ``4R`` differs from the chosen multiple of ``den``, compared in parallel with the carry
    chains. ``den`` and ``3 * den`` travel down the pipeline beside the remainder.

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports). Callers carry sign, exponent and
        special-value flags in it.
    digits_per_stage : int
        Radix-4 digits per register stage (1 to 14; bit 26 counts as one). The 14 units are split
        into ``ceil(14 / digits_per_stage)`` stages, the first taking the remainder. One digit per
        stage (the default) is one carry chain and a multiplexer between registers: above 100 MHz
        on ECP5; two halve the pipeline registers at about half the clock.

    Interface attributes
    --------------------
    num : ``In(34)``
        Dividend, normalized: bit 33 set.
    den : ``In(34)``
        Divisor, normalized: bit 33 set (bit 33 is not read; it is taken as 1).
    tag : ``In(tag_width)``
        Sampled with ``num`` and ``den``, delivered unchanged with their quotient (only when
        ``tag_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    quotient : ``Out(27)``
        ``floor(num * 2**26 / den)``, :attr:`latency` enabled cycles after its operands.
    sticky : ``Out(1)``
        The remainder ``num * 2**26 mod den`` is non-zero.
    tag_out : ``Out(tag_width)``
        The operands' ``tag`` (only when ``tag_width > 0``).

    Latency and throughput
    ----------------------
    :attr:`latency` = ``ceil(14 / digits_per_stage)`` cycles (14 by default) from operands to
    ``quotient``; one division per cycle. Outputs come straight from registers. No valid signal and
    no stall logic: the pipeline is a fixed delay, frozen by ``en``. Operands outside the normalized
    range give meaningless (but deterministic) outputs.
    """

    def __init__(self, tag_width=0, digits_per_stage=1):
        check_tag_width(self, tag_width)
        check_positive_int(self, "digits_per_stage", digits_per_stage)
        if digits_per_stage > UNITS:
            raise parameter_error(self, ValueError,
                                  f"digits_per_stage must be at most {UNITS}, got {digits_per_stage!r}")
        self._tag_width = tag_width
        self._digits_per_stage = digits_per_stage
        ports = {
            "num": In(OPERAND_BITS),
            "den": In(OPERAND_BITS),
            "en": In(1, init=1),
            "quotient": Out(QUOTIENT_BITS),
            "sticky": Out(1),
        }
        if tag_width:
            ports.update(tag=In(tag_width), tag_out=Out(tag_width))
        super().__init__(ports)

    @property
    def tag_width(self):
        return self._tag_width

    @property
    def digits_per_stage(self):
        return self._digits_per_stage

    @property
    def latency(self):
        """Cycles from ``num``/``den`` to ``quotient``/``sticky``."""
        return len(stage_sizes(UNITS, self._digits_per_stage))

    def elaborate(self, platform):
        m = Module()
        sizes = stage_sizes(UNITS, self._digits_per_stage)

        def register(name, value, stage):
            reg = Signal(value.shape(), name=f"{name}_r{stage}", reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # Pipeline state: remainder R < den (34 bits), divisor below its top bit (always 1), three
        # times the divisor, the quotient bits found so far (most significant first), the tag.
        den_low = self.den[:OPERAND_BITS - 1]
        den = Cat(den_low, Const(1, 1))
        den3 = Signal(OPERAND_BITS + 2, name="den3")
        m.d.comb += den3.eq(den + Cat(Const(0, 1), den))
        tag = self.tag if self._tag_width else None

        # Quotient bit 26: num < 2 * den, so one comparison.
        diff = Signal(OPERAND_BITS + 1, name="diff_q26")
        m.d.comb += diff.eq(self.num - den)
        fits = Signal(name="q_26")
        m.d.comb += fits.eq(~diff[-1])
        remainder = Signal(OPERAND_BITS, name="rem_q26")
        m.d.comb += remainder.eq(Mux(fits, diff[:OPERAND_BITS], self.num))
        quotient = fits
        sticky = None

        unit = 1
        for stage, size in enumerate(sizes):
            for _ in range(size - (stage == 0)):
                # Radix-4 digit: the largest k in 0..3 with k * den <= P = 4R, from three parallel
                # subtractions (P < 4 den, so the new remainder is again below den).
                low = 2 * (DIGITS - unit)                            # weight of the digit's low bit
                partial = Cat(Const(0, 2), remainder)                # 36 bits
                multiples = (den, Cat(Const(0, 1), den), den3)
                ge = []
                cand = []
                for k, multiple in enumerate(multiples, start=1):
                    c = Signal(OPERAND_BITS + 3, name=f"diff{k}_q{low}")
                    m.d.comb += c.eq(partial - multiple)
                    g = Signal(name=f"ge{k}_q{low}")
                    m.d.comb += g.eq(~c[-1])
                    ge.append(g)
                    cand.append(c[:OPERAND_BITS])
                new = Signal(OPERAND_BITS, name=f"rem_q{low}")
                m.d.comb += new.eq(Mux(ge[2], cand[2], Mux(ge[1], cand[1], Mux(ge[0], cand[0],
                                                                                  partial[:OPERAND_BITS]))))
                if unit == DIGITS:
                    # Non-zero final remainder, from the comparisons' inputs (class docstring).
                    sticky = Mux(ge[2], partial != den3,
                                 Mux(ge[1], partial != multiples[1],
                                     Mux(ge[0], partial != den, remainder != 0)))
                digit = Cat(ge[2] | (ge[0] & ~ge[1]), ge[1])
                quotient = Cat(digit, quotient)
                remainder = new
                unit += 1
            if stage < len(sizes) - 1:
                remainder = register("rem", remainder, stage)
                den_low = register("den", den_low, stage)
                den3 = register("den3", den3, stage)
                den = Cat(den_low, Const(1, 1))
                quotient = register("q", quotient, stage)
            if tag is not None:
                tag = register("tag", tag, stage)
        m.d.comb += [
            self.quotient.eq(register("quotient", quotient, len(sizes) - 1)),
            self.sticky.eq(register("sticky", sticky, len(sizes) - 1)),
        ]
        if tag is not None:
            m.d.comb += self.tag_out.eq(tag)
        return m
