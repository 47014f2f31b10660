"""The tile's control path: the sequencer and the engines it drives, around the scratchpad and the
KV-cache slice; the vector unit, the weight port and the host registers attach to it."""

import dataclasses

from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring

from rtl.kv.kv_cache import KvCache
from rtl.tile.attention_engine import AttentionEngine
from rtl.tile.kv_engine import KvEngine
from rtl.tile.scratchpad import Scratchpad
from rtl.tile.sequencer import Sequencer
from rtl.tile.vop_engine import VopEngine
from sim_models.tile_isa import TileConfig

__all__ = ["ControlPath"]


def _active(m, port, name, active=None):
    """High from the cycle after ``port``'s command is accepted until its status is taken."""
    active = Signal(name=name) if active is None else active
    with m.If(port.cmd.valid & port.cmd.ready):
        m.d.sync += active.eq(1)
    with m.Elif(port.resp.valid & port.resp.ready):
        m.d.sync += active.eq(0)
    return active


class ControlPath(Elaboratable):
    """Sequencer, scratchpad, VOP engine, KV-cache controller, KV engine and attention engine, joined.

    Attributes (connect to them from the enclosing design)
    ------------------------------------------------------
    seq : :class:`~rtl.tile.sequencer.Sequencer`
        Its control inputs and status outputs, host windows (``gpr``, ``program``), the weight
        port's streams and, when no ``gemm`` engine is given here, its ``gemm`` port are open.
    spad : :class:`~rtl.tile.scratchpad.Scratchpad`
        Its ``host`` window is open (served while the sequencer is idle).
    vop : :class:`~rtl.tile.vop_engine.VopEngine`
        Its vector-unit streams (``vcmd``, ``va``, ``vb``, ``vc``, ``vo``) are open.
    gemm_active : ``Signal()``
        A ``GEMM`` is running (its command accepted, its status not yet taken).
    kv : :class:`~rtl.kv.kv_cache.KvCache`
        The tile's KV-cache slice (``config.kv_config(head_dim)``): its command port belongs to the
        KV engine, its read port to the attention engine.

    Sharing
    -------
    One instruction runs at a time, so each shared port has one owner at a time: the scratchpad's
    row port belongs to the GEMM engine or the KV engine while they run an instruction, else to the
    VOP engine; the VOP engine takes its commands from the attention engine while an ``ATTN`` runs,
    else from the sequencer. The VOP engine's address space is the scratchpad followed by the
    attention engine's two memories (its ``extra0`` and ``extra1`` ports), which only the attention
    engine's commands reach.

    Parameters
    ----------
    config : TileConfig
    head_dim : int
        The model's head dimension: the KV records' width (``32 * head_dim`` bits).
    prog_words, data_bytes
        As :class:`~rtl.tile.sequencer.Sequencer`.
    gemm : :class:`~rtl.tile.gemm_engine.GemmEngine`, optional
        Joined to the sequencer and to the scratchpad's row port when given; its weight streams
        stay open.
    attention : dict, optional
        Options of the :class:`~rtl.tile.attention_engine.AttentionEngine` (``stage_records``,
        ``max_group``).
    """

    def __init__(self, config: TileConfig, *, head_dim=32, prog_words=64, data_bytes=8, gemm=None,
                 attention=None):
        self.config = config
        self.head_dim = head_dim
        self.seq = Sequencer(config, prog_words=prog_words, data_bytes=data_bytes)
        self.spad = Scratchpad(config.spad_words, config.lanes)
        self.attn = AttentionEngine(config, head_dim, **(attention or {}))
        self.vop = VopEngine(config, extra_memories=self.attn.memories)
        self.kv_engine = KvEngine(config, head_dim)
        self.kv = KvCache(**dataclasses.asdict(config.kv_config(head_dim)))
        self.gemm = gemm
        self.gemm_active = Signal()

    def elaborate(self, platform):
        m = Module()
        seq, spad, vop, attn, kv_engine, kv = (self.seq, self.spad, self.vop, self.attn, self.kv_engine,
                                               self.kv)
        m.submodules.seq, m.submodules.spad, m.submodules.vop = seq, spad, vop
        m.submodules.attn, m.submodules.kv_engine, m.submodules.kv = attn, kv_engine, kv
        wiring.connect(m, seq.spad, spad.core)
        m.d.comb += spad.host_enable.eq(~seq.busy)

        # KV engine and attention engine: the KV controller's command and read ports
        wiring.connect(m, seq.kv, kv_engine.ctl)
        wiring.connect(m, seq.attn, attn.ctl)
        wiring.connect(m, kv_engine.kv_cmd, kv.cmd)
        wiring.connect(m, kv.cmd_reply, kv_engine.kv_reply)
        wiring.connect(m, attn.kv_rd, kv.rd)
        wiring.connect(m, kv.rd_reply, attn.kv_rd_reply)

        # VOP commands: the attention engine's during an ATTN, else the sequencer's
        attn_active = _active(m, seq.attn, "attn_active")
        with m.If(attn_active):
            wiring.connect(m, attn.vop, vop.ctl)
        with m.Else():
            wiring.connect(m, seq.vop, vop.ctl)

        # The VOP engine's extra memories are the attention engine's
        wiring.connect(m, vop.extra0, attn.scores)
        wiring.connect(m, vop.extra1, attn.records)

        # The scratchpad's row port: the GEMM engine's or the KV engine's while they run, else the
        # VOP engine's
        owners = [(_active(m, seq.kv, "kv_active"), kv_engine.spad)]
        if self.gemm is not None:
            m.submodules.gemm = self.gemm
            wiring.connect(m, seq.gemm, self.gemm.ctl)
            owners.append((_active(m, seq.gemm, "gemm_active", self.gemm_active), self.gemm.spad))
        row = spad.wide
        for name in ("rd_addr", "rd_en", "wr_addr", "wr_en", "wr_mask", "wr_data"):
            value = getattr(vop.spad, name)
            for active, port in owners:
                value = Mux(active, getattr(port, name), value)
            m.d.comb += getattr(row, name).eq(value)
        for port in [vop.spad] + [port for _, port in owners]:
            m.d.comb += port.rd_data.eq(row.rd_data)
        return m
