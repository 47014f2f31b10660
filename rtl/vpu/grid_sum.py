"""Softmax's denominator: the exact sum of a row's terms on the 2**-60 grid, normalized for the divider."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.divider import OPERAND_BITS
from rtl.vpu.function_unit import EXPONENT
from rtl.vpu.lane import GRID_BITS

__all__ = ["GridSum", "SUM_BITS"]

SUM_BITS = 74
"""Accumulator width: up to 8192 terms of at most ``2**60`` each (``2**73``), with room."""
_GRID = 60


class GridSum(wiring.Component):
    """Exact integer sum of a row's softmax terms, bit-exact to ``sim_models.vpu.softmax``'s ``S``.

    Each lane adds its terms (``floor(E_i * 2**60)``, :attr:`rtl.vpu.lane.Lane.grid`) into its own
    74-bit accumulator: an integer sum is exact in any order, so the lanes need no common order.
    After the row's last beat the lane sums are added one per cycle, and the total is normalized to
    the divider's 34-bit operand, truncating (``divide_core``'s ``_norm``): ``sig * 2**exp`` with
    bit 33 of ``sig`` set.

    Interface attributes
    --------------------
    valid : ``In(1)``
        A beat of terms is on ``terms`` (lanes with ``mask`` clear count as 0).
    first, last : ``In(1)``
        The beat is the row's first / last.
    mask : ``In(lanes)``
    terms : ``In(ArrayLayout(GRID_BITS, lanes))``
    done : ``Out(1)``
        Pulse, :attr:`latency` cycles after the row's last beat: ``sig`` and ``exp`` are valid and
        hold until the next row's ``done``.
    sig : ``Out(34)``, exp : ``Out(EXPONENT)``
        The row's sum ``S * 2**-60`` as a normalized divider operand.
    """

    def __init__(self, lanes):
        check_positive_int(self, "lanes", lanes)
        self._lanes = lanes
        super().__init__({
            "valid": In(1),
            "first": In(1),
            "last": In(1),
            "mask": In(lanes),
            "terms": In(data.ArrayLayout(GRID_BITS, lanes)),
            "done": Out(1),
            "sig": Out(OPERAND_BITS),
            "exp": Out(EXPONENT),
        })

    @property
    def latency(self):
        """Cycles from the row's last beat to ``done``: the lane sums, one per cycle, and normalization."""
        return self._lanes + 2

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        accs = Array(Signal(SUM_BITS, name=f"lane_sum{j}") for j in range(lanes))
        with m.If(self.valid):
            for j in range(lanes):
                term = self.terms[j] & self.mask[j].replicate(GRID_BITS)
                m.d.sync += accs[j].eq(Mux(self.first, 0, accs[j]) + term)

        total = Signal(SUM_BITS)
        index = Signal(range(lanes + 1))
        summing = Signal()
        normalize = Signal()
        m.d.sync += [normalize.eq(0), self.done.eq(0)]
        with m.If(self.valid & self.last):
            m.d.sync += [summing.eq(1), index.eq(0), total.eq(0)]
        with m.Elif(summing):
            m.d.sync += [total.eq(total + accs[index]), index.eq(index + 1)]
            with m.If(index == lanes - 1):
                m.d.sync += [summing.eq(0), normalize.eq(1)]
        with m.If(normalize):
            zeros = leading_zeros(m, total, "sum_lz")
            shifted = Signal(SUM_BITS)
            m.d.comb += shifted.eq(total << zeros)
            m.d.sync += [self.sig.eq(shifted[SUM_BITS - OPERAND_BITS:]),
                         self.exp.eq((SUM_BITS - OPERAND_BITS) - zeros - _GRID), self.done.eq(1)]
        return m
