"""The compute tile: a sequencer running a program over the scratchpad, the vector unit and the
weight port, behind an AXI4-Lite register block."""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.axi import Axi4ReadSignature, AxiLiteSignature
from rtl.kv.layouts import Op as KvOp
from rtl.kv.layouts import Status as KvStatus
from rtl.mx.dot_product import LUT_PRODUCTS
from rtl.tile.axil_registers import AxilRegisters
from rtl.tile.control_path import ControlPath
from rtl.tile.gemm_engine import GemmEngine
from rtl.tile.layouts import WEIGHT_ADDR_BITS, Status
from rtl.tile.perf_counters import COUNTERS, PerfCounters
from rtl.tile.register_map import tile_register_map
from rtl.tile.weight_port import WeightPort
from rtl.vpu.vector_unit import VectorUnit
from sim_models.tile_isa import TileConfig

__all__ = ["Tile"]


class Tile(wiring.Component):
    """One compute tile: program memory, sequencer, scratchpad, VOP engine, vector unit, weight port.

    The host loads a program, registers and scratchpad words through ``s_axil`` (the map of
    ``docs/tile_registers.md``), writes ``CTRL.start`` and waits for ``irq`` (or polls ``STATUS``);
    the program runs bit-exactly like ``sim_models.tile_iss.TileIss`` for every instruction the tile
    implements so far (see :class:`~rtl.tile.sequencer.Sequencer`), reading its weights through
    ``m_axi`` from the image at ``WEIGHT_BASE``. Performance counters (``PERF_*``,
    :class:`~rtl.tile.perf_counters.PerfCounters`) split each run's cycles by instruction class and
    count the weight-memory stalls, the weight bytes and beats, and the KV records read and
    appended.

    Parameters
    ----------
    config : TileConfig
        Scratchpad words, lanes, the vector unit's ``max_k`` and ``rope_length``, MAC array shape,
        KV-cache slice.
    head_dim : int
        The model's head dimension, which fixes the KV records (``32 * head_dim`` bits: K and V
        in bfloat16); ``KVAPPEND`` and ``ATTN`` of another ``hd`` stop with ``bad_field``.
    prog_words : int
        Program memory, in instructions.
    data_bytes : int
        Width of the weight port (bytes per AXI beat).
    multiplier : ``"dsp"`` or ``"lut"``
        The vector unit's multipliers.
    mac_mapping : ProductMapping or (int, int)
        Where the MAC array builds its element products (LUT tables by default; see
        ``rtl.mx.dot_product.ProductMapping``).

    Interface attributes
    --------------------
    s_axil : ``In(AxiLiteSignature(addr_bits=23))``
        Host registers and windows.
    m_axi : ``Out(Axi4ReadSignature(addr_bits=40, data_bits=8 * data_bytes))``
        Weight memory reads.
    irq : ``Out(1)``
        ``IRQ_STATUS & IRQ_ENABLE``: ``done`` when a run stops, ``error`` when it stops on a fault.
    """

    def __init__(self, config: TileConfig | None = None, *, head_dim=32, prog_words=1024, data_bytes=8,
                 multiplier="dsp", mac_mapping=LUT_PRODUCTS):
        self.config = TileConfig() if config is None else config
        self.head_dim = head_dim
        self.prog_words = prog_words
        self.data_bytes = data_bytes
        self.multiplier = multiplier
        self.mac_mapping = mac_mapping
        self.register_map = tile_register_map(
            spad_words=self.config.spad_words, prog_words=prog_words, rows=self.config.rows,
            cols=self.config.cols, interleave=self.config.interleave, lanes=self.config.lanes)
        super().__init__({
            "s_axil": In(AxiLiteSignature(addr_bits=self.register_map.addr_bits)),
            "m_axi": Out(Axi4ReadSignature(addr_bits=WEIGHT_ADDR_BITS, data_bits=8 * data_bytes)),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.regs = regs = AxilRegisters(self.register_map)
        gemm = GemmEngine(cfg, data_bytes=self.data_bytes, mac_mapping=self.mac_mapping)
        m.submodules.core = core = ControlPath(cfg, head_dim=self.head_dim, prog_words=self.prog_words,
                                               data_bytes=self.data_bytes, gemm=gemm)
        seq, vop = core.seq, core.vop
        m.submodules.vpu = vpu = VectorUnit(cfg.lanes, multiplier=self.multiplier, max_k=cfg.vpu_max_k,
                                            rope_length=cfg.vpu_rope_length)
        m.submodules.weights = weights = WeightPort(data_bytes=self.data_bytes)

        # host
        wiring.connect(m, wiring.flipped(self.s_axil), regs.s_axil)
        m.d.comb += self.irq.eq(regs.irq)
        weight_base = Cat(regs.weight_base_lo, regs.weight_base_hi)
        weight_size = Cat(regs.weight_size_lo, regs.weight_size_hi)
        m.d.comb += [seq.start.eq(regs.ctrl.data.start), seq.abort.eq(regs.ctrl.data.abort),
                     seq.prog_len.eq(regs.prog_len), seq.step_limit.eq(regs.step_limit),
                     seq.weight_base.eq(weight_base), seq.weight_size.eq(weight_size),
                     gemm.weight_base.eq(weight_base), gemm.weight_size.eq(weight_size),
                     regs.status.busy.eq(seq.busy), regs.status.done.eq(seq.done),
                     regs.status.code.eq(seq.code), regs.pc.eq(seq.pc), regs.steps.eq(seq.steps),
                     regs.cycles.eq(seq.cycles),
                     regs.irq_status.done.eq(seq.stopped),
                     regs.irq_status.error.eq(seq.stopped & (seq.code != Status.OK))]
        wiring.connect(m, regs.gpr, seq.gpr)
        wiring.connect(m, regs.program, seq.program)
        wiring.connect(m, regs.spad, core.spad.host)

        # vector unit
        for name in ("vcmd", "va", "vb", "vc"):
            wiring.connect(m, getattr(vop, name), getattr(vpu, name[1:]))
        wiring.connect(m, vpu.o, vop.vo)

        # weight port: the sequencer's copies, or the GEMM engine's weight stream while it runs
        for user in (seq, gemm):
            m.d.comb += user.werror.eq(weights.error)
        with m.If(core.gemm_active):
            wiring.connect(m, gemm.wreq, weights.req)
            wiring.connect(m, weights.o, gemm.wdata)
        with m.Else():
            wiring.connect(m, seq.wreq, weights.req)
            wiring.connect(m, weights.o, seq.wdata)
        m.d.comb += weights.clear_error.eq(seq.start)
        wiring.connect(m, weights.m_axi, wiring.flipped(self.m_axi))

        # performance counters: the sequencer's activity and the handshakes of the weight port and
        # of the KV-cache controller's replies. A copy takes every beat it is offered (it raises
        # ready only with valid), the GEMM engine says when it would take one.
        m.submodules.perf = perf = PerfCounters()
        kv = core.kv
        m.d.comb += [
            perf.clear.eq(seq.start & ~seq.busy), perf.busy.eq(seq.busy), perf.activity.eq(seq.activity),
            perf.weight_request.eq(weights.req.valid & weights.req.ready),
            perf.weight_length.eq(weights.req.payload.length),
            perf.weight_beat.eq(weights.o.valid & weights.o.ready),
            perf.weight_pending.eq(weights.busy), perf.weight_valid.eq(weights.o.valid),
            perf.weight_wanted.eq(~core.gemm_active | gemm.wdata.ready),
            perf.kv_read.eq(kv.rd_reply.valid & kv.rd_reply.ready & ~kv.rd_reply.payload.empty),
            perf.kv_append.eq(kv.cmd_reply.valid & kv.cmd_reply.ready &
                              (kv.cmd_reply.payload.op == KvOp.APPEND) &
                              (kv.cmd_reply.payload.status == KvStatus.OK)),
        ]
        for name in COUNTERS:
            m.d.comb += getattr(regs, f"perf_{name}").eq(getattr(perf, name))
        return m
