"""Synthesizable traffic checker: consumes a node's received packets, checks them and measures latency."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.common.xorshift import start_state, xorshift64_next
from sim_models.noc_traffic import CHECKER, HIST_BINS, TS_BITS, node_key

from .arbiter import lowest_one
from .layouts import traffic_config_layout, traffic_tag_layout
from .traffic_generator import check_traffic_params, salt_of

__all__ = ["TrafficChecker", "traffic_status_layout"]


def traffic_status_layout():
    """What every node reports after a run (generator and checker counters)."""
    return data.StructLayout({
        "created": 32, "overflow": 16, "idle": 1,
        "window_words": 32, "packets": 32, "measured": 32, "latency_sum": 48, "latency_max": TS_BITS,
        "signature": 32, "corrupted": 16, "duplicated": 16, "reordered": 16,
    })


def _saturating_increment(m, counter, condition):
    with m.If(condition & ~counter.all()):
        m.d.sync += counter.eq(counter + 1)


class TrafficChecker(wiring.Component):
    """The packet sink of node ``(x, y)`` of a ``kx`` by ``ky`` mesh (contract: ``sim_models.noc_traffic``).

    Takes at most one word per cycle from the ``rx`` streams (the lowest class offering one at or
    above a rotating priority), except in random stall cycles, and checks and counts every packet.

    Interface attributes
    --------------------
    config : In(traffic_config_layout)
    load : In(1)
        Start a run: load the random state, clear counters and the per-flow order records.
    clear, clear_addr : In
        Zero histogram bin ``clear_addr`` (the mesh sweeps all bins before a run starts).
    mixed_seed : In(64); running, window : In(1); now : In(32)
        As for :class:`~rtl.noc.traffic_generator.TrafficGenerator`: ``running`` enables the checker,
        ``window`` marks the measurement window.
    rx : In(stream.Signature(message_layout)).array(classes)
        From the network interface.
    status : Out(traffic_status_layout)
        The checker's counters (``created``, ``overflow``, ``idle`` are left 0 for the generator's).
    hist_addr : In(range(HIST_BINS)); hist_data : Out(16)
        Read one latency histogram bin (combinational).

    Latency and throughput
    ----------------------
    One word per cycle in all; the counters of a packet update the cycle after its last word.
    """

    def __init__(self, params, x, y, kx, ky):
        check_traffic_params(self, params)
        if not (0 <= x < kx and 0 <= y < ky):
            raise parameter_error(self, ValueError, f"node ({x}, {y}) is outside the {kx}x{ky} mesh")
        self._params, self._x, self._y, self._kx, self._ky = params, x, y, kx, ky
        msg = stream.Signature(params.message_layout)
        super().__init__({
            "config": In(traffic_config_layout(params)),
            "load": In(1),
            "clear": In(1),
            "clear_addr": In(range(HIST_BINS)),
            "mixed_seed": In(64),
            "running": In(1),
            "window": In(1),
            "now": In(32),
            "rx": In(msg).array(params.classes),
            "status": Out(traffic_status_layout()),
            "hist_addr": In(range(HIST_BINS)),
            "hist_data": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        C = p.classes
        cfg = self.config
        st = self.status

        # Stall draw.
        state = Signal(64, name="state")
        r = Signal(64, name="r")
        m.d.comb += r.eq(xorshift64_next(state))
        with m.If(self.load):
            key = node_key(self._y * self._kx + self._x, CHECKER)
            m.d.sync += state.eq(start_state(self.mixed_seed, key))
        with m.Elif(self.running):
            m.d.sync += state.eq(r)
        stalled = Signal(name="stalled")
        m.d.comb += stalled.eq(r[:16] < cfg.stall)

        # Which class gives a word this cycle.
        valids = Signal(C, name="valids")
        prio = Signal(C, init=(1 << C) - 1, name="prio")
        take = Signal(C, name="take")
        m.d.comb += valids.eq(Cat(*(self.rx[c].valid for c in range(C))))
        masked = valids & prio
        with m.If(self.running & ~stalled):
            m.d.comb += take.eq(Mux(masked.any(), lowest_one(masked), lowest_one(valids)))
        for c in range(C):
            m.d.comb += self.rx[c].ready.eq(take[c])
        with m.If(take.any()):
            m.d.sync += prio.eq(~(take | (take - 1))[:C])

        # The word taken.
        word = Signal(p.message_layout, name="word")
        cls = Signal(p.class_bits, name="word_cls")
        for c in range(C):
            with m.If(take[c]):
                m.d.comb += [word.eq(self.rx[c].payload), cls.eq(c)]
        got = take.any()

        # Per-class packet state.
        open_ = [Signal(name=f"open{c}") for c in range(C)]
        count = [Signal(5, name=f"count{c}") for c in range(C)]
        held = [Signal(p.width, name=f"held{c}") for c in range(C)]
        bad = [Signal(name=f"bad{c}") for c in range(C)]
        header = Signal(p.width, name="header")
        n_words = Signal(5, name="n_words")
        bad_now = Signal(name="bad_now")
        word_hdr = data.View(p.header_layout, word.data)
        for c in range(C):
            with m.If(take[c]):
                with m.If(~open_[c]):
                    m.d.comb += [
                        header.eq(word.data), n_words.eq(1),
                        bad_now.eq((word_hdr.dest_x != self._x) | (word_hdr.dest_y != self._y) |
                                   (word_hdr.mclass != c) | (word_hdr.length != cfg.length)),
                    ]
                with m.Else():
                    m.d.comb += [
                        header.eq(held[c]), n_words.eq(count[c] + (count[c] != 16)),
                        bad_now.eq(bad[c] | (word.data != (held[c] ^ salt_of(count[c], p.width)))),
                    ]
        bad_pkt = Signal(name="bad_pkt")
        m.d.comb += bad_pkt.eq(bad_now | (word.last != (n_words == cfg.length)))
        for c in range(C):
            with m.If(take[c]):
                m.d.sync += [open_[c].eq(~word.last), held[c].eq(header), count[c].eq(n_words),
                             bad[c].eq(bad_pkt)]

        # Packet accounting at the last word.
        hdr = data.View(p.header_layout, header)
        tag = data.View(traffic_tag_layout(), hdr.user[:traffic_tag_layout().size])
        tail = Signal(name="tail")
        m.d.comb += tail.eq(got & word.last)
        src_index = Signal(32, name="src_index")
        m.d.comb += src_index.eq(hdr.src_y * self._kx + hdr.src_x)

        flow_bits = 2 * p.coord_bits + p.class_bits
        m.submodules.last_seq = seq_mem = Memory(shape=16, depth=1 << flow_bits, init=[])
        seq_w = seq_mem.write_port()
        seq_r = seq_mem.read_port(domain="comb")
        seen = Signal(1 << flow_bits, name="seen")
        flow = Signal(flow_bits, name="flow")
        m.d.comb += [flow.eq(Cat(cls, hdr.src_x, hdr.src_y)), seq_r.addr.eq(flow), seq_w.addr.eq(flow),
                     seq_w.data.eq(tag.seq)]
        ahead = Signal(16, name="ahead")
        was_seen = Signal(name="was_seen")
        m.d.comb += [ahead.eq(tag.seq - seq_r.data), was_seen.eq(seen.bit_select(flow, 1))]
        dup = Signal(name="dup")
        old = Signal(name="old")
        m.d.comb += [dup.eq(tail & was_seen & (ahead == 0)), old.eq(tail & was_seen & ahead[15]),
                     seq_w.en.eq(tail & ~dup & ~old)]

        latency = Signal(TS_BITS, name="latency")
        m.d.comb += latency.eq(self.now[:TS_BITS] - tag.ts)
        measured = Signal(name="measured_tail")
        m.d.comb += measured.eq(tail & tag.measured)

        m.submodules.histogram = hist = Memory(shape=16, depth=HIST_BINS, init=[])
        hw = hist.write_port()
        hr = hist.read_port(domain="comb")
        hout = hist.read_port(domain="comb")
        b = Signal(range(HIST_BINS), name="bin")
        shifted = latency >> cfg.hist_shift
        m.d.comb += [
            b.eq(Mux(shifted >= HIST_BINS - 1, HIST_BINS - 1, shifted)),
            hr.addr.eq(b),
            hout.addr.eq(self.hist_addr), self.hist_data.eq(hout.data),
        ]
        with m.If(self.clear):
            m.d.comb += [hw.addr.eq(self.clear_addr), hw.data.eq(0), hw.en.eq(1)]
        with m.Else():
            m.d.comb += [hw.addr.eq(b), hw.data.eq(hr.data + (hr.data != 0xFFFF)), hw.en.eq(measured)]

        with m.If(self.load):
            m.d.sync += [st.window_words.eq(0), st.packets.eq(0), st.measured.eq(0), st.latency_sum.eq(0),
                         st.latency_max.eq(0), st.signature.eq(0), st.corrupted.eq(0), st.duplicated.eq(0),
                         st.reordered.eq(0), seen.eq(0)]
        with m.Else():
            with m.If(got & self.window):
                m.d.sync += st.window_words.eq(st.window_words + 1)
            with m.If(tail):
                m.d.sync += [st.packets.eq(st.packets + 1),
                             st.signature.eq(st.signature + Cat(tag.seq, cls, src_index)[:32]),
                             seen.eq(seen | (1 << flow))]
            with m.If(measured):
                m.d.sync += [st.measured.eq(st.measured + 1), st.latency_sum.eq(st.latency_sum + latency)]
                with m.If(latency > st.latency_max):
                    m.d.sync += st.latency_max.eq(latency)
            _saturating_increment(m, st.corrupted, tail & bad_pkt)
            _saturating_increment(m, st.duplicated, dup)
            _saturating_increment(m, st.reordered, old)
        return m
