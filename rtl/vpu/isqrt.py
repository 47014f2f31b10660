"""Pipelined integer square root of the vector unit: ``floor(sqrt(v))`` of a 61-bit radicand."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.vpu.divider import check_tag_width, stage_sizes

__all__ = ["IntegerSqrt"]

RADICAND_BITS = 61
"""Radicand width: ``sig << (36 + p)`` of ``sim_models.vpu._rsqrt_parts`` (24-bit ``sig``, ``p <= 1``)."""
ROOT_BITS = 31
"""Root width: ``ceil(RADICAND_BITS / 2)``."""


class IntegerSqrt(wiring.Component):
    """``floor(sqrt(radicand))`` of a 61-bit unsigned integer, one root bit per step.

    Bit-exact to ``math.isqrt`` (and to :func:`sim_models.vpu.isqrt_array`) for every 61-bit
    radicand. In the vector unit the radicand is ``sig << (36 + p)`` with a normalized 24-bit
    significand ``sig`` and ``p`` in {0, 1} (:func:`sim_models.vpu._rsqrt_parts`), so the root has 30
    (``p = 0``) or 31 (``p = 1``) significant bits, but any radicand gives the exact root.

    Datapath. Restoring digit recurrence, most significant root bit first. The radicand (zero-extended
    to 62 bits) is consumed two bits per step; with ``S`` the root found so far and ``R = v' - S**2``
    the remainder of the radicand's leading bits ``v'`` consumed so far, each step forms
    ``R' = 4R + (next two bits)`` and the trial ``T = 4S + 1``: if ``R' >= T`` the new root bit is 1
    and ``R' - T`` is kept, else it is 0 and ``R'`` is kept. ``R <= 2S``, so step ``j`` (``j = 0`` first)
    needs a ``j + 4``-bit subtraction: the carry chains grow from 4 to 34 bits. The radicand bits not
    yet consumed travel down the pipeline (constant-zero ones are removed by synthesis).

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` pass-through (0: no ``tag`` ports).
    steps_per_stage : int
        Root bits per register stage (1 to 31). The 31 steps are split into
        ``ceil(31 / steps_per_stage)`` stages; the first (narrowest) stage takes the remainder.
        Two (the default) put two carry chains and two multiplexers between registers: just above
        100 MHz on ECP5; one step per stage has about twice the clock margin, for twice the
        pipeline registers and 31 cycles.

    Interface attributes
    --------------------
    radicand : ``In(61)``
        The unsigned integer ``v``.
    tag : ``In(tag_width)``
        Sampled with ``radicand``, delivered unchanged with its root (only when ``tag_width > 0``).
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    root : ``Out(31)``
        ``floor(sqrt(v))``, :attr:`latency` enabled cycles after its radicand.
    tag_out : ``Out(tag_width)``
        The radicand's ``tag`` (only when ``tag_width > 0``).

    Latency and throughput
    ----------------------
    :attr:`latency` = ``ceil(31 / steps_per_stage)`` cycles from ``radicand`` to ``root``; one root
    per cycle. Outputs come straight from registers. No valid signal and no stall logic: the
    pipeline is a fixed delay, frozen by ``en``.
    """

    def __init__(self, tag_width=0, steps_per_stage=2):
        check_tag_width(self, tag_width)
        check_positive_int(self, "steps_per_stage", steps_per_stage)
        if steps_per_stage > ROOT_BITS:
            raise parameter_error(self, ValueError,
                                  f"steps_per_stage must be at most {ROOT_BITS}, got {steps_per_stage!r}")
        self._tag_width = tag_width
        self._steps_per_stage = steps_per_stage
        ports = {
            "radicand": In(RADICAND_BITS),
            "en": In(1, init=1),
            "root": Out(ROOT_BITS),
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
        """Cycles from ``radicand`` to ``root``."""
        return len(stage_sizes(ROOT_BITS, self._steps_per_stage))

    def elaborate(self, platform):
        m = Module()
        sizes = stage_sizes(ROOT_BITS, self._steps_per_stage)

        def register(name, value, stage):
            reg = Signal(value.shape(), name=f"{name}_r{stage}", reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # Pipeline state: the radicand bits not yet consumed (top pair first), the root so far and
        # the remainder (both grow by one bit a step; empty before the first step), the tag.
        pending = Cat(self.radicand, Const(0, 2 * ROOT_BITS - RADICAND_BITS))
        root = Const(0, 0)
        rem = Const(0, 0)
        tag = self.tag if self._tag_width else None
        step = 0
        for stage, size in enumerate(sizes):
            for _ in range(size):
                width = step + 4                              # R' < 2**(step + 3), plus a sign bit
                pair = pending[-2:]
                pending = pending[:-2]
                partial = Cat(pair, rem)                      # 4R + pair
                trial = Cat(Const(1, 2), root)                # 4S + 1
                diff = Signal(width, name=f"diff_{step}")
                m.d.comb += diff.eq(partial - trial)
                bit = Signal(name=f"root_{ROOT_BITS - 1 - step}")
                m.d.comb += bit.eq(~diff[-1])
                new_rem = Signal(step + 2, name=f"rem_{step}")  # R <= 2S < 2**(step + 2)
                m.d.comb += new_rem.eq(Mux(bit, diff, partial))
                root, rem = Cat(bit, root), new_rem
                step += 1
            if stage < len(sizes) - 1:
                rem = register("rem", rem, stage)
                root = register("root", root, stage)
                pending = register("pending", pending, stage)
            else:
                root = register("root", root, stage)
            if tag is not None:
                tag = register("tag", tag, stage)
        m.d.comb += self.root.eq(root)
        if tag is not None:
            m.d.comb += self.tag_out.eq(tag)
        return m
