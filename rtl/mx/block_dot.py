"""Block-dot unit: one MX block pair's dot product, scaled and added to a binary32 accumulator."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.stream_register import StreamRegister
from rtl.mx.dot_product import LUT_PRODUCTS, DotProduct, condition_operand
from rtl.mx.fp32_accumulate import Fp32Accumulate
from rtl.mx.layouts import FP32, BlockDotRequest

__all__ = ["BlockDot"]


class BlockDot(wiring.Component):
    """``acc + dot(a, b) * 2**(sa - 127) * 2**(sb - 127)``, rounded once: one step of the MX GEMM.

    The 32 E2M1 x E2M1 products of the two blocks are summed exactly (:class:`DotProduct`, an
    integer in quarters), scaled by the two E8M0 scales and added to the binary32 accumulator
    ``acc`` with one round-to-nearest-even (:class:`Fp32Accumulate`), bit-exact to
    ``sim_models.mx.fp32_add_scaled`` and hence to one block step of ``sim_models.mx.matmul``. A 0xFF
    scale on either block, or a NaN ``acc``, gives the canonical NaN ``0x7FC00000``; an infinite
    ``acc`` stays infinite; subnormal results are kept; overflow gives ±Inf; an all-zero dot adds +0.

    This is the datapath of one processing element of :class:`rtl.mx.mac_array.MacArray`, here
    behind a plain request/response stream, for unit testing and as a reusable block.

    Parameters
    ----------
    adder_stages : int
        Accumulator-path pipeline registers of the accumulate adder (default 8).
    mapping : ProductMapping
        How the 32 products are built (LUTs by default; multipliers or block RAM).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(BlockDotRequest))``
        Requests: ``a`` and ``b`` (MX blocks) and ``acc`` (binary32 pattern).
    o : ``Out(stream.Signature(32))``
        Results (binary32 patterns), in request order.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles from a request's transfer to its result's first valid cycle
    (dot-product latency ``+ Fp32Accumulate.TERM_LATENCY + adder_stages + 1``); one request per
    cycle sustained. When ``o`` stalls the whole pipeline holds: it is clock-enabled by the output
    register's ``ready``, which is itself a register, so neither ``i.ready`` nor any enable depends
    combinationally on ``o.ready``. Nothing is lost, duplicated or reordered.
    """

    def __init__(self, *, adder_stages=8, mapping=LUT_PRODUCTS):
        self._adder_stages = adder_stages
        self._mapping = mapping
        super().__init__({
            "i": In(stream.Signature(BlockDotRequest)),
            "o": Out(stream.Signature(FP32)),
        })

    @property
    def latency(self):
        return DotProduct.latency_for(self._mapping) + Fp32Accumulate.TERM_LATENCY + self._adder_stages + 1

    def elaborate(self, platform):
        m = Module()
        m.submodules.dot = dot = DotProduct(self._mapping)
        m.submodules.adder = adder = Fp32Accumulate(self._adder_stages)
        m.submodules.out = out = StreamRegister(FP32)

        en = Signal()
        m.d.comb += [
            en.eq(out.i.ready),
            dot.en.eq(en),
            adder.en.eq(en),
            self.i.ready.eq(en),
            dot.a.eq(condition_operand(m, self.i.payload.a, self._mapping, "a", "a")),
            dot.b.eq(condition_operand(m, self.i.payload.b, self._mapping, "b", "b")),
            adder.term.eq(dot.term),
            adder.bypass.eq(0),
        ]

        # The accumulator waits for the dot product; valid bits follow both pipelines.
        acc = self.i.payload.acc
        valid = self.i.valid
        for stage in range(DotProduct.latency_for(self._mapping) + Fp32Accumulate.TERM_LATENCY):
            acc_r = Signal(FP32, name=f"acc_d{stage}")
            valid_r = Signal(name=f"valid_d{stage}")
            with m.If(en):
                m.d.sync += [acc_r.eq(acc), valid_r.eq(valid)]
            acc, valid = acc_r, valid_r
        m.d.comb += adder.acc.eq(acc)
        for stage in range(self._adder_stages):
            valid_r = Signal(name=f"valid_a{stage}")
            with m.If(en):
                m.d.sync += valid_r.eq(valid)
            valid = valid_r

        m.d.comb += [
            out.i.valid.eq(valid),
            out.i.payload.eq(adder.result),
        ]
        wiring.connect(m, out.o, wiring.flipped(self.o))
        return m
