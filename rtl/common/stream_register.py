"""Full-throughput register slice (skid buffer) for ``amaranth.lib.stream`` interfaces."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamRegister"]


class StreamRegister(wiring.Component):
    """Registers a stream's payload, valid *and* ready, at one transfer per cycle.

    Cutting the combinational ``ready`` path between a producer and a consumer is what lets a long
    pipeline (a row of processing elements, a chain of routers) keep its Fmax as it grows. This is
    the classic two-entry skid buffer: the main register feeds ``o``; when ``o`` stalls, the word
    already accepted on ``i`` waits in the skid register.

    Parameters
    ----------
    shape : shape-like or :class:`amaranth.lib.data.Layout`
        Payload shape.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(shape))``
        Input stream. ``i.ready`` is a register output (no combinational path from ``o.ready``).
    o : ``Out(stream.Signature(shape))``
        Output stream. ``o.valid`` and ``o.payload`` are register outputs.

    Latency and throughput
    ----------------------
    One cycle from ``i`` to ``o``; one transfer per cycle sustained under any backpressure pattern.
    Order is preserved and nothing is lost or duplicated.
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    @property
    def shape(self):
        return self._shape

    def elaborate(self, platform):
        m = Module()

        skid_valid = Signal()
        skid = Signal.like(self.o.payload, name="skid")

        # Ready while the skid register is empty; registered, so it has no path from o.ready.
        m.d.comb += self.i.ready.eq(~skid_valid)

        with m.If(self.o.ready | ~self.o.valid):
            # Output register free this cycle: load it from the skid register first, then from i.
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            # Output stalled and a word arrives: park it in the skid register.
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]

        return m


