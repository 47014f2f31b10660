"""The compute tile's activation scratchpad: ``lanes`` banks of block RAM, word and row access."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.tile.layouts import host_region_signature, scratchpad_port_signature, wide_port_signature

__all__ = ["Scratchpad"]


class Scratchpad(wiring.Component):
    """``words`` 32-bit words in ``lanes`` banks, with a word port, a row port and a host window.

    Word ``w`` lives in bank ``w % lanes`` at bank address ``w // lanes``, so any ``lanes``
    consecutive words sit in distinct banks: the row port reads or writes them in one cycle from
    any word address, aligned or not (each bank gets its own address, a rotator puts word
    ``addr + j`` in lane ``j``). Each bank is a simple dual-port block RAM (one read, one write).

    Interface attributes
    --------------------
    core : ``In(scratchpad_port_signature(words))``
        Word port (the sequencer's scalar accesses and copies): a read answers one cycle after
        ``rd_en``; a write per cycle.
    wide : ``In(wide_port_signature(words, lanes))``
        Row port (the vector unit's operands and results): ``rd_data[j]`` is word
        ``(rd_addr + j) % words`` one cycle after ``rd_en`` (a read near the end wraps to the first
        words); ``wr_en``
        writes ``wr_data[j]`` to word ``wr_addr + j`` for every ``j`` with bit ``j`` of ``wr_mask``
        set.
    host : ``In(host_region_signature(words))``
        The host's window (the register block's ``SPAD`` region), served only while
        ``host_enable`` is high (the tile is idle): a read answers two cycles after its request is
        accepted, a write one cycle after.
    host_enable : ``In(1)``
        Serve the host window.

    The word port and the row port share the banks: a cycle may use one of them for reads and one
    for writes (the word port wins when both ask), since the sequencer runs one instruction at a
    time. Reading a word in the cycle it is written gives an undefined word: users never do.
    """

    def __init__(self, words, lanes=8):
        check_positive_int(self, "words", words)
        check_positive_int(self, "lanes", lanes)
        if lanes & (lanes - 1) or words % lanes:
            raise parameter_error(self, ValueError, f"lanes must be a power of two dividing words, got "
                                  f"lanes={lanes}, words={words}")
        self.words = words
        self.lanes = lanes
        super().__init__({
            "core": In(scratchpad_port_signature(words)),
            "wide": In(wide_port_signature(words, lanes)),
            "host": In(host_region_signature(words)),
            "host_enable": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, depth = self.lanes, self.words // self.lanes
        shift = (lanes - 1).bit_length()
        banks = []
        for b in range(lanes):
            bank = Memory(shape=32, depth=depth, init=[])
            m.submodules[f"bank{b}"] = bank
            banks.append((bank.read_port(), bank.write_port()))

        # Word-port requests (the core's, else the host's) into one word read and one word write.
        w_rd_addr, w_rd_en = Signal(len(self.core.rd_addr)), Signal()
        w_wr_addr, w_wr_en, w_wr_data = Signal(len(self.core.wr_addr)), Signal(), Signal(32)
        m.d.comb += [w_rd_addr.eq(self.core.rd_addr), w_rd_en.eq(self.core.rd_en),
                     w_wr_addr.eq(self.core.wr_addr), w_wr_en.eq(self.core.wr_en),
                     w_wr_data.eq(self.core.wr_data)]

        host = self.host
        reading = Signal()
        m.d.sync += reading.eq(0)
        with m.If(host.resp.ready):
            m.d.sync += host.resp.valid.eq(0)
        m.d.comb += host.req.ready.eq(self.host_enable & ~host.resp.valid & ~reading)
        with m.If(host.req.valid & host.req.ready):
            with m.If(host.req.payload.write):
                m.d.comb += [w_wr_addr.eq(host.req.payload.addr), w_wr_data.eq(host.req.payload.data),
                             w_wr_en.eq(1)]
                m.d.sync += host.resp.valid.eq(1)
            with m.Else():
                m.d.comb += [w_rd_addr.eq(host.req.payload.addr), w_rd_en.eq(1)]
                m.d.sync += reading.eq(1)

        # Row-port rotation: lane j <-> bank (addr + j) % lanes.
        wide = self.wide
        rd_rot = Signal(range(max(2, lanes)))         # rd_addr % lanes of the read in flight
        word_bank = Signal(range(max(2, lanes)))      # bank of the word read in flight
        with m.If(wide.rd_en):
            m.d.sync += rd_rot.eq(wide.rd_addr[:shift] if shift else 0)
        with m.If(w_rd_en):
            m.d.sync += word_bank.eq(w_rd_addr[:shift] if shift else 0)
        wr_rot = wide.wr_addr[:shift] if shift else 0
        wr_lane = Array(wide.wr_data[j] for j in range(lanes))
        wr_mask = Array(wide.wr_mask[j] for j in range(lanes))
        bank_data = Array(read.data for read, _ in banks)

        for b, (read, write) in enumerate(banks):
            lane = (b + lanes - wr_rot)[:shift] if shift else 0   # the row lane landing in bank b
            # bank b holds word addr + j from the next bank row when b < addr % lanes (never for
            # the last bank: no constant comparison in the netlist)
            later_rd = (b < wide.rd_addr[:shift]) if b < lanes - 1 else 0
            later_wr = (b < wr_rot) if b < lanes - 1 else 0
            row_rd = (wide.rd_addr >> shift) + later_rd
            if depth & (depth - 1):                   # wrap to the first row (a power of two wraps alone)
                row_rd = Mux(row_rd >= depth, row_rd - depth, row_rd)
            row_wr = (wide.wr_addr >> shift) + later_wr
            m.d.comb += read.en.eq(0)                 # (a read port's en resets to 1)
            with m.If(w_rd_en):
                m.d.comb += [read.addr.eq(w_rd_addr >> shift), read.en.eq(1)]
            with m.Elif(wide.rd_en):
                m.d.comb += [read.addr.eq(row_rd), read.en.eq(1)]
            with m.If(w_wr_en):
                m.d.comb += [write.addr.eq(w_wr_addr >> shift), write.data.eq(w_wr_data),
                             write.en.eq((w_wr_addr[:shift] if shift else 0) == b)]
            with m.Elif(wide.wr_en):
                m.d.comb += [write.addr.eq(row_wr), write.data.eq(wr_lane[lane]),
                             write.en.eq(wr_mask[lane])]
        for j in range(lanes):
            m.d.comb += wide.rd_data[j].eq(bank_data[(rd_rot + j)[:shift] if shift else 0])

        m.d.comb += self.core.rd_data.eq(bank_data[word_bank])
        with m.If(reading):
            m.d.sync += [host.resp.valid.eq(1), host.resp.payload.data.eq(bank_data[word_bank])]
        return m
