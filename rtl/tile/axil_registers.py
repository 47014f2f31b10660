"""An AXI4-Lite register block generated from a :class:`~rtl.tile.register_map.RegisterMap`."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.axi import RESP_OKAY, RESP_SLVERR, AxiLiteSignature
from rtl.common.parameters import parameter_error
from rtl.tile.layouts import host_region_signature
from rtl.tile.register_map import CONST, RO, RW, STROBE, W1C, RegisterMap

__all__ = ["AxilRegisters", "register_shape", "strobe_signature"]


def register_shape(register):
    """The core-side shape of ``register``: a :class:`~amaranth.lib.data.FlexibleLayout` with one
    member per field (at its bit position) if it has fields, else ``unsigned(width)``."""
    if not register.fields:
        return unsigned(register.width)
    return data.FlexibleLayout(register.width, {
        f.name: data.Field(unsigned(f.width), f.lsb) for f in register.fields})


def strobe_signature(register):
    """The port of a ``strobe`` register, from the register block's side: ``stb`` is high for one
    cycle after each host write; ``data`` is the value written in that cycle and 0 in every other
    (so each field is itself a pulse, e.g. ``ctrl.data.start``)."""
    return wiring.Signature({"stb": Out(1), "data": Out(register_shape(register))})


def _port_init(register):
    if not register.fields:
        return register.init
    return {name: value for name, value in register.unpack(register.init).items()}


class AxilRegisters(wiring.Component):
    """The AXI4-Lite subordinate of a register map: every register and region of ``register_map``.

    The host side is one AXI4-Lite port. The core side has one port per register, named after it in
    lower case (``STATUS`` -> ``status``), and one per region; their shapes come from the table, so
    a field ``STATUS.busy`` is ``status.busy``. Nothing here is specific to one block.

    Parameters
    ----------
    register_map : RegisterMap
        The table (for the compute tile, :func:`rtl.tile.register_map.tile_register_map`).

    Interface attributes
    --------------------
    s_axil : ``In(AxiLiteSignature(addr_bits=register_map.addr_bits))``
        The host port (manager -> this block). ``AWPROT``/``ARPROT`` are ignored.
    irq : ``Out(1)``
        High while any bit of a ``w1c`` register is set and enabled by its ``irq_enable`` register
        (``IRQ_STATUS & IRQ_ENABLE != 0``); a combination of registers, level-sensitive.
    <register> : per access kind, with ``shape`` = :func:`register_shape` (a
        :class:`~amaranth.lib.data.FlexibleLayout` of the fields, or ``unsigned(width)``)

        * ``const``: no port; reads give the table's value.
        * ``ro``: ``In(shape)``; a read samples it (in the cycle the read is decoded).
        * ``rw``: ``Out(shape)``, the register itself, the table's ``init`` after reset; a host
          write changes it at the end of the cycle it is decoded in.
        * ``w1c``: ``In(shape)``: set pulses; each cycle, the bits high here are set. A host write
          clears the bits written as 1; a set and a clear of one bit in the same cycle leave it set.
        * ``strobe``: ``Out(strobe_signature(register))``: ``stb`` for one cycle after each write,
          with the written value on ``data`` in that cycle (0 otherwise); reads give 0.
    <region> : ``Out(host_region_signature(words))``
        ``req`` (``Out`` stream of ``addr``: word index in the region, ``write``, ``data``) and
        ``resp`` (``In`` stream of ``data``, the word read; for a write it only acknowledges). The
        AXI response waits for ``resp``, so the core may take any number of cycles; every request
        must get exactly one response.

    Transactions
    ------------
    The map is word-only: a write whose ``WSTRB`` is not ``0b1111`` is refused with ``SLVERR`` and
    changes nothing. An address that hits no register and no region word is refused with
    ``SLVERR`` (a read returns 0, a write does nothing); a read of a ``strobe`` register returns 0
    and a write to a ``const`` or ``ro`` register is ignored, both with ``OKAY``. The two low
    address bits are ignored. AW and W are accepted independently (either
    order, or together) and held until the write is answered; one read and one write are held at a
    time, and they are executed one after the other (alternating when both wait), so reads and
    writes to the same region never overlap.

    Latency and throughput
    ----------------------
    Counting from the cycle of the AR handshake (or the later of the AW and W handshakes): a
    register read has ``RVALID`` 2 cycles later (an ``ro`` port is sampled 1 cycle later), a
    register write ``BVALID`` 2 cycles later, in the cycle the new value (or a strobe's pulse, or a
    clear) appears on the core's port. The next request on that
    channel is accepted in the cycle after the R (B) handshake: one register access per 3 cycles
    per channel at full rate, and reads and writes interleave. A region access puts ``req`` up 2
    cycles after the handshake, holds it until accepted, takes ``resp`` from the cycle after, and
    answers on R (B) in the cycle after the response transfer: 4 cycles for a core that accepts
    and answers at once.
    """

    def __init__(self, register_map):
        if not isinstance(register_map, RegisterMap):
            raise parameter_error(self, TypeError, f"register_map must be a RegisterMap, "
                                  f"got {register_map!r}")
        self._map = register_map
        members = {
            "s_axil": In(AxiLiteSignature(addr_bits=register_map.addr_bits)),
            "irq": Out(1),
        }
        for reg in register_map.registers:
            shape = register_shape(reg)
            if reg.access in (RO, W1C):
                members[reg.port_name] = In(shape)
            elif reg.access == RW:
                members[reg.port_name] = Out(shape, init=_port_init(reg))
            elif reg.access == STROBE:
                members[reg.port_name] = Out(strobe_signature(reg))
        for region in register_map.regions:
            members[region.port_name] = Out(host_region_signature(region.words))
        super().__init__(members)

    register_map = property(lambda self: self._map)

    def elaborate(self, platform):
        m = Module()
        bus = self.s_axil
        addr_bits = self._map.addr_bits

        # -- request holding registers: AW, W and AR each hold one request until it is answered ----
        aw_full, w_full, ar_full = Signal(), Signal(), Signal()
        aw_addr, ar_addr = Signal(addr_bits), Signal(addr_bits)
        w_data, w_strb = Signal(32), Signal(4)
        m.d.comb += [bus.awready.eq(~aw_full), bus.wready.eq(~w_full), bus.arready.eq(~ar_full)]
        with m.If(bus.awvalid & ~aw_full):
            m.d.sync += [aw_full.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(bus.arvalid & ~ar_full):
            m.d.sync += [ar_full.eq(1), ar_addr.eq(bus.araddr)]

        # -- choose the next transaction (in the idle state) ---------------------------------------
        idle = Signal()
        write_first = Signal()          # alternate when a read and a write both wait
        pick_write = Signal()
        pick_read = Signal()
        want_write = aw_full & w_full
        m.d.comb += [
            pick_write.eq(idle & want_write & (~ar_full | write_first)),
            pick_read.eq(idle & ar_full & ~pick_write),
        ]
        with m.If(pick_write):
            m.d.sync += write_first.eq(0)
        with m.If(pick_read):
            m.d.sync += write_first.eq(1)

        # -- address decoding ----------------------------------------------------------------------
        addr = Signal(addr_bits)
        m.d.comb += addr.eq(Mux(pick_write, aw_addr, ar_addr))
        reg_hit = {}
        for reg in self._map.registers:
            reg_hit[reg.name] = hit = Signal(name=f"hit_{reg.port_name}")
            m.d.comb += hit.eq(addr[2:] == reg.offset >> 2)
        region_hit = {}
        region_index = {}
        for region in self._map.regions:
            region_hit[region.name] = hit = Signal(name=f"hit_{region.port_name}")
            index = addr[2:region.window_bits]
            in_window = addr[region.window_bits:] == region.offset >> region.window_bits
            if region.words < region.window // 4:
                in_window = in_window & (index < region.words)
            m.d.comb += hit.eq(in_window)
            region_index[region.name] = index
        any_reg_hit = Cat(*reg_hit.values()).any() if reg_hit else Const(0)
        any_region_hit = Cat(*region_hit.values()).any() if region_hit else Const(0)
        strobe_ok = w_strb == 0b1111
        reg_write = Signal()            # a register write takes effect in this cycle
        m.d.comb += reg_write.eq(pick_write & strobe_ok & any_reg_hit)

        # -- registers -----------------------------------------------------------------------------
        read_terms = []                 # the word read: OR of (hit ? value : 0)
        irq_terms = []
        w1c_state = {}
        for reg in self._map.registers:
            hit = reg_hit[reg.name]
            we = reg_write & hit
            written = w_data & reg.mask
            if reg.access == CONST:
                value = Const(reg.init, 32)
            elif reg.access == RO:
                value = Value.cast(getattr(self, reg.port_name)) & reg.mask
            elif reg.access == RW:
                port = Value.cast(getattr(self, reg.port_name))
                with m.If(we):
                    m.d.sync += port.eq(written)
                value = port
            elif reg.access == W1C:
                state = Signal(reg.width, name=f"{reg.port_name}_state")
                w1c_state[reg.name] = state
                set_bits = Value.cast(getattr(self, reg.port_name)) & reg.mask
                clear_bits = Mux(we, written, 0)
                m.d.sync += state.eq((state & ~clear_bits) | set_bits)
                value = state
            else:                       # STROBE: write-only
                port = getattr(self, reg.port_name)
                m.d.sync += [port.stb.eq(we), Value.cast(port.data).eq(Mux(we, written, 0))]
                value = None
            if value is not None:
                read_terms.append(Mux(hit, value, 0))
        for reg in self._map.registers:
            if reg.access == W1C:
                state = w1c_state[reg.name]
                if reg.irq_enable is not None:
                    enable = Value.cast(getattr(self, self._map[reg.irq_enable].port_name))
                    irq_terms.append((state & enable).any())
                else:
                    irq_terms.append(state.any())
        m.d.comb += self.irq.eq(Cat(*irq_terms).any() if irq_terms else 0)
        read_value = Signal(32)
        m.d.comb += read_value.eq(_or_all(read_terms, 32))

        # -- regions -------------------------------------------------------------------------------
        regions = self._map.regions
        region_sel = Signal(max(1, len(regions)))      # one-hot: the region being accessed
        req_addr = Signal(max((r.window_bits - 2 for r in regions), default=1) or 1)
        req_write = Signal()
        req_data = Signal(32)
        req_ready = Signal()
        resp_valid = Signal()
        resp_data = Signal(32)
        in_req, in_wait = Signal(), Signal()
        for i, region in enumerate(regions):
            port = getattr(self, region.port_name)
            m.d.comb += [
                port.req.valid.eq(in_req & region_sel[i]),
                port.req.payload.addr.eq(req_addr),
                port.req.payload.write.eq(req_write),
                port.req.payload.data.eq(req_data),
                port.resp.ready.eq(in_wait & region_sel[i]),
            ]
        m.d.comb += [
            req_ready.eq(_or_all([getattr(self, r.port_name).req.ready & region_sel[i]
                                  for i, r in enumerate(regions)], 1)),
            resp_valid.eq(_or_all([getattr(self, r.port_name).resp.valid & region_sel[i]
                                   for i, r in enumerate(regions)], 1)),
            resp_data.eq(_or_all([Mux(region_sel[i], getattr(self, r.port_name).resp.payload.data, 0)
                                  for i, r in enumerate(regions)], 32)),
        ]

        # -- the transaction engine ----------------------------------------------------------------
        rdata = Signal(32)
        resp = Signal(2)
        is_write = Signal()
        m.d.comb += [bus.rdata.eq(rdata), bus.rresp.eq(resp), bus.bresp.eq(resp)]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                with m.If(pick_read | pick_write):
                    m.d.sync += is_write.eq(pick_write)
                    region_ok = any_region_hit & (pick_read | strobe_ok)
                    with m.If(region_ok):
                        m.d.sync += [
                            region_sel.eq(Cat(*region_hit.values()) if regions else 0),
                            req_addr.eq(_or_all([Mux(region_hit[r.name], region_index[r.name], 0)
                                                 for r in regions], len(req_addr))),
                            req_write.eq(pick_write),
                            req_data.eq(Mux(pick_write, w_data, 0)),
                        ]
                        m.next = "REQ"
                    with m.Else():
                        ok = any_reg_hit & (pick_read | strobe_ok)
                        m.d.sync += [rdata.eq(Mux(pick_read, read_value, 0)),
                                     resp.eq(Mux(ok, RESP_OKAY, RESP_SLVERR))]
                        with m.If(pick_write):
                            m.next = "B"
                        with m.Else():
                            m.next = "R"
            with m.State("REQ"):
                m.d.comb += in_req.eq(1)
                with m.If(req_ready):
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += in_wait.eq(1)
                with m.If(resp_valid):
                    m.d.sync += [rdata.eq(Mux(is_write, 0, resp_data)), resp.eq(RESP_OKAY)]
                    with m.If(is_write):
                        m.next = "B"
                    with m.Else():
                        m.next = "R"
            with m.State("R"):
                m.d.comb += bus.rvalid.eq(1)
                with m.If(bus.rready):
                    m.d.sync += ar_full.eq(0)
                    m.next = "IDLE"
            with m.State("B"):
                m.d.comb += bus.bvalid.eq(1)
                with m.If(bus.bready):
                    m.d.sync += [aw_full.eq(0), w_full.eq(0)]
                    m.next = "IDLE"
        return m


def _or_all(values, width):
    """The bitwise OR of ``values`` (0 when there are none), ``width`` bits."""
    out = Const(0, width)
    for value in values:
        out = out | value
    return out[:width]
