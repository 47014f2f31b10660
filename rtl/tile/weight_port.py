"""Weight port of the compute tile: an AXI4 read manager that streams byte ranges of weight memory."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.axi import BURST_INCR, Axi4ReadSignature
from rtl.common.credited_buffer import CreditedBuffer
from rtl.common.parameters import check_positive_int, parameter_error

__all__ = ["WeightPort", "BurstIssuer", "request_layout", "beat_layout", "ARCACHE", "ARPROT"]

#: ``ARCACHE`` of every burst: normal non-cacheable bufferable memory (weights are read-only data).
ARCACHE = 0b0011
#: ``ARPROT`` of every burst: unprivileged, secure, data access.
ARPROT = 0b000

_BOUNDARY = 4096            # AXI: no burst crosses a 4 KiB boundary


def request_layout(*, addr_bits=40, length_bits=32):
    """Payload of :attr:`WeightPort.req`: one contiguous byte range ``[addr, addr + length)``."""
    return data.StructLayout({"addr": addr_bits, "length": length_bits})


def beat_layout(*, data_bytes=8):
    """Payload of :attr:`WeightPort.o`: ``data_bytes`` bytes, little-endian, and the range's ``last``."""
    return data.StructLayout({"data": 8 * data_bytes, "last": 1})


class WeightPort(wiring.Component):
    """Streams byte ranges of an external memory, read through an AXI4 read manager port.

    A request names a byte range; the port reads it with INCR bursts and delivers its bytes on
    ``o`` in order, realigned so that the first beat starts exactly at the range's first byte. A
    real memory controller, an HBM model or an AXI interconnect can sit behind ``m_axi``.

    Parameters
    ----------
    data_bytes : int
        Bytes per beat, on ``o`` and on the AXI data bus: a power of two from 4 to 128.
    addr_bits : int
        AXI address width, 12 to 64.
    max_burst : int
        Longest burst in beats, 1 to 256, and at most ``4096 // data_bytes`` (a longer one could
        never be issued: bursts also stop at every 4 KiB boundary).
    max_outstanding : int
        Bursts in flight at most (at least 1).
    length_bits : int
        Width of a request's ``length`` (3 to 64).

    Interface attributes
    --------------------
    req : ``In(stream.Signature(request_layout(addr_bits=, length_bits=)))``
        ``{addr, length}``: the byte range ``[addr, addr + length)``. ``addr`` and ``length`` must be
        multiples of 4 and ``length`` at least 4; anything else is the caller's bug and its result
        is undefined (the port does not check: the sequencer checks before it issues). Requests
        are served in order and pipelined: the next one is accepted in the cycle the current one
        issues its last burst, while the data of earlier ones is still arriving.
    o : ``Out(stream.Signature(beat_layout(data_bytes=)))``
        ``{data, last}``: the range's bytes in order, byte ``addr + k`` in bits ``8k % (8 *
        data_bytes)`` up of beat ``k // data_bytes`` (little-endian), whatever the alignment of
        ``addr``. A range of ``L`` bytes gives ``ceil(L / data_bytes)`` beats; its last beat has
        ``last`` = 1 and zeros beyond the range. ``o.valid`` and ``o.payload`` are registers.
    m_axi : ``Out(Axi4ReadSignature(addr_bits=, data_bits=8 * data_bytes, id_bits=1))``
        The AXI4 read manager. Bursts are INCR with ``ARSIZE`` = log2(``data_bytes``), start at a
        ``data_bytes``-aligned address, are at most ``max_burst`` beats long and never cross a
        4 KiB boundary. ``ARID`` is always 0 (responses arrive in order); ``ARCACHE`` = 0b0011
        (normal non-cacheable bufferable), ``ARPROT`` = 0b000 (unprivileged, secure, data).
        ``ARVALID`` and the AR payload are registers, held until ``ARREADY``. ``RREADY`` is always
        high: a burst is issued only when the read-data buffer has room reserved for every one of
        its beats, so a stalled ``o`` holds back new bursts, never the R channel.
    error : ``Out(1)``
        Sticky until reset or ``clear_error``: some beat answered ``RRESP`` = SLVERR or DECERR. The
        range it belongs to still completes with its beats (as the memory sent them), so nothing
        hangs.
    clear_error : ``In(1)``
        Clears ``error`` (the tile pulses it when a run starts, with nothing in flight); an error
        beat in the same cycle wins.
    busy : ``Out(1)``
        A request has been accepted and its last beat has not yet left on ``o``.

    Structure
    ---------
    A burst generator (:class:`BurstIssuer`) splits the current range into bursts (at most
    ``max_burst`` beats, cut at 4 KiB boundaries) and issues one per cycle, each only while fewer
    than ``max_outstanding`` bursts are in flight (from issue to the ``RLAST`` beat) and the
    read-data buffer has room for all its beats (credits: ``buffer_depth`` at reset, one spent per
    beat requested, one regained per beat leaving the buffer). The read-data buffer is a
    :class:`CreditedBuffer` of ``buffer_depth = max_outstanding * max_burst`` beats (block RAM). A
    descriptor FIFO of ``max_outstanding + 2`` ranges tells the realigner each range's word
    offset, beat count and last-beat length; the realigner keeps the previous AXI beat and selects
    ``data_bytes / 4`` words of each pair of consecutive beats (a 4-byte-granular shifter).

    Latency and throughput
    ----------------------
    Latency: with the request accepted in cycle ``t``, ``ARVALID`` rises in cycle ``t + 2``; if the
    memory accepts the burst at once and answers ``latency`` cycles after accepting it, the first
    beat is on ``o`` in cycle ``t + latency + 5`` (``t + latency + 6`` when ``addr`` is not a
    multiple of ``data_bytes``: the first beat then needs two AXI beats).

    Throughput, with a memory that accepts every burst and answers one beat per cycle after its
    latency, and ``o`` always ready (figures measured and asserted in
    ``tests/rtl/tile/test_weight_port.py``):

    * ranges starting on a ``data_bytes`` boundary: one beat per cycle on ``o``, with no gap between
      consecutive ranges, while ``latency <= (max_outstanding - 1) * max_burst - 3`` (45 cycles by
      default: the buffer entries of a burst are reserved from its issue until its last beat
      leaves the buffer, ``latency + max_burst + 3`` cycles). Beyond that, about
      ``max_outstanding * max_burst / (latency + max_burst + 3)`` beats per cycle (0.82 at 60);
    * a range starting off a ``data_bytes`` boundary costs one cycle more (its first AXI beat gives
      no ``o`` beat), unless the range before it also started off a boundary and ended with a beat
      made of its last AXI beat alone (the two steps then share a cycle);
    * short ranges (one burst each) are bounded by ``max_outstanding`` bursts in flight: a burst
      holds its slot from issue to its ``RLAST`` beat, ``latency + beats + 1`` cycles. One-beat
      ranges leave at ``min(1, max_outstanding / (latency + 2))`` per cycle: back to back, with no
      gap, up to latency 2 by default; 4 per 7 cycles at latency 5.

    The realigner itself reads one AXI beat and writes one ``o`` beat per cycle; the stalls of a
    slower memory or of ``o`` simply pass through (a stalled ``o`` stops new bursts once the
    buffer's room is all reserved, never ``RREADY``).
    """

    def __init__(self, *, data_bytes=8, addr_bits=40, max_burst=16, max_outstanding=4, length_bits=32):
        check_positive_int(self, "data_bytes", data_bytes, minimum=4)
        if data_bytes > 128 or data_bytes & (data_bytes - 1):
            raise parameter_error(self, ValueError,
                                  f"data_bytes must be a power of two from 4 to 128, got {data_bytes!r}")
        check_positive_int(self, "addr_bits", addr_bits, minimum=12)
        if addr_bits > 64:
            raise parameter_error(self, ValueError, f"addr_bits must be from 12 to 64, got {addr_bits!r}")
        check_positive_int(self, "max_burst", max_burst)
        if max_burst > min(256, _BOUNDARY // data_bytes):
            raise parameter_error(self, ValueError,
                                  f"max_burst must be at most {min(256, _BOUNDARY // data_bytes)} (256 "
                                  f"beats, and no more than 4 KiB of {data_bytes}-byte beats), got "
                                  f"{max_burst!r}")
        check_positive_int(self, "max_outstanding", max_outstanding)
        check_positive_int(self, "length_bits", length_bits, minimum=3)
        if length_bits > 64:
            raise parameter_error(self, ValueError, f"length_bits must be from 3 to 64, got {length_bits!r}")
        self._data_bytes = data_bytes
        self._addr_bits = addr_bits
        self._max_burst = max_burst
        self._max_outstanding = max_outstanding
        self._length_bits = length_bits
        super().__init__({
            "req": In(stream.Signature(request_layout(addr_bits=addr_bits, length_bits=length_bits))),
            "o": Out(stream.Signature(beat_layout(data_bytes=data_bytes))),
            "m_axi": Out(Axi4ReadSignature(addr_bits=addr_bits, data_bits=8 * data_bytes, id_bits=1)),
            "error": Out(1),
            "clear_error": In(1),
            "busy": Out(1),
        })

    data_bytes = property(lambda self: self._data_bytes)
    addr_bits = property(lambda self: self._addr_bits)
    max_burst = property(lambda self: self._max_burst)
    max_outstanding = property(lambda self: self._max_outstanding)
    length_bits = property(lambda self: self._length_bits)
    #: Beats the read-data buffer holds: every beat of every burst in flight.
    buffer_depth = property(lambda self: self._max_outstanding * self._max_burst)
    #: Ranges the descriptor FIFO holds (accepted, not yet taken by the realigner).
    descriptor_depth = property(lambda self: self._max_outstanding + 2)

    def elaborate(self, platform):
        m = Module()
        db = self._data_bytes
        size = db.bit_length() - 1                 # ARSIZE = log2(data_bytes)
        words = db // 4                            # 4-byte words per beat
        # log2(words); at least one bit, so that 4-byte beats make no zero-width signals (their word
        # offsets and counts are simply always 0).
        word_bits = max(1, size - 2)
        max_length = (1 << self._length_bits) - 4  # longest range a request can name
        max_beats = -(-max_length // db)           # o beats of the longest range
        max_axi_beats = max_beats + 1              # AXI beats of the longest range
        max_burst = self._max_burst
        depth = self.buffer_depth
        axi = self.m_axi

        # --- Descriptor of a range, computed from the request as it is accepted ---------------------
        desc_layout = data.StructLayout({
            "off": word_bits,                      # word offset of addr within its beat
            "last_words": word_bits,               # words in the last o beat, minus 1
            "beats_m1": range(max(2, max_beats)),  # o beats, minus 1
            "extra": 1,                            # the range spans one more AXI beat than o beats
        })
        addr = self.req.payload.addr
        length_m1 = Signal(self._length_bits)
        desc_in = Signal(desc_layout)
        axi_beats = Signal(range(max_axi_beats + 1))
        m.d.comb += [
            length_m1.eq(self.req.payload.length - 1),
            desc_in.off.eq(addr[2:size]),
            desc_in.last_words.eq(length_m1[2:size]),
            desc_in.beats_m1.eq(length_m1[size:]),
            desc_in.extra.eq((desc_in.off + desc_in.last_words) >= words),
            axi_beats.eq(desc_in.beats_m1 + 1 + desc_in.extra),
        ]
        m.submodules.descriptors = descriptors = fifo.SyncFIFOBuffered(width=desc_layout.size,
                                                                       depth=self.descriptor_depth)

        # --- Burst generator ------------------------------------------------------------------------
        m.submodules.bursts = bursts = BurstIssuer(
            data_bytes=db, addr_bits=self._addr_bits, max_beats=max_axi_beats, max_burst=max_burst,
            max_outstanding=self._max_outstanding, credits=depth)
        m.d.comb += [
            axi.arid.eq(0),
            axi.araddr.eq(bursts.araddr),
            axi.arlen.eq(bursts.arlen),
            axi.arsize.eq(size),
            axi.arburst.eq(BURST_INCR),
            axi.arcache.eq(ARCACHE),
            axi.arprot.eq(ARPROT),
            axi.arvalid.eq(bursts.arvalid),
            bursts.arready.eq(axi.arready),
            axi.rready.eq(1),
        ]

        accept = Signal()
        m.d.comb += [
            bursts.run.valid.eq(self.req.valid & descriptors.w_rdy),
            bursts.run.payload.first.eq(addr[size:]),
            bursts.run.payload.beats.eq(axi_beats),
            self.req.ready.eq(descriptors.w_rdy & bursts.run.ready),
            accept.eq(self.req.valid & self.req.ready),
            descriptors.w_en.eq(accept),
            descriptors.w_data.eq(desc_in),
        ]

        # --- Read-data buffer -----------------------------------------------------------------------
        m.submodules.buffer = buffer = CreditedBuffer(8 * db, depth)
        r_beat = axi.rvalid & axi.rready
        m.d.comb += [buffer.w_en.eq(r_beat), buffer.w_data.eq(axi.rdata)]
        with m.If(r_beat & axi.rresp[1]):            # SLVERR (0b10) or DECERR (0b11)
            m.d.sync += self.error.eq(1)
        with m.Elif(self.clear_error):
            m.d.sync += self.error.eq(0)
        m.d.comb += bursts.burst_done.eq(r_beat & axi.rlast)

        # --- Realigner ------------------------------------------------------------------------------
        beat = buffer.o                            # the next AXI beat
        desc = data.View(desc_layout, descriptors.r_data)
        active = Signal()                          # a range is loaded
        need_prime = Signal()                      # its first AXI beat is still to be read
        shift_m1 = Signal(word_bits)               # o word j is word j + shift_m1 + 1 of (stored, beat)
        last_words = Signal(word_bits)
        in_left = Signal(range(max_axi_beats + 1))   # AXI beats still to read after the prime
        out_left = Signal(range(max_beats + 1))      # o beats still to deliver
        stored = Signal(8 * db)                    # the AXI beat read before

        out_free = Signal()
        prime = Signal()
        combine = Signal()
        flush = Signal()
        emit = Signal()
        finish = Signal()
        load = Signal()
        load_prime = Signal()
        m.d.comb += [
            out_free.eq(~self.o.valid | self.o.ready),
            # The three steps of a range: read its first AXI beat only (when it starts off a beat
            # boundary); read an AXI beat and deliver an o beat; deliver its last o beat from the
            # stored AXI beat alone (when its bytes end before those of the next AXI beat begin).
            prime.eq(active & need_prime & beat.valid),
            combine.eq(active & ~need_prime & (in_left != 0) & beat.valid & out_free),
            flush.eq(active & ~need_prime & (in_left == 0) & out_free),
            emit.eq(combine | flush),
            finish.eq(emit & (out_left == 1)),
            load.eq((~active | finish) & descriptors.r_rdy),
            # A range loaded in a cycle whose step reads no AXI beat may read its first one at once.
            load_prime.eq(load & (desc.off != 0) & ~(prime | combine) & beat.valid),
            descriptors.r_en.eq(load),
            beat.ready.eq(prime | combine | load_prime),
        ]
        m.d.comb += bursts.credit.eq(beat.valid & beat.ready)

        # o word j of a beat is word j + shift_m1 + 1 of the stored AXI beat followed by the new one
        # (shift_m1 = words - 1 for a range aligned to data_bytes: the new beat as it is).
        pair = [Cat(stored, beat.payload).word_select(k, 32) for k in range(2 * words)]
        out_data = []
        for j in range(words):
            word = Array(pair[j + 1:j + 1 + words])[shift_m1] if words > 1 else pair[j + 1]
            if j == 0:                             # a range has at least one word
                out_data.append(word)
                continue
            keep = (out_left != 1) | (j <= last_words)
            out_data.append(Mux(keep, word, 0))

        with m.If(emit):
            m.d.sync += [
                self.o.payload.data.eq(Cat(*out_data)),
                self.o.payload.last.eq(out_left == 1),
                self.o.valid.eq(1),
                out_left.eq(out_left - 1),
            ]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(prime | combine | load_prime):
            m.d.sync += stored.eq(beat.payload)
        with m.If(prime):
            m.d.sync += need_prime.eq(0)
        with m.If(combine):
            m.d.sync += in_left.eq(in_left - 1)

        aligned = desc.off == 0
        with m.If(load):
            m.d.sync += [
                active.eq(1),
                need_prime.eq(~aligned & ~load_prime),
                shift_m1.eq(desc.off - 1),
                last_words.eq(desc.last_words),
                # AXI beats after the prime: all of them for an aligned range.
                in_left.eq(desc.beats_m1 + (desc.extra | aligned)),
                out_left.eq(desc.beats_m1 + 1),
            ]
        with m.Elif(finish):
            m.d.sync += active.eq(0)

        # A range is in the burst generator until its last burst issues, in the descriptor FIFO until
        # the realigner loads it, then in the realigner and the o register. (The FIFO term is
        # redundant today, a descriptor reaching the realigner before the generator goes idle, but
        # keeps busy true should either side's timing change.)
        m.d.comb += self.busy.eq(bursts.busy | (descriptors.r_level != 0) | active | self.o.valid)
        return m


class BurstIssuer(wiring.Component):
    """The burst generator of :class:`WeightPort`: splits runs of beats into AXI4 INCR bursts.

    A run (``first`` beat, ``beats`` count, beats of ``data_bytes`` bytes) is split into bursts of
    at most ``max_burst`` beats that stop at every 4 KiB boundary, issued in order, one per cycle at
    most, each only while fewer than ``max_outstanding`` bursts are in flight (issued, ``RLAST``
    beat not yet transferred) and ``credits`` cover all its beats (one credit per beat of the
    read-data buffer: spent when the burst issues, regained per ``credit`` pulse). Public so that
    its properties can be proven on their own (``verification/formal/tile_weight_port.py``).

    Interface attributes
    --------------------
    run : ``In(stream.Signature({first, beats}))``
        ``first``: beat address (byte address / ``data_bytes``); ``beats``: at least 1. Ready when
        idle and in the cycle the current run issues its last burst.
    arvalid, araddr, arlen : ``Out``
        The AR channel's handshake and burst (registers, held until ``arready``).
    arready : ``In(1)``
    burst_done : ``In(1)``
        An R beat with ``RLAST`` was transferred.
    credit : ``In(1)``
        A read-data buffer entry was freed.
    busy : ``Out(1)``
        A run has bursts left to issue (a register).

    ``in_flight`` (bursts issued, not done) and ``credits_left`` are also attributes, for proofs.
    """

    def __init__(self, *, data_bytes, addr_bits, max_beats, max_burst, max_outstanding, credits):
        self._size = data_bytes.bit_length() - 1
        self._max_burst = max_burst
        self._max_outstanding = max_outstanding
        self._credits = credits
        run_layout = data.StructLayout({"first": addr_bits - self._size, "beats": range(max_beats + 1)})
        super().__init__({
            "run": In(stream.Signature(run_layout)),
            "arvalid": Out(1),
            "araddr": Out(addr_bits),
            "arlen": Out(8),
            "arready": In(1),
            "burst_done": In(1),
            "credit": In(1),
            "busy": Out(1),
        })
        self.in_flight = Signal(range(max_outstanding + 1))
        self.credits_left = Signal(range(credits + 1), init=credits)
        self.left = Signal(range(max_beats + 1))

    def elaborate(self, platform):
        m = Module()
        size = self._size
        max_burst = self._max_burst
        cur = Signal(len(self.run.payload.first))  # next beat to request
        left = self.left                           # beats of the run not yet requested
        in_flight = self.in_flight
        credits = self.credits_left

        page_beats = _BOUNDARY >> size
        to_boundary = Signal(range(page_beats + 1))
        limit = Signal(range(max_burst + 1))
        burst = Signal(range(max_burst + 1))
        issue = Signal()
        last_burst = Signal()
        m.d.comb += [
            to_boundary.eq(page_beats - cur[:12 - size]),
            limit.eq(Mux(to_boundary < max_burst, to_boundary, max_burst)),
            burst.eq(Mux(left < limit, left, limit)),
            issue.eq(self.busy & (~self.arvalid | self.arready) & (in_flight < self._max_outstanding)
                     & (credits >= burst)),
            last_burst.eq(issue & (left <= limit)),
            self.run.ready.eq(~self.busy | last_burst),
        ]
        with m.If(issue):
            m.d.sync += [
                self.araddr.eq(Cat(Const(0, size), cur)),
                self.arlen.eq(burst - 1),
                self.arvalid.eq(1),
                cur.eq(cur + burst),
                left.eq(left - burst),
            ]
        with m.Elif(self.arready):
            m.d.sync += self.arvalid.eq(0)
        with m.If(self.run.valid & self.run.ready):
            m.d.sync += [cur.eq(self.run.payload.first), left.eq(self.run.payload.beats), self.busy.eq(1)]
        with m.Elif(last_burst):
            m.d.sync += self.busy.eq(0)
        m.d.sync += [
            in_flight.eq(in_flight + issue - self.burst_done),
            credits.eq(credits - Mux(issue, burst, 0) + self.credit),
        ]
        return m
