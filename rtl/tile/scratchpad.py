"""The compute tile's activation scratchpad: block RAM shared by the sequencer and the host."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from rtl.common.parameters import check_positive_int
from rtl.tile.layouts import host_region_signature, scratchpad_port_signature

__all__ = ["Scratchpad"]


class Scratchpad(wiring.Component):
    """``words`` 32-bit words of block RAM with a core port and a host window.

    Interface attributes
    --------------------
    core : ``In(scratchpad_port_signature(words))``
        The sequencer's port: one synchronous read (data one cycle after ``rd_en``) and one write
        per cycle.
    host : ``In(host_region_signature(words))``
        The host's window (the register block's ``SPAD`` region), served only while
        ``host_enable`` is high (the tile is idle) so that it never competes with the core port;
        a read answers two cycles after its request is accepted, a write one cycle after.
    host_enable : ``In(1)``
        Serve the host window.
    """

    def __init__(self, words):
        check_positive_int(self, "words", words)
        self.words = words
        super().__init__({
            "core": In(scratchpad_port_signature(words)),
            "host": In(host_region_signature(words)),
            "host_enable": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram = ram = Memory(shape=32, depth=self.words, init=[])
        rd = ram.read_port()
        wr = ram.write_port()
        m.d.comb += [rd.addr.eq(self.core.rd_addr), rd.en.eq(self.core.rd_en),
                     self.core.rd_data.eq(rd.data),
                     wr.addr.eq(self.core.wr_addr), wr.en.eq(self.core.wr_en),
                     wr.data.eq(self.core.wr_data)]

        host = self.host
        reading = Signal()
        m.d.sync += reading.eq(0)
        with m.If(host.resp.ready):
            m.d.sync += host.resp.valid.eq(0)
        m.d.comb += host.req.ready.eq(self.host_enable & ~host.resp.valid & ~reading)
        with m.If(host.req.valid & host.req.ready):
            with m.If(host.req.payload.write):
                m.d.comb += [wr.addr.eq(host.req.payload.addr), wr.data.eq(host.req.payload.data),
                             wr.en.eq(1)]
                m.d.sync += host.resp.valid.eq(1)
            with m.Else():
                m.d.comb += [rd.addr.eq(host.req.payload.addr), rd.en.eq(1)]
                m.d.sync += reading.eq(1)
        with m.If(reading):
            m.d.sync += [host.resp.valid.eq(1), host.resp.payload.data.eq(rd.data)]
        return m
