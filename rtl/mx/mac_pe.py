"""Processing element of the MXFP4 MAC array: a block-dot unit around an interleaved accumulator ring."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.dot_product import LUT_PRODUCTS, DotProduct
from rtl.mx.fp32_accumulate import Fp32Accumulate
from rtl.mx.layouts import FP32, row_lane

__all__ = ["MacPe"]


class MacPe(wiring.Component):
    """One processing element: one A block times one B block per cycle, into ``interleave`` accumulators.

    The A block arrives with the row lane from the left, the B block with the column lane from above;
    both leave registered, one cycle later, to the right and below (systolic forwarding: every wire
    between processing elements is a register output, so Fmax does not depend on the array size).

    The accumulate adder (:class:`Fp32Accumulate`) has ``interleave`` pipeline registers, and its
    output feeds its own accumulator input: the ring holds ``interleave`` independent binary32
    accumulators, one per slot, advancing one slot per cycle. A beat for slot ``s`` must therefore
    arrive exactly when slot ``s`` is at the ring's head; :class:`rtl.mx.mac_array.MacArray`
    guarantees that by issuing slot ``s`` only in cycles ``= s`` modulo ``interleave``. A cycle with no
    beat passes the head through unchanged (``bypass``). The first beat of a tile takes its initial
    value from ``row_i.fields[col]`` (or +0 with ``zero_init``) instead of the head.

    The head is written into ``row_o.fields[col]`` in every cycle; the beat the array marks with
    ``result`` passes exactly when the head holds a tile's final value, so those fields leave the row
    holding the results.

    Parameters
    ----------
    col : int
        Column of this element: the index of its field in the row lane.
    cols : int
        Columns of the array (width of the row lane's field array).
    interleave : int
        Accumulators in the ring (= adder pipeline registers).
    mapping : ProductMapping
        How the dot product builds its 32 products (LUTs, multipliers, block RAM).

    Interface attributes
    --------------------
    row_i : ``In(row_lane(cols, mapping.operand))``
        Row lane from the left neighbour (or the array edge).
    col_i : ``In(mapping.operand)``
        B block from the neighbour above (or the array edge), conditioned for ``mapping``.
    row_o : ``Out(row_lane(cols, mapping.operand))``
        Registered row lane to the right, with ``fields[col]`` replaced by the ring head.
    col_o : ``Out(mapping.operand)``
        Registered B block to the neighbour below.

    Latency and throughput
    ----------------------
    One block pair per cycle. A beat's sum reaches the ring head :attr:`latency` cycles
    (dot-product latency + ``Fp32Accumulate.TERM_LATENCY + interleave``) after the beat is on
    ``row_i``. The element never stalls; there is no backpressure inside the array.
    """

    def __init__(self, *, col, cols, interleave, mapping=LUT_PRODUCTS):
        if not 0 <= col < cols:
            raise parameter_error(self, ValueError, f"col {col} is outside 0..{cols - 1}")
        self._col = col
        self._interleave = interleave
        self._mapping = mapping
        super().__init__({
            "row_i": In(row_lane(cols, mapping.operand)),
            "col_i": In(mapping.operand),
            "row_o": Out(row_lane(cols, mapping.operand)),
            "col_o": Out(mapping.operand),
        })

    @property
    def latency(self):
        """Cycles from a beat on ``row_i`` to its sum at the ring head."""
        return self.latency_for(self._interleave, self._mapping)

    @staticmethod
    def latency_for(interleave, mapping):
        """:attr:`latency` of an element with ``interleave`` accumulators and product ``mapping``."""
        return DotProduct.latency_for(mapping) + Fp32Accumulate.TERM_LATENCY + interleave

    def elaborate(self, platform):
        m = Module()
        m.submodules.dot = dot = DotProduct(self._mapping)
        m.submodules.adder = adder = Fp32Accumulate(self._interleave)

        m.d.comb += [dot.a.eq(self.row_i.a), dot.b.eq(self.col_i), adder.term.eq(dot.term)]

        # The beat's control and initial value wait for its dot product: the adder samples
        # `bypass` with the term and the accumulator one cycle (TERM_LATENCY) later.
        valid, first, zero_init = self.row_i.valid, self.row_i.first, self.row_i.zero_init
        init = self.row_i.fields[self._col]
        dot_latency = DotProduct.latency_for(self._mapping)
        for stage in range(dot_latency + Fp32Accumulate.TERM_LATENCY):
            if stage == dot_latency:
                m.d.comb += adder.bypass.eq(~valid)
            valid_r = Signal(name=f"valid_d{stage}")
            first_r = Signal(name=f"first_d{stage}", reset_less=True)
            zero_r = Signal(name=f"zero_init_d{stage}", reset_less=True)
            init_r = Signal(FP32, name=f"init_d{stage}", reset_less=True)
            m.d.sync += [valid_r.eq(valid), first_r.eq(first), zero_r.eq(zero_init), init_r.eq(init)]
            valid, first, zero_init, init = valid_r, first_r, zero_r, init_r

        head = adder.result
        m.d.comb += adder.acc.eq(Mux(valid & first, Mux(zero_init, 0, init), head))

        # Systolic forwarding; data registers need no reset, the beat's flags do.
        lane = Signal.like(self.row_o, reset_less=True, name="lane")
        flags = Signal(3, name="lane_flags")
        col = Signal(self._mapping.operand, reset_less=True, name="col")
        m.d.sync += [
            lane.eq(self.row_i),
            lane.fields[self._col].eq(head),
            flags.eq(Cat(self.row_i.valid, self.row_i.result, self.row_i.result_last)),
            col.eq(self.col_i),
        ]
        m.d.comb += [
            self.row_o.eq(lane),
            self.row_o.valid.eq(flags[0]),
            self.row_o.result.eq(flags[1]),
            self.row_o.result_last.eq(flags[2]),
            self.col_o.eq(col),
        ]
        return m

