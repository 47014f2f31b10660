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

    Datapath. Restoring division, one quotient bit per step, most significant first. Step 26
    compares ``num`` with ``den`` (``num < 2 * den``, so one subtraction suffices); every later step
    doubles the partial remainder ``R < den`` and subtracts ``den`` if it fits (``2R - den``: one
    36-bit carry chain and a 34-bit multiplexer). The sticky bit of the last step is taken without
    a reduction after its multiplexer: the final remainder is non-zero exactly when ``2R != den``
    (if ``den`` was subtracted) or ``R != 0`` (if not), both compared in parallel with the carry
    chain. The divisor travels down the pipeline beside the remainder.

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports). Callers carry sign, exponent and
        special-value flags in it.
    steps_per_stage : int
        Quotient bits per register stage (1 to 27). The 27 steps are split into
        ``ceil(27 / steps_per_stage)`` stages; the first stage takes the remainder. Two steps (two
        carry chains) per stage is about the limit for 100 MHz on ECP5.

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
    :attr:`latency` = ``ceil(27 / steps_per_stage)`` cycles from operands to ``quotient``; one
    division per cycle. Outputs come straight from registers. No valid signal and no stall logic:
    the pipeline is a fixed delay, frozen by ``en``. Operands outside the normalized range give
    meaningless (but deterministic) outputs.
    """

    def __init__(self, tag_width=0, steps_per_stage=2):
        check_tag_width(self, tag_width)
        check_positive_int(self, "steps_per_stage", steps_per_stage)
        if steps_per_stage > QUOTIENT_BITS:
            raise parameter_error(self, ValueError,
                                  f"steps_per_stage must be at most {QUOTIENT_BITS}, got {steps_per_stage!r}")
        self._tag_width = tag_width
        self._steps_per_stage = steps_per_stage
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
    def steps_per_stage(self):
        return self._steps_per_stage

    @property
    def latency(self):
        """Cycles from ``num``/``den`` to ``quotient``/``sticky``."""
        return len(stage_sizes(QUOTIENT_BITS, self._steps_per_stage))

    def elaborate(self, platform):
        m = Module()
        sizes = stage_sizes(QUOTIENT_BITS, self._steps_per_stage)

        def register(name, value, stage):
            reg = Signal(value.shape(), name=f"{name}_r{stage}", reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # Pipeline state: partial remainder (R < den, 34 bits), divisor below its top bit, the
        # quotient bits found so far (most significant last in the list), the tag.
        den_low = self.den[:OPERAND_BITS - 1]
        remainder = None
        bits = []
        sticky = None
        tag = self.tag if self._tag_width else None
        step = 0
        for stage, size in enumerate(sizes):
            den = Cat(den_low, Const(1, 1))
            for _ in range(size):
                last = step == QUOTIENT_BITS - 1
                # Partial remainder to compare: num itself for the first bit, then 2R (35 bits).
                partial = self.num if remainder is None else Cat(Const(0, 1), remainder)
                diff = Signal(OPERAND_BITS + 2, name=f"diff_{step}")
                m.d.comb += diff.eq(partial - den)
                fits = Signal(name=f"q_{QUOTIENT_BITS - 1 - step}")
                m.d.comb += fits.eq(~diff[-1])
                if last:
                    # Non-zero final remainder, from the compare's inputs (see the class docstring).
                    sticky = Mux(fits, partial != den, remainder != 0)
                new = Signal(OPERAND_BITS, name=f"rem_{step}")
                m.d.comb += new.eq(Mux(fits, diff[:OPERAND_BITS], partial[:OPERAND_BITS]))
                remainder = new
                bits.append(fits)
                step += 1
            if stage < len(sizes) - 1:
                remainder = register("rem", remainder, stage)
                den_low = register("den", den_low, stage)
                bits = [register("q", Cat(*reversed(bits)), stage)]   # one vector, msb on top
            if tag is not None:
                tag = register("tag", tag, stage)
        quotient = Cat(*reversed(bits))
        q_reg = register("quotient", quotient, len(sizes) - 1)
        s_reg = register("sticky", sticky, len(sizes) - 1)
        m.d.comb += [self.quotient.eq(q_reg), self.sticky.eq(s_reg)]
        if tag is not None:
            m.d.comb += self.tag_out.eq(tag)
        return m
