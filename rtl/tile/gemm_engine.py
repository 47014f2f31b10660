"""The tile's GEMM engine: checks a ``GEMM`` instruction, quantizes its activations from the
scratchpad, streams its MX weight from the weight port through the MAC array and writes the results
back."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.dot_product import LUT_PRODUCTS
from rtl.mx.layouts import BLOCK_SIZE, MXBlock, a_beat, b_beat, c_beat
from rtl.mx.mac_array import MacArray
from rtl.mx.quantizer import MXQuantizer, QuantizeMode
from rtl.tile.layouts import (
    SPAD_EA_BITS,
    WEIGHT_ADDR_BITS,
    GemmCommand,
    Status,
    gemm_signature,
    weight_data_layout,
    weight_request_layout,
    wide_port_signature,
)
from sim_models.tile_isa import FORMATS, TileConfig

__all__ = ["GemmEngine", "BLOCK_BYTES"]

BLOCK_BYTES = 17
"""Bytes of one stored E2M1 weight block: 16 bytes of codes, then the E8M0 scale
(``sim_models.tile_weights``); read little-endian they are exactly an
:data:`rtl.mx.layouts.MXBlock`."""

_E2M1 = FORMATS.index("e2m1")


def _step_tiles(m, n_outer, last_m, last_n, *, next_n_tile, next_m_tile, next_row, next_col):
    """The step from one tile to the next, as the tile loop, the A reader and the result writer each
    take it (each with its own position): N-outer, the N-tile's M-tiles one after the other, then
    (``next_n_tile``, after the last M-tile) the next N-tile from the first M-tile; M-outer, the
    M-tile's N-tiles, then (``next_row``) the next M-tile from the first N-tile. Each argument is
    the list of ``sync`` updates of its case."""
    with m.If(n_outer & last_m):
        m.d.sync += next_n_tile
    with m.Elif(n_outer):
        m.d.sync += next_m_tile
    with m.Elif(last_n):
        m.d.sync += next_row
    with m.Else():
        m.d.sync += next_col


class GemmEngine(wiring.Component):
    """Runs one ``GEMM``: the checks of ``docs/tile_isa.md`` in the ISS's order, then the MAC array.

    ``dst (m x n) = quantize_rows(src (m x k), af) @ W`` bit-exactly like
    ``sim_models.tile_iss.TileIss._x_GEMM``: each binary32 row of the activations quantized along
    ``k`` (mode ``floor``), multiplied with the MX weight ``(k, n)`` stored at byte offset ``w`` of
    the weight image (``sim_models.tile_weights`` layout), binary32 results, ``c = +0``.

    Checks, in order (each answers its status without reading or writing anything): ``m``, ``n``
    or ``k`` zero or ``k`` not a multiple of 32, a format code above 4, a format the MAC array does
    not run (anything but E2M1 x E2M1: ``TileConfig.mac_formats``) (``bad_field``); the activations
    ``src + m*k``, then the destination ``dst + m*n`` beyond the scratchpad (``spad_range``); a weight
    offset not a multiple of 4 or ``w + (k/32)*n*17`` beyond ``weight_size`` (``weight_range``).

    Then three activities that overlap:

    1. Quantize: the ``m * k`` activation words are read in order through the scratchpad's row
       port (``32 / lanes`` reads per 32-word block), each block goes through the MX quantizer
       (E2M1, ``floor``) into the A buffer (``spad_words / 32`` blocks of 136 bits: the range
       check guarantees that the whole quantized operand fits). The tiles start as soon as their
       rows are quantized. When ``dst`` overlaps ``src`` no result is written before every
       activation is read, so ``dst`` may overlap ``src`` in any way, as in the ISS.
    2. Tiles: one MAC-array command per (M-tile of ``rows`` rows, N-tile of ``cols * interleave``
       columns), the A beats from the A buffer (rows beyond ``m`` are zero blocks; the A reader
       walks the tiles on its own, ahead of the B beats) and the B beats unpacked from the
       weight's byte stream (17-byte blocks in image order, ``cols`` blocks a beat, up to ``per``
       blocks a cycle, as many as keep up with ``data_bytes``; the columns of a partial last
       N-tile beyond ``n`` are zero blocks). The byte stream is requested from the 4-byte aligned
       address at or below the weight's first byte, its length rounded up to a multiple of 4 (the
       leading and trailing bytes are dropped); the N-tiles lie one after the other in the image,
       so one request serves them all. The B buffer decides the order of the tiles:

       * *resident*, when every N-tile's B beats fit it at once (``k/32 * (n + cols * interleave
         - 1) <= weight_buffer_beats * cols``, a bound on ``k/32 * interleave * N-tiles``): the
         M-tiles are outer, the first M-tile keeps all its B beats and the others replay them,
         so quantizing the next rows overlaps the tiles of the previous ones;
       * *N-outer*, when one N-tile's B beats fit (``k / 32 * interleave <=
         weight_buffer_beats``): the N-tiles are outer and the M-tiles inner, the first M-tile of
         each N-tile keeps its B beats and the others replay them;
       * otherwise the M-tiles are outer and each re-requests and re-streams the weight.

       Both buffered orders stream the weight once per GEMM (one request, as the ISS counts it);
       a replayed tile's beats follow the previous replayed tile's without a gap. Streamed beats
       are offered to the array a k-block (``interleave`` beats) at a time, since a beat missing
       its slot's cycle costs the array a whole round.
    3. Results: concurrently with the tiles, every result beat is written to the destination rows
       it belongs to. ``group`` consecutive result beats of a tile (as many as fill a row-port
       write, ``lanes / cols`` when that divides ``interleave``) are written together, ``rows *
       ceil(group * cols / lanes)`` masked row-port writes, while the next group is gathered;
       rows ``>= m`` and columns ``>= n`` are never written.

    A weight-port error (``werror``, sticky in the port) stops the engine at the next tile boundary
    (the tile's byte range drained to its ``last`` beat, its results written, the A beats read
    ahead for tiles never started dropped) with ``bus_error``.

    Parameters
    ----------
    config : TileConfig, optional
        ``rows``, ``cols``, ``interleave`` (the MAC array), ``lanes`` and ``spad_words`` (the row
        port); ``mac_formats`` must be ``("e2m1",)``, what the array runs.
    data_bytes : int
        Bytes per beat of the weight port's data stream (a power of two, at least 4).
    mac_mapping : ProductMapping or (int, int)
        Where the MAC array builds its element products (``rtl.mx.mac_array.MacArray``'s
        ``mapping``: LUT tables by default; an FPGA build moves some onto multipliers and block RAM).

    Interface attributes
    --------------------
    ctl : ``In(gemm_signature())``
        The sequencer's: one :data:`~rtl.tile.layouts.GemmCommand`, then one status.
    weight_base, weight_size : ``In(40)``
        AXI byte address and size of the weight image; ``w`` is an offset into it.
    wreq : ``Out(stream.Signature(weight_request_layout()))``
        Byte ranges ``{addr, length}`` (both multiples of 4) of the weight memory.
    wdata : ``In(stream.Signature(weight_data_layout(data_bytes)))``
        Their bytes, little-endian, the first beat starting at ``addr``, ``last`` on a range's
        final beat (``ceil(length / data_bytes)`` beats).
    werror : ``In(1)``
        The weight port saw an error response.
    spad : ``Out(wide_port_signature(spad_words, lanes))``
        The scratchpad's row port.

    Resources: the A buffer (``spad_words / 32`` words of 136 bits, block RAM), the B buffer
    (``weight_buffer_beats`` words of ``136 cols`` bits, block RAM; none when 0), an A FIFO of 3
    beats and a B FIFO of ``2 interleave`` beats, two k-blocks (``rows`` and ``cols`` blocks of
    136 bits), the byte unpacker (``34 per + data_bytes`` bytes), the result group registers
    (``(2 group - 1) rows cols`` words), the quantizer (E2M1 only) and the MAC array.

    Timing
    ------
    A fault is answered 2 or 3 cycles after the command. A GEMM takes 3 cycles of checks; then
    the quantizer reads ``m * k / min(lanes, 32)`` cycles (one row-port read a cycle), and the
    tiles follow it: streamed B beats at the weight port's rate (a beat needs ``17 * cols``
    bytes), replayed ones at the array's one a cycle, each tile's beats right after the previous
    one's except where the order turns (a new N-tile when N-outer, the first replayed tile:
    about 4 cycles of set-up); the result writes keep up with the array when ``lanes >= cols``.
    The last tile's results leave after the array's latency. Measured in the Amaranth simulator
    with weight data every cycle (``tests/rtl/tile/test_gemm_engine.py`` checks the first three):
    rows 2, cols 2, interleave 2, lanes 4, 8-byte beats: ``m, k, n = 3, 64, 6`` (2 x 2 tiles) 97
    cycles, ``2, 96, 9`` (1 x 3 tiles) 113 cycles; the default array (4 x 4, interleave 8, lanes
    8), 8-byte beats: ``5, 32, 40`` (2 x 2 tiles, 1,360 weight bytes streamed once) 197 cycles;
    32-byte beats, prefill shapes of 64 rows (``benchmarks/results/gemm_engine.md``): MAC array
    busy 88.5 % of the cycles of ``64, 64, 128`` and 86.7 % of ``64, 128, 64`` (98 % on the 2x2
    tile of ``benchmarks/tile.py``), decode shapes 1.10 to 1.48 times their weight stream. A bus
    error ends the run at the next tile boundary, after the rest of the request's beats are
    dropped.
    """

    def __init__(self, config: TileConfig | None = None, *, data_bytes=8, mac_mapping=LUT_PRODUCTS):
        self.config = TileConfig() if config is None else config
        if not isinstance(data_bytes, int) or data_bytes < 4 or data_bytes & (data_bytes - 1):
            raise parameter_error(self, ValueError, f"data_bytes must be a power of two of at least 4, "
                                  f"got {data_bytes!r}")
        if self.config.mac_formats != ("e2m1",):
            raise parameter_error(self, ValueError, f"the MAC array runs E2M1 x E2M1 only: mac_formats "
                                  f"must be ('e2m1',), got {self.config.mac_formats!r}")
        self.data_bytes = data_bytes
        self.mac_mapping = mac_mapping
        super().__init__({
            "ctl": In(gemm_signature()),
            "weight_base": In(WEIGHT_ADDR_BITS),
            "weight_size": In(WEIGHT_ADDR_BITS),
            "wreq": Out(stream.Signature(weight_request_layout())),
            "wdata": In(stream.Signature(weight_data_layout(data_bytes))),
            "werror": In(1),
            "spad": Out(wide_port_signature(self.config.spad_words, self.config.lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols, slots, lanes = cfg.rows, cfg.cols, cfg.interleave, cfg.lanes
        tile_cols = cols * slots
        db = self.data_bytes
        per_read = min(lanes, BLOCK_SIZE)           # words of a block per row-port read
        reads = BLOCK_SIZE // per_read              # row-port reads per block
        group = 1                                   # result beats written together: as many as
        while group * 2 * cols <= lanes and slots % (group * 2) == 0:  # fill a row-port write
            group *= 2
        wparts = -(-(group * cols) // lanes)        # row-port writes per row of a group
        depth = max(1, cfg.spad_words // BLOCK_SIZE)
        block_bits = MXBlock.size

        m.submodules.quantizer = quant = MXQuantizer("fp32", ("e2m1",))
        m.submodules.array = mac = MacArray(rows, cols, interleave=slots, mapping=self.mac_mapping)
        m.submodules.abuf = abuf = Memory(shape=block_bits, depth=depth, init=[])
        ab_wr, ab_rd = abuf.write_port(), abuf.read_port()
        m.d.comb += ab_rd.en.eq(0)                  # read only when asked (en resets to 1)
        m.submodules.afifo = afifo = SyncFIFOBuffered(width=rows * block_bits, depth=3)
        purge = Signal()                            # empty the A FIFO (after a bus error)
        bfifo_depth = 2 * slots                     # a k-block streaming in while one drains
        m.submodules.bfifo = bfifo = SyncFIFOBuffered(width=cols * block_bits, depth=bfifo_depth)
        bdepth = cfg.weight_buffer_beats
        if bdepth:                                  # the B buffer: one N-tile's B beats, kept
            m.submodules.bbuf = bbuf = Memory(shape=cols * block_bits, depth=bdepth, init=[])
            bb_wr, bb_rd = bbuf.write_port(), bbuf.read_port()
            m.d.comb += bb_rd.en.eq(0)
        m.d.comb += [mac.a.valid.eq(afifo.r_rdy), mac.a.payload.eq(afifo.r_data),
                     afifo.r_en.eq(mac.a.ready | purge),
                     mac.b.payload.eq(bfifo.r_data), bfifo.r_en.eq(mac.b.ready)]

        # -- the command and its checks -------------------------------------------------------------
        c = Signal(GemmCommand)
        kb = c.k[5:]                                # k-blocks
        src_end = Signal(SPAD_EA_BITS + 29)
        dst_end = Signal(SPAD_EA_BITS + 33)
        w_end = Signal(len(c.w) + 1)
        total = Signal(24)                          # blocks of the activations (m * k / 32)
        kb_bytes = Signal(16)                       # bytes of one column of the weight (k/32 * 17)
        resident_need = Signal(48)                  # kb * (n + tile_cols - 1), at least kb *
        m.d.sync += resident_need.eq(kb * (c.n + tile_cols - 1))  # slots * N-tiles * cols
        m.d.sync += [src_end.eq(c.src + c.m * c.k), dst_end.eq(c.dst + c.m * c.n),
                     w_end.eq(c.w + kb * c.n * BLOCK_BYTES), total.eq(c.m * kb),
                     kb_bytes.eq(kb * BLOCK_BYTES)]
        bad_field = (c.m == 0) | (c.n == 0) | (c.k == 0) | (c.k[:5] != 0) | \
            (c.af >= len(FORMATS)) | (c.wf >= len(FORMATS)) | (c.af != _E2M1) | (c.wf != _E2M1)
        err = Signal()                              # werror seen during this command
        stationary = Signal()                       # an N-tile's weights fit the B buffer: N-tiles
        #                                             outer, M-tiles inner, each weight streamed once
        resident = Signal()                         # every N-tile's weights fit the B buffer at
        #                                             once: M-tiles outer, N-tiles inner, the first
        #                                             M-tile's B beats kept, the others replay them all
        n_outer = stationary & ~resident            # N-tiles outer, M-tiles inner
        replay = Signal()                           # this tile's B beats come from the B buffer
        n_beats = Signal(range(max(2, bdepth + 1)))  # B beats of a tile (kb * slots) when stationary

        # -- phase 1: scratchpad -> quantizer -> A buffer -------------------------------------------
        quantizing = Signal()
        q_addr = Signal(SPAD_EA_BITS)
        q_part = Signal(range(reads))
        q_issued = Signal(24)                       # blocks whose reads are all issued
        q_written = Signal(24)                      # blocks in the A buffer
        tag_valid, tag_part = Signal(), Signal(range(reads))
        gather = Signal(data.ArrayLayout(32, BLOCK_SIZE))
        issue_q = quantizing & (q_issued != total)
        m.d.sync += [tag_valid.eq(issue_q), tag_part.eq(q_part)]
        with m.If(issue_q):
            m.d.comb += [self.spad.rd_addr.eq(q_addr), self.spad.rd_en.eq(1)]
            m.d.sync += q_addr.eq(q_addr + per_read)
            with m.If(q_part == reads - 1):
                m.d.sync += [q_part.eq(0), q_issued.eq(q_issued + 1)]
            with m.Else():
                m.d.sync += q_part.eq(q_part + 1)
        for p in range(reads - 1):
            with m.If(tag_valid & (tag_part == p)):
                m.d.sync += [gather[p * per_read + j].eq(self.spad.rd_data[j]) for j in range(per_read)]
        last_part = (reads - 1) * per_read
        # With o.ready tied high the quantizer's i.ready is always high: no block waits.
        m.d.comb += [
            quant.i.valid.eq(tag_valid & (tag_part == reads - 1)),
            quant.i.payload.mode.eq(QuantizeMode.FLOOR),
            *[quant.i.payload.values[j].eq(gather[j]) for j in range(last_part)],
            *[quant.i.payload.values[last_part + j].eq(self.spad.rd_data[j]) for j in range(per_read)],
            quant.o.ready.eq(1),
        ]
        with m.If(quant.o.valid):
            m.d.comb += [ab_wr.en.eq(1), ab_wr.addr.eq(q_written), ab_wr.data.eq(quant.o.payload)]
            m.d.sync += q_written.eq(q_written + 1)
        with m.If(quantizing & (q_issued == total) & (q_written == total)):
            m.d.sync += quantizing.eq(0)

        # -- phase 2: tiles -------------------------------------------------------------------------
        streaming = Signal()
        mt_row = Signal(13)                         # first row of the M-tile
        n0 = Signal(21)                             # first column of the N-tile
        wt_off = Signal(WEIGHT_ADDR_BITS + 2)       # byte offset of the N-tile in the weight
        w_cols = Signal(range(tile_cols + 1))       # columns of this N-tile
        row_bytes = Signal(36)                      # weight bytes of an M-tile (all its N-tiles)
        full_addr = Signal(WEIGHT_ADDR_BITS + 2)
        skip = Signal(2)
        tiles_fed = Signal(32)
        tiles_written = Signal(32)
        last_n = n0 + tile_cols >= c.n              # the tile loop's N-tile is the request's last
        last_m = mt_row + rows >= c.m               # its M-tile is the last

        # A beats: rows blocks read from the A buffer, one per cycle, then into the A FIFO. The A
        # reader walks the tiles in the order the tile loop below does, on its own: the next tile's
        # A beats wait in the FIFO while the current tile's B beats are still streaming.
        a_on = Signal()                             # tiles left to read
        a_stop = Signal()                           # a bus error: read the issued tiles' beats only
        a_tiles = Signal(32)                        # tiles whose A beats are all started
        a_kk = Signal(16)                           # A beat of the reader's tile
        a_mrow = Signal(13)                         # first row of the reader's tile
        a_n0 = Signal(21)                           # first column of the reader's tile
        a_ptr = Signal(24)                          # A-buffer index of (a_mrow, a_kk)
        a_busy = Signal()
        a_r = Signal(range(max(2, rows)))           # (at least one bit: no zero-width nets)
        a_rd = Signal(24)
        a_row = Signal(13)                          # a_mrow of the beat being read
        a_tag_valid, a_tag_r, a_tag_ok = Signal(), Signal(range(max(2, rows))), Signal()
        a_next = Signal(a_beat(rows))
        # A beat (a_mrow, a_kk) reads blocks a_ptr + r * kb: the quantizer has written them (or is
        # done: rows beyond m read whatever is there and are masked to zero blocks).
        a_span = Signal(24)                         # (rows - 1) * kb
        m.d.sync += a_span.eq(kb * (rows - 1))
        a_ready = ~quantizing | (a_ptr + a_span < q_written)
        a_wanted = a_on & ~(a_stop & (a_tiles == tiles_fed))
        with m.If(a_wanted & ~a_busy & ~a_tag_valid & afifo.w_rdy & a_ready):
            m.d.sync += [a_busy.eq(1), a_r.eq(0), a_rd.eq(a_ptr), a_row.eq(a_mrow)]
            with m.If(a_kk != kb - 1):
                m.d.sync += [a_kk.eq(a_kk + 1), a_ptr.eq(a_ptr + 1)]
            with m.Else():                          # the tile's last beat: on to the next tile
                a_last_m = a_mrow + rows >= c.m
                a_last_n = a_n0 + tile_cols >= c.n
                next_mrow = a_ptr + 1 + a_span      # A-buffer index of row a_mrow + rows, block 0
                m.d.sync += [a_kk.eq(0), a_tiles.eq(a_tiles + 1)]
                _step_tiles(m, n_outer, a_last_m, a_last_n,
                            next_n_tile=[a_mrow.eq(0), a_ptr.eq(0), a_n0.eq(a_n0 + tile_cols),
                                         a_on.eq(~a_last_n)],
                            next_m_tile=[a_mrow.eq(a_mrow + rows), a_ptr.eq(next_mrow)],
                            next_row=[a_n0.eq(0), a_mrow.eq(a_mrow + rows), a_ptr.eq(next_mrow),
                                      a_on.eq(~a_last_m)],
                            next_col=[a_n0.eq(a_n0 + tile_cols), a_ptr.eq(a_ptr + 1 - kb)])
        m.d.sync += a_tag_valid.eq(a_busy)
        with m.If(a_busy):
            m.d.comb += [ab_rd.addr.eq(a_rd), ab_rd.en.eq(1)]
            m.d.sync += [a_tag_r.eq(a_r), a_tag_ok.eq(a_row + a_r < c.m), a_rd.eq(a_rd + kb),
                         a_r.eq(a_r + 1)]
            with m.If(a_r == rows - 1):
                m.d.sync += a_busy.eq(0)
        a_block = Mux(a_tag_ok, ab_rd.data, 0)
        with m.If(a_tag_valid):
            for r in range(rows - 1):
                with m.If(a_tag_r == r):
                    m.d.sync += a_next[r].eq(a_block)
        m.d.comb += [afifo.w_en.eq(a_tag_valid & (a_tag_r == rows - 1)),
                     afifo.w_data.eq(Cat(*[a_next[r] for r in range(rows - 1)], a_block))]

        # B beats: the weight bytes unpacked into 17-byte blocks, cols blocks a beat, ``per``
        # blocks a cycle (enough to keep up with the port's ``db`` bytes a cycle).
        per = 1
        while per * 2 <= cols and cols % (per * 2) == 0 and per * BLOCK_BYTES < db:
            per *= 2
        cap = 2 * per * BLOCK_BYTES + db            # bytes the unpacker holds
        ub = Signal(8 * cap)
        ucount = Signal(range(cap + 1))
        first_beat, seen_last = Signal(), Signal()
        b_j = Signal(range(tile_cols))              # tile column of the next block
        b_c = Signal(range(cols))                   # column of the next block in the beat
        b_kk = Signal(16)                           # k-blocks done
        b_reg = Signal(b_beat(cols))
        b_done = b_kk == kb
        real = [b_j + i < w_cols for i in range(per)]   # columns beyond n are zero blocks
        n_real = Signal(range(per + 1))
        m.d.comb += n_real.eq(sum(real))
        place = streaming & ~replay & ~b_done & (ucount >= n_real * BLOCK_BYTES) & \
            ((b_c != cols - per) | bfifo.w_rdy)
        taken = Signal(range(per + 1))              # blocks taken from the byte stream this cycle
        m.d.comb += taken.eq(Mux(place, n_real, 0))
        blocks = [Mux(real[i], ub[i * block_bits:(i + 1) * block_bits], 0) for i in range(per)]
        with m.If(place):
            with m.If(b_c == cols - per):
                m.d.sync += b_c.eq(0)
            with m.Else():
                m.d.sync += b_c.eq(b_c + per)
            for col in range(0, cols - per, per):
                with m.If(b_c == col):
                    m.d.sync += [b_reg[col + i].eq(blocks[i]) for i in range(per)]
            with m.If(b_j == tile_cols - per):
                m.d.sync += [b_j.eq(0), b_kk.eq(b_kk + 1)]
            with m.Else():
                m.d.sync += b_j.eq(b_j + per)
        b_beat_out = Signal(cols * block_bits)
        m.d.comb += b_beat_out.eq(Cat(*[b_reg[col] for col in range(cols - per)], *blocks))
        b_place = place & (b_c == cols - per)       # the unpacker completes a B beat
        b_fed = Signal()                            # every B beat of the tile is in the B FIFO
        if bdepth:
            b_w = Signal(range(bdepth + 1))         # beats kept (first M-tile of an N-tile)
            r_issued = Signal(range(bdepth + 1))    # buffer reads issued (a replayed tile)
            r_addr = Signal(range(bdepth + 1))      # the next read's buffer address
            r_tag = Signal()                        # a buffer read's data arrives this cycle
            with m.If(b_place & stationary):
                m.d.comb += [bb_wr.en.eq(1), bb_wr.addr.eq(b_w), bb_wr.data.eq(b_beat_out)]
                m.d.sync += b_w.eq(b_w + 1)
            read = streaming & replay & (r_issued != n_beats) & (bfifo.level + r_tag < bfifo_depth)
            with m.If(read):
                m.d.comb += [bb_rd.addr.eq(r_addr), bb_rd.en.eq(1)]
                m.d.sync += [r_issued.eq(r_issued + 1), r_addr.eq(r_addr + 1)]
            m.d.sync += r_tag.eq(read)
            m.d.comb += [bfifo.w_en.eq(Mux(replay, r_tag, b_place)),
                         bfifo.w_data.eq(Mux(replay, bb_rd.data, b_beat_out)),
                         b_fed.eq(Mux(replay, (r_issued == n_beats) & ~r_tag, b_done))]
        else:
            m.d.comb += [bfifo.w_en.eq(b_place), bfifo.w_data.eq(b_beat_out), b_fed.eq(b_done)]

        # The array takes a B beat only in its slot's cycle: a streamed beat a cycle late waits a
        # whole round of ``slots`` cycles. So beats from the weight stream are offered a k-block
        # (``slots`` beats) at a time, once the B FIFO holds them all.
        b_round = Signal(range(slots))              # slot of the array's next B beat
        with m.If(mac.b.valid & mac.b.ready):
            m.d.sync += b_round.eq(Mux(b_round == slots - 1, 0, b_round + 1))
        m.d.comb += mac.b.valid.eq(bfifo.r_rdy & (replay | (b_round != 0) | (bfifo.level >= slots)))

        after = Signal(range(cap + 1))              # bytes held once this cycle's blocks are taken
        drop = Signal(2)                            # leading bytes of this beat to drop
        m.d.comb += [after.eq(ucount - taken * BLOCK_BYTES), drop.eq(Mux(first_beat, skip, 0))]
        # Between the N-tiles of one request the unpacker keeps its bytes; after the last N-tile
        # it drops the request's padding up to its last beat.
        m.d.comb += self.wdata.ready.eq(streaming & ~replay & ~seen_last &
                                        Mux(b_done, last_n, after + db - drop <= cap))
        accept = self.wdata.valid & self.wdata.ready
        shifted = Array(ub >> (i * block_bits) for i in range(per + 1))[taken]
        incoming = self.wdata.payload.data >> Cat(Const(0, 3), drop)
        with m.If(accept):
            m.d.sync += [seen_last.eq(self.wdata.payload.last), first_beat.eq(0)]
        with m.If(accept & ~b_done):
            m.d.sync += [ub.eq(shifted | (incoming << Cat(Const(0, 3), after))), ucount.eq(after + db - drop)]
        with m.Elif(taken != 0):
            m.d.sync += [ub.eq(shifted), ucount.eq(after)]

        tile_fed = b_fed & (seen_last | ~last_n)

        # -- phase 3: result beats -> destination rows ----------------------------------------------
        # ``group`` consecutive result beats of a tile (columns s*cols .. (s+group)*cols - 1) are
        # gathered and written as one: each row of the group is ``group * cols`` consecutive words,
        # ``wparts`` row-port writes. A group is moved whole into the write buffer, so the next
        # one is gathered while it is written.
        held = Signal(data.ArrayLayout(c_beat(rows, cols), max(1, group - 1)))
        g_idx = Signal(range(max(2, group)))        # beats of the group gathered
        wbuf = Signal(data.ArrayLayout(data.ArrayLayout(32, group * cols), rows))
        w_valid = Signal()                          # wbuf holds a group being written
        hold = Signal()                             # dst overlaps src: no write while quantizing
        o_mt_row = Signal(13)
        o_n0 = Signal(21)
        o_s = Signal(range(slots))                  # first slot of the group in wbuf
        o_r = Signal(range(max(2, rows)))           # (at least one bit: no zero-width nets)
        o_p = Signal(range(max(2, wparts)))
        o_mrow_base = Signal(SPAD_EA_BITS + 8)      # dst + o_mt_row * n
        o_tile_base = Signal(SPAD_EA_BITS + 8)      # ... + o_n0
        o_beat_base = Signal(SPAD_EA_BITS + 8)      # ... + o_s * cols
        o_row_addr = Signal(SPAD_EA_BITS + 8)       # ... + o_r * n
        o_addr = Signal(SPAD_EA_BITS + 8)           # ... + o_p * lanes
        o_beat_col = Signal(22)                     # o_n0 + o_s * cols
        o_col = Signal(22)                          # ... + o_p * lanes
        writing = w_valid & ~(hold & quantizing)
        group_written = writing & (o_r == rows - 1) & (o_p == wparts - 1)
        completes = g_idx == group - 1              # the incoming beat completes a group
        m.d.comb += mac.o.ready.eq(~completes | ~w_valid | group_written)
        with m.If(mac.o.valid & mac.o.ready):
            with m.If(completes):
                m.d.sync += [g_idx.eq(0), w_valid.eq(1)]
                for r in range(rows):
                    for b in range(group):
                        beat = held[b] if b < group - 1 else mac.o.payload.data
                        m.d.sync += [wbuf[r][b * cols + col].eq(beat[r][col]) for col in range(cols)]
            with m.Else():
                m.d.sync += g_idx.eq(g_idx + 1)
                for b in range(group - 1):
                    with m.If(g_idx == b):
                        m.d.sync += held[b].eq(mac.o.payload.data)
        with m.Elif(group_written):
            m.d.sync += w_valid.eq(0)

        row_data = Array(wbuf[r] for r in range(rows))[o_r]
        wr_lane = [Signal(32, name=f"wr_lane{j}") for j in range(lanes)]
        with m.Switch(o_p):
            for p in range(wparts):
                with m.Case(p):
                    for j in range(min(lanes, group * cols - p * lanes)):
                        m.d.comb += wr_lane[j].eq(row_data[p * lanes + j])
        m.d.comb += [
            self.spad.wr_en.eq(writing & (o_mt_row + o_r < c.m)),
            self.spad.wr_addr.eq(o_addr),
            self.spad.wr_mask.eq(Cat(((o_p * lanes + j < group * cols) & (o_col + j < c.n))
                                     for j in range(lanes))),
            *[self.spad.wr_data[j].eq(wr_lane[j]) for j in range(lanes)],
        ]

        def start_tile(base, col):
            """The writer's addresses at the first beat of a tile whose element (0, 0) is at word
            ``base``, column ``col`` of the result."""
            return [o_tile_base.eq(base), o_beat_base.eq(base), o_row_addr.eq(base), o_addr.eq(base),
                    o_beat_col.eq(col), o_col.eq(col)]

        with m.If(writing):
            with m.If(o_p != wparts - 1):
                m.d.sync += [o_p.eq(o_p + 1), o_addr.eq(o_addr + lanes), o_col.eq(o_col + lanes)]
            with m.Elif(o_r != rows - 1):
                m.d.sync += [o_p.eq(0), o_r.eq(o_r + 1), o_row_addr.eq(o_row_addr + c.n),
                             o_addr.eq(o_row_addr + c.n), o_col.eq(o_beat_col)]
            with m.Elif(o_s != slots - group):
                m.d.sync += [o_p.eq(0), o_r.eq(0), o_s.eq(o_s + group),
                             o_beat_base.eq(o_beat_base + group * cols),
                             o_row_addr.eq(o_beat_base + group * cols), o_addr.eq(o_beat_base + group * cols),
                             o_beat_col.eq(o_beat_col + group * cols), o_col.eq(o_beat_col + group * cols)]
            with m.Else():                          # the tile's last group
                m.d.sync += [o_p.eq(0), o_r.eq(0), o_s.eq(0), tiles_written.eq(tiles_written + 1)]
                next_row = o_mrow_base + c.n * rows     # word of the next M-tile's first row
                _step_tiles(m, n_outer, o_mt_row + rows >= c.m, o_n0 + tile_cols >= c.n,
                            next_n_tile=[o_mt_row.eq(0), o_n0.eq(o_n0 + tile_cols), o_mrow_base.eq(c.dst),
                                         *start_tile(c.dst + o_n0 + tile_cols, o_n0 + tile_cols)],
                            next_m_tile=[o_mt_row.eq(o_mt_row + rows), o_mrow_base.eq(next_row),
                                         *start_tile(next_row + o_n0, o_n0)],
                            next_row=[o_n0.eq(0), o_mt_row.eq(o_mt_row + rows), o_mrow_base.eq(next_row),
                                      *start_tile(next_row, 0)],
                            next_col=[o_n0.eq(o_n0 + tile_cols),
                                      *start_tile(o_tile_base + tile_cols, o_n0 + tile_cols)])

        # -- control --------------------------------------------------------------------------------
        status = self.ctl.resp.payload.status
        cmd_pending = Signal()                      # a tile's command the array has not taken yet
        m.d.comb += [mac.cmd.valid.eq(cmd_pending), mac.cmd.payload.blocks.eq(kb),
                     mac.cmd.payload.has_c.eq(0)]
        with m.If(mac.cmd.ready):
            m.d.sync += cmd_pending.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.ctl.cmd.ready.eq(1)
                with m.If(self.ctl.cmd.valid):
                    m.d.sync += [c.eq(self.ctl.cmd.payload), err.eq(0)]
                    m.next = "FIELDS"
            with m.State("FIELDS"):                 # the ends and products are being computed
                with m.If(bad_field):
                    m.d.sync += status.eq(Status.BAD_FIELD)
                    m.next = "RESPOND"
                with m.Else():
                    m.next = "RANGES"
            with m.State("RANGES"):
                with m.If(src_end > cfg.spad_words):
                    m.d.sync += status.eq(Status.SPAD_RANGE)
                    m.next = "RESPOND"
                with m.Elif(dst_end > cfg.spad_words):
                    m.d.sync += status.eq(Status.SPAD_RANGE)
                    m.next = "RESPOND"
                with m.Elif((c.w[:2] != 0) | (w_end > self.weight_size)):
                    m.d.sync += status.eq(Status.WEIGHT_RANGE)
                    m.next = "RESPOND"
                with m.Else():
                    if bdepth:
                        m.d.sync += [stationary.eq(kb * slots <= bdepth), n_beats.eq(kb * slots),
                                     resident.eq(resident_need <= bdepth * cols), b_w.eq(0)]
                    m.d.sync += [quantizing.eq(1), q_addr.eq(c.src), q_part.eq(0), q_issued.eq(0),
                                 q_written.eq(0),
                                 mt_row.eq(0), n0.eq(0), wt_off.eq(0),
                                 a_on.eq(1), a_stop.eq(0), a_tiles.eq(0), a_kk.eq(0), a_mrow.eq(0),
                                 a_n0.eq(0), a_ptr.eq(0),
                                 tiles_fed.eq(0), tiles_written.eq(0),
                                 o_mt_row.eq(0), o_n0.eq(0), o_s.eq(0), o_r.eq(0), o_p.eq(0),
                                 o_mrow_base.eq(c.dst), *start_tile(c.dst, 0)]
                    m.d.sync += hold.eq((c.dst < src_end) & (c.src < dst_end))
                    m.next = "SETUP"
            with m.State("SETUP"):
                m.d.sync += [w_cols.eq(Mux(c.n - n0 >= tile_cols, tile_cols, c.n - n0)),
                             full_addr.eq(self.weight_base + c.w[:WEIGHT_ADDR_BITS] + wt_off)]
                m.next = "SIZE"
            with m.State("SIZE"):
                # One weight request serves all N-tiles (their weights lie one after the other in
                # the image, so the stream runs on from tile to tile without a request's latency):
                # stationary, at the GEMM's first tile (the first M-tile of each N-tile keeps its B
                # beats in the B buffer, the others replay them); else at each M-tile's first.
                m.d.sync += [row_bytes.eq(kb_bytes * c.n), skip.eq(full_addr[:2]),
                             b_j.eq(0), b_c.eq(0), b_kk.eq(0),
                             replay.eq(stationary & (mt_row != 0))]
                if bdepth:
                    m.d.sync += r_issued.eq(0)
                    with m.If(~resident):           # resident: the N-tiles one after the other
                        m.d.sync += b_w.eq(0)
                    with m.If(~resident | (n0 == 0)):
                        m.d.sync += r_addr.eq(0)
                with m.If((n0 == 0) & (~stationary | (mt_row == 0))):
                    m.next = "REQUEST"
                with m.Else():
                    m.next = "COMMAND"
            with m.State("REQUEST"):
                length = Signal(34)
                m.d.comb += [length.eq(skip + row_bytes + 3),
                             self.wreq.valid.eq(1),
                             self.wreq.payload.addr.eq(Cat(Const(0, 2), full_addr[2:])),
                             self.wreq.payload.length.eq(Cat(Const(0, 2), length[2:]))]
                with m.If(self.wreq.ready):
                    m.d.sync += [ucount.eq(0), ub.eq(0), first_beat.eq(1), seen_last.eq(0)]
                    m.next = "COMMAND"
            with m.State("COMMAND"):              # the tile's command waits for the array, not we
                with m.If(~cmd_pending | mac.cmd.ready):
                    m.d.sync += [cmd_pending.eq(1), tiles_fed.eq(tiles_fed + 1), streaming.eq(1)]
                    m.next = "STREAM"
            with m.State("STREAM"):
                with m.If(self.werror):
                    m.d.sync += err.eq(1)
                if bdepth:
                    # A replayed tile followed by another replayed one: the next tile's buffer reads
                    # follow its last one without a gap (N-outer: the next M-tile of the N-tile;
                    # resident: the next tile of any but the first M-tile).
                    chain = read & (r_issued == n_beats - 1) & ~err & ~self.werror & \
                        (~cmd_pending | mac.cmd.ready)
                    with m.If(chain & ((n_outer & ~last_m) | (resident & ~(last_n & last_m)))):
                        m.d.sync += [r_issued.eq(0), cmd_pending.eq(1), tiles_fed.eq(tiles_fed + 1)]
                        with m.If(n_outer | last_n):
                            m.d.sync += mt_row.eq(mt_row + rows)
                        with m.If(n_outer):             # the same N-tile's beats again
                            m.d.sync += r_addr.eq(0)
                        with m.If(resident & last_n):
                            m.d.sync += [n0.eq(0), wt_off.eq(0), r_addr.eq(0)]
                        with m.Elif(resident):
                            m.d.sync += [n0.eq(n0 + tile_cols), wt_off.eq(wt_off + kb_bytes * tile_cols)]
                # A streamed tile followed by the next N-tile of the same request (every tile of
                # an M-row without a B buffer, of the first M-row when resident, of a one-M-tile
                # GEMM N-outer): the next tile's blocks follow its last one without a gap.
                next_n0 = n0 + tile_cols
                with m.If(~replay & place & (b_j == tile_cols - per) & (b_kk == kb - 1) & ~last_n
                          & (~n_outer | last_m) & ~err & ~self.werror
                          & (~cmd_pending | mac.cmd.ready)):
                    m.d.sync += [b_kk.eq(0), n0.eq(next_n0), wt_off.eq(wt_off + kb_bytes * tile_cols),
                                 w_cols.eq(Mux(c.n - next_n0 >= tile_cols, tile_cols, c.n - next_n0)),
                                 cmd_pending.eq(1), tiles_fed.eq(tiles_fed + 1)]
                    if bdepth:
                        with m.If(n_outer):         # the next N-tile's beats from the buffer's start
                            m.d.sync += b_w.eq(0)
                with m.If(tile_fed):
                    m.d.sync += streaming.eq(0)
                    m.next = "NEXT"
            with m.State("NEXT"):
                _step_tiles(m, n_outer, last_m, last_n,
                            next_n_tile=[mt_row.eq(0), n0.eq(n0 + tile_cols),
                                         wt_off.eq(wt_off + kb_bytes * tile_cols)],
                            next_m_tile=[mt_row.eq(mt_row + rows)],
                            next_row=[n0.eq(0), wt_off.eq(0), mt_row.eq(mt_row + rows)],
                            next_col=[n0.eq(n0 + tile_cols), wt_off.eq(wt_off + kb_bytes * tile_cols)])
                with m.If(err | self.werror):
                    m.d.sync += a_stop.eq(1)
                    m.next = "FLUSH"
                with m.Elif(last_n & last_m):
                    m.next = "DRAIN"
                with m.Else():
                    m.next = "SETUP"
            with m.State("FLUSH"):                  # a failed run: the request's other beats are dropped
                m.d.comb += self.wdata.ready.eq(~seen_last)
                with m.If(seen_last | (self.wdata.valid & self.wdata.payload.last)):
                    m.d.sync += seen_last.eq(1)
                    m.next = "DRAIN"
            with m.State("DRAIN"):                  # the results of the last tiles are written
                with m.If((tiles_written == tiles_fed) & ~quantizing & ~a_busy & ~a_tag_valid):
                    m.d.sync += status.eq(Mux(err | self.werror, Status.BUS_ERROR, Status.OK))
                    m.next = "PURGE"
            with m.State("PURGE"):                  # after an error: A beats of tiles never issued
                m.d.comb += purge.eq(1)
                with m.If(afifo.level == 0):
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += self.ctl.resp.valid.eq(1)
                with m.If(self.ctl.resp.ready):
                    m.next = "IDLE"
        return m
