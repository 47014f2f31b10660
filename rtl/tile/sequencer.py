"""The compute tile's sequencer: fetches, decodes and executes a program of ``sim_models.tile_isa``."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.tile.layouts import (
    INSTRUCTION,
    WEIGHT_ADDR_BITS,
    Opcode,
    Status,
    attn_signature,
    gemm_signature,
    host_region_signature,
    kv_signature,
    scratchpad_port_signature,
    vop_signature,
    weight_data_layout,
    weight_request_layout,
)
from rtl.tile.perf_counters import ACTIVITY_OF, Activity
from sim_models.tile_isa import INSTRUCTIONS, NUM_REGS, WIDTH, TileConfig

__all__ = ["Sequencer"]

_WORDS_PER_INSTRUCTION = WIDTH // 32


class Sequencer(wiring.Component):
    """Runs a tile program from its program memory, instruction by instruction, like ``TileIss``.

    The sequencer executes the scalar and control instructions (``HALT``, ``LI``, ``ADD``, ``ADDI``,
    ``LDW``, ``STW``, ``BLT``, ``BNE``) and the weight-memory copies (``LOAD``, ``EMBED``) itself,
    with every fault of ``docs/tile_isa.md`` in the order the instruction-level model checks them.
    The others go, with their registers applied, to an engine that checks and runs them and
    answers one status: ``VOP`` to the VOP engine (``vop``), ``GEMM`` with its weight offset
    ``w + r[w_r] * w_stride`` to the GEMM engine (``gemm``), ``KVOPEN`` and ``KVAPPEND`` to the KV
    engine (``kv``), ``ATTN`` to the attention engine (``attn``).

    Parameters
    ----------
    config : TileConfig, optional
        ``spad_words`` sizes the scratchpad port and its range checks.
    prog_words : int
        Program memory capacity in 256-bit instructions (a power of two is not required).
    data_bytes : int
        Bytes per beat of the weight port's data stream (4, 8, 16, ...).

    Interface attributes
    --------------------
    start, abort : ``In(1)``
        ``start`` (a one-cycle pulse while idle) runs the program from instruction 0 with the
        registers as the host left them. ``abort`` stops a run between two instructions with status
        ``aborted``.
    prog_len : ``In(17)``
        Instructions of the loaded program: fetching at or beyond it, or branching there, stops
        with ``pc_range``.
    step_limit : ``In(32)``
        The watchdog: a run that would execute more instructions stops with ``step_limit``.
    weight_base, weight_size : ``In(40)``
        AXI byte address and size of the weight image; instruction weight addresses are offsets
        into it, checked against ``weight_size`` (``weight_range``).
    busy, done : ``Out(1)``
        A run is in progress; the last run has stopped (cleared by ``start``).
    code : ``Out(Status)``
        How the last run stopped (``STATUS`` of ``sim_models.tile_isa``).
    stopped : ``Out(1)``
        A one-cycle pulse (a register) in the first cycle after a run stops, when ``busy``,
        ``done``, ``code`` and ``pc`` already show the stop: the interrupt source.
    pc, steps, cycles : ``Out(16)``, ``Out(32)``, ``Out(32)``
        The instruction the machine is at (where it stopped), instructions executed (HALT
        included, like ``TileIss.run``), cycles of the run (the cycles with ``busy`` high).
    activity : ``Out(Activity)``
        What the current cycle is spent on (:class:`~rtl.tile.perf_counters.Activity`): ``OTHER``
        while idle and in the fetch, decode and next-pc cycles, else the class of the instruction
        being executed. Combinational, from the state; the performance counters sample it.
    gpr, program : ``In(host_region_signature(...))``
        Host access to the registers (16 words; ``r0`` reads 0 and ignores writes) and to the
        program memory (``prog_words * 8`` words, instruction ``i`` in words ``8i .. 8i + 7``, least
        significant first). Served while idle; a request during a run waits until it stops.
    spad : ``Out(scratchpad_port_signature(spad_words))``
        The scratchpad: one read (data one cycle after ``rd_en``) and one write per cycle.
    wreq : ``Out(stream.Signature(weight_request_layout))``, wdata : ``In(stream.Signature(...))``
        Requests to the weight port (byte ranges of the weight memory) and their data beats.
    werror : ``In(1)``
        The weight port saw an error response; sampled at the end of each copy (``bus_error``).
    vop, gemm, kv, attn : ``Out(vop_signature())``, ``Out(gemm_signature())``, ``Out(kv_signature())``,
    ``Out(attn_signature())``
        An instruction with its effective addresses and scalars (weight offset) to its engine;
        the engine's status ends the instruction (``ok``) or the run.

    Timing
    ------
    Per instruction: 2 cycles of fetch, then 1 cycle (``LI``, ``ADD``, ``ADDI``, ``BLT``, ``BNE``,
    ``HALT``), 2 (``STW``), 3 (``LDW``); ``LOAD`` of ``w`` words takes about 6 cycles plus the
    weight memory's latency plus ``w`` cycles (one scratchpad word per cycle); ``EMBED`` about
    ``2 count`` cycles to check the ids, then per row 6 cycles + latency + ``row``.
    """

    def __init__(self, config: TileConfig | None = None, *, prog_words=1024, data_bytes=8):
        config = TileConfig() if config is None else config
        check_positive_int(self, "prog_words", prog_words)
        if prog_words > 1 << 16:
            raise parameter_error(self, ValueError, f"prog_words must be at most {1 << 16} (16-bit "
                                  f"program counter), got {prog_words}")
        if data_bytes < 4 or data_bytes & (data_bytes - 1):
            raise parameter_error(self, ValueError, f"data_bytes must be a power of two of at least 4, "
                                  f"got {data_bytes!r}")
        self.config = config
        self.prog_words = prog_words
        self.data_bytes = data_bytes
        super().__init__({
            "start": In(1),
            "abort": In(1),
            "prog_len": In(17),
            "step_limit": In(32),
            "weight_base": In(WEIGHT_ADDR_BITS),
            "weight_size": In(WEIGHT_ADDR_BITS),
            "busy": Out(1),
            "done": Out(1),
            "code": Out(Status),
            "stopped": Out(1),
            "pc": Out(16),
            "steps": Out(32),
            "cycles": Out(32),
            "activity": Out(Activity),
            "gpr": In(host_region_signature(NUM_REGS)),
            "program": In(host_region_signature(prog_words * _WORDS_PER_INSTRUCTION)),
            "spad": Out(scratchpad_port_signature(config.spad_words)),
            "wreq": Out(stream.Signature(weight_request_layout())),
            "wdata": In(stream.Signature(weight_data_layout(data_bytes))),
            "werror": In(1),
            "vop": Out(vop_signature()),
            "gemm": Out(gemm_signature()),
            "kv": Out(kv_signature()),
            "attn": Out(attn_signature()),
        })

    def elaborate(self, platform):
        m = Module()
        spad_words = self.config.spad_words
        words_per_beat = self.data_bytes // 4

        # -- state ----------------------------------------------------------------------------------
        regs = [Signal(32, name=f"r{i}") for i in range(NUM_REGS)]   # r0 is never written
        reg = Array(regs)
        ir = Signal(INSTRUCTION)

        def write_reg(index, value):
            for i in range(1, NUM_REGS):
                with m.If(index == i):
                    m.d.sync += regs[i].eq(value)

        m.submodules.prog = prog = Memory(shape=WIDTH, depth=self.prog_words, init=[])
        prog_rd = prog.read_port()
        prog_wr = prog.write_port(granularity=32)
        m.d.comb += prog_rd.en.eq(0)                  # read only when asked (en resets to 1)

        m.d.sync += self.stopped.eq(0)

        def stop(status):
            m.d.sync += [self.busy.eq(0), self.done.eq(1), self.code.eq(status), self.stopped.eq(1)]
            m.next = "IDLE"

        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        # What each cycle is spent on: the executing instruction's class (latched at its decode),
        # except in the cycles between two instructions' executions.
        activity = Signal(Activity)
        between = Signal()                          # idle, fetch, decode, next pc
        m.d.comb += self.activity.eq(Mux(between, Activity.OTHER, activity))

        # -- host access while idle -----------------------------------------------------------------
        host_prog_word = Signal(range(_WORDS_PER_INSTRUCTION))
        host_prog_pending = Signal()
        m.d.sync += host_prog_pending.eq(0)
        with m.If(~self.busy & ~self.start):
            m.d.comb += [self.gpr.req.ready.eq(~self.gpr.resp.valid),
                         self.program.req.ready.eq(~self.program.resp.valid & ~host_prog_pending)]
        with m.If(self.gpr.resp.ready):
            m.d.sync += self.gpr.resp.valid.eq(0)
        with m.If(self.gpr.req.valid & self.gpr.req.ready):
            with m.If(self.gpr.req.payload.write):
                write_reg(self.gpr.req.payload.addr, self.gpr.req.payload.data)
            m.d.sync += [self.gpr.resp.valid.eq(1),
                         self.gpr.resp.payload.data.eq(reg[self.gpr.req.payload.addr])]

        with m.If(self.program.resp.ready):
            m.d.sync += self.program.resp.valid.eq(0)
        host_addr = self.program.req.payload.addr
        with m.If(self.program.req.valid & self.program.req.ready):
            m.d.comb += [prog_wr.addr.eq(host_addr[3:]), prog_rd.addr.eq(host_addr[3:]),
                         prog_wr.data.eq(self.program.req.payload.data.replicate(_WORDS_PER_INSTRUCTION))]
            with m.If(self.program.req.payload.write):
                m.d.comb += prog_wr.en.eq(1 << host_addr[:3])
                m.d.sync += self.program.resp.valid.eq(1)
            with m.Else():
                m.d.comb += prog_rd.en.eq(1)
                m.d.sync += [host_prog_pending.eq(1), host_prog_word.eq(host_addr[:3])]
        with m.If(host_prog_pending):
            m.d.sync += [self.program.resp.valid.eq(1),
                         self.program.resp.payload.data.eq(prog_rd.data.word_select(host_prog_word, 32))]

        # -- operands of the executing instruction ----------------------------------------------------
        ea = Signal(34)                 # an effective scratchpad address (field + register)
        ea2 = Signal(34)                # a second one (EMBED: the destination)
        mul_a, mul_b = Signal(32), Signal(32)
        prod = Signal(64)
        m.d.sync += prod.eq(mul_a * mul_b)     # valid two cycles after mul_a/mul_b are loaded
        waddr = Signal(WEIGHT_ADDR_BITS + 27)  # a weight byte address (field + reg * stride + ...)
        wbase = Signal(WEIGHT_ADDR_BITS + 26)  # EMBED: w + r[w_r] * w_stride
        t = Signal(12)                  # EMBED: token index
        in_embed = Signal()

        # The copy engine: copy_words words from weight byte address waddr to scratchpad copy_dst.
        copy_dst = Signal(34)
        copy_words = Signal(21)
        copy_left = Signal(21)
        beat_word = Signal(range(words_per_beat))

        def weight_check(nbytes, then):
            """Stop with weight_range unless [waddr, waddr + nbytes) is in the image, aligned."""
            with m.If((waddr[:2] != 0) | (waddr + nbytes > self.weight_size)):
                stop(Status.WEIGHT_RANGE)
            with m.Else():
                m.next = then

        def spad_check(end):
            """True when the scratchpad range ending (exclusive) at ``end`` is outside the scratchpad."""
            return end > spad_words

        def execute(name):
            """The EXECUTE cycle of ``name``: register work, or the first state of a longer one."""
            f = getattr(ir, name)
            if name == "HALT":
                stop(Status.OK)
            elif name == "LI":
                write_reg(f.rd, f.imm)
                m.next = "NEXT"
            elif name == "ADD":
                write_reg(f.rd, reg[f.rs] + reg[f.rt])
                m.next = "NEXT"
            elif name == "ADDI":
                write_reg(f.rd, reg[f.rs] + f.imm.as_unsigned())
                m.next = "NEXT"
            elif name in ("LDW", "STW"):
                m.d.sync += ea.eq(f.addr + reg[f.addr_r])
                m.next = name + ("_READ" if name == "LDW" else "_WRITE")
            elif name in ("BLT", "BNE"):
                taken = (reg[f.rs] < reg[f.rt]) if name == "BLT" else (reg[f.rs] != reg[f.rt])
                with m.If(~taken):
                    m.next = "NEXT"
                with m.Elif(f.target >= self.prog_len):
                    stop(Status.PC_RANGE)
                with m.Else():
                    m.d.sync += self.pc.eq(f.target)
                    m.next = "CHECK"
            elif name == "LOAD":
                with m.If(f.words == 0):
                    stop(Status.BAD_FIELD)
                with m.Else():
                    m.d.sync += [ea.eq(f.dst + reg[f.dst_r]), mul_a.eq(reg[f.w_r]), mul_b.eq(f.w_stride)]
                    m.next = "LOAD_SPAD"
            elif name == "EMBED":
                with m.If((f.count == 0) | (f.row == 0)):
                    stop(Status.BAD_FIELD)
                with m.Else():
                    m.d.sync += [ea.eq(f.ids + reg[f.ids_r]), ea2.eq(f.dst + reg[f.dst_r]),
                                 mul_a.eq(reg[f.w_r]), mul_b.eq(f.w_stride)]
                    m.next = "EMBED_IDS"
            elif name == "VOP":
                cmd = self.vop.cmd.payload
                m.d.sync += [cmd.op.eq(f.op), cmd.len.eq(f.len), cmd.rows.eq(f.rows), cmd.bcast.eq(f.bcast),
                             cmd.scalar0.eq(Mux(f.imm_r != 0, reg[f.imm_r], f.imm)),
                             cmd.scalar1.eq(reg[f.imm1_r])]
                for x in ("dst", "a", "b", "c"):
                    m.d.sync += [getattr(cmd, x).eq(getattr(f, x) + reg[getattr(f, x + "_r")]),
                                 getattr(cmd, x + "_s").eq(getattr(f, x + "_s"))]
                m.next = "VOP_ISSUE"
            elif name == "GEMM":
                cmd = self.gemm.cmd.payload
                m.d.sync += [cmd.dst.eq(f.dst + reg[f.dst_r]), cmd.src.eq(f.src + reg[f.src_r]),
                             cmd.m.eq(f.m), cmd.k.eq(f.k), cmd.n.eq(f.n), cmd.af.eq(f.af), cmd.wf.eq(f.wf),
                             mul_a.eq(reg[f.w_r]), mul_b.eq(f.w_stride)]
                m.next = "GEMM_MULTIPLY"
            elif name in ("KVOPEN", "KVAPPEND"):
                cmd = self.kv.cmd.payload
                if name == "KVOPEN":
                    m.d.sync += [cmd.append.eq(0), cmd.seq.eq(f.seq + reg[f.seq_r]), cmd.count.eq(f.count)]
                else:
                    m.d.sync += [cmd.append.eq(1), cmd.seq.eq(reg[f.seq_r]), cmd.count.eq(f.count),
                                 cmd.layer.eq(f.layer), cmd.kvh.eq(f.kvh), cmd.hd.eq(f.hd),
                                 cmd.k.eq(f.k + reg[f.k_r]), cmd.v.eq(f.v + reg[f.v_r]),
                                 cmd.pos.eq(reg[f.pos_r])]
                m.next = "KV_ISSUE"
            elif name == "ATTN":
                cmd = self.attn.cmd.payload
                m.d.sync += [cmd.layer.eq(f.layer), cmd.heads.eq(f.heads), cmd.kvh.eq(f.kvh),
                             cmd.hd.eq(f.hd), cmd.count.eq(f.count), cmd.dst.eq(f.dst + reg[f.dst_r]),
                             cmd.q.eq(f.q + reg[f.q_r]), cmd.pos.eq(reg[f.pos_r]),
                             cmd.seq.eq(reg[f.seq_r]), cmd.scale.eq(f.scale)]
                m.next = "ATTN_ISSUE"
            else:
                raise AssertionError(f"no execution for {name}")

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += between.eq(1)
                with m.If(self.start):
                    m.d.sync += [self.busy.eq(1), self.done.eq(0), self.pc.eq(0), self.steps.eq(0),
                                 self.cycles.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                m.d.comb += between.eq(1)
                with m.If(self.abort):
                    stop(Status.ABORTED)
                with m.Elif(self.pc >= self.prog_len):
                    stop(Status.PC_RANGE)
                with m.Elif(self.steps >= self.step_limit):
                    stop(Status.STEP_LIMIT)
                with m.Else():
                    m.d.comb += [prog_rd.addr.eq(self.pc), prog_rd.en.eq(1)]
                    m.next = "FETCH"

            with m.State("FETCH"):
                m.d.comb += between.eq(1)
                m.d.sync += [ir.eq(prog_rd.data), self.steps.eq(self.steps + 1)]
                m.next = "EXECUTE"

            with m.State("NEXT"):
                m.d.comb += between.eq(1)
                m.d.sync += self.pc.eq(self.pc + 1)
                m.next = "CHECK"

            with m.State("EXECUTE"):
                m.d.comb += between.eq(1)
                with m.Switch(ir.HALT.opcode):
                    for name in INSTRUCTIONS:
                        with m.Case(Opcode[name]):
                            m.d.sync += activity.eq(ACTIVITY_OF.get(name, Activity.OTHER))
                            with m.If(getattr(ir, name).stray != 0):
                                stop(Status.BAD_OPCODE)
                            with m.Else():
                                execute(name)
                    with m.Default():
                        stop(Status.BAD_OPCODE)

            # -- LDW / STW ----------------------------------------------------------------------------
            with m.State("LDW_READ"):
                with m.If(spad_check(ea + 1)):
                    stop(Status.SPAD_RANGE)
                with m.Else():
                    m.d.comb += [self.spad.rd_addr.eq(ea), self.spad.rd_en.eq(1)]
                    m.next = "LDW_WRITE"
            with m.State("LDW_WRITE"):
                write_reg(ir.LDW.rd, self.spad.rd_data)
                m.next = "NEXT"
            with m.State("STW_WRITE"):
                with m.If(spad_check(ea + 1)):
                    stop(Status.SPAD_RANGE)
                with m.Else():
                    m.d.comb += [self.spad.wr_addr.eq(ea), self.spad.wr_data.eq(reg[ir.STW.rs]),
                                 self.spad.wr_en.eq(1)]
                    m.next = "NEXT"

            # -- LOAD ---------------------------------------------------------------------------------
            with m.State("LOAD_SPAD"):              # prod is being computed
                with m.If(spad_check(ea + ir.LOAD.words)):
                    stop(Status.SPAD_RANGE)
                with m.Else():
                    m.next = "LOAD_ADDR"
            with m.State("LOAD_ADDR"):
                m.d.sync += [waddr.eq(ir.LOAD.w + prod), copy_dst.eq(ea),
                             copy_words.eq(ir.LOAD.words)]
                m.next = "LOAD_CHECK"
            with m.State("LOAD_CHECK"):
                weight_check(Cat(Const(0, 2), ir.LOAD.words), "COPY_REQUEST")

            # -- EMBED --------------------------------------------------------------------------------
            with m.State("EMBED_IDS"):              # prod is being computed
                with m.If(spad_check(ea + ir.EMBED.count)):
                    stop(Status.SPAD_RANGE)
                with m.Else():
                    m.next = "EMBED_DST"
            with m.State("EMBED_DST"):
                with m.If(spad_check(ea2 + ir.EMBED.count * ir.EMBED.row)):
                    stop(Status.SPAD_RANGE)
                with m.Else():
                    m.d.sync += [wbase.eq(ir.EMBED.w + prod), t.eq(0), copy_dst.eq(ea2)]
                    m.next = "EMBED_SCAN_READ"
            with m.State("EMBED_SCAN_READ"):
                m.d.comb += [self.spad.rd_addr.eq(ea + t), self.spad.rd_en.eq(1)]
                m.next = "EMBED_SCAN_CHECK"
            with m.State("EMBED_SCAN_CHECK"):
                with m.If(self.spad.rd_data >= ir.EMBED.vocab):
                    stop(Status.TOKEN_RANGE)
                with m.Elif(t + 1 == ir.EMBED.count):
                    m.d.sync += t.eq(0)
                    m.next = "EMBED_ROW_READ"
                with m.Else():
                    m.d.sync += t.eq(t + 1)
                    m.next = "EMBED_SCAN_READ"
            with m.State("EMBED_ROW_READ"):
                m.d.comb += [self.spad.rd_addr.eq(ea + t), self.spad.rd_en.eq(1)]
                m.next = "EMBED_ROW_MULTIPLY"
            with m.State("EMBED_ROW_MULTIPLY"):
                m.d.sync += [mul_a.eq(self.spad.rd_data), mul_b.eq(Cat(Const(0, 2), ir.EMBED.row))]
                m.next = "EMBED_ROW_WAIT"
            with m.State("EMBED_ROW_WAIT"):
                m.next = "EMBED_ROW_ADDR"
            with m.State("EMBED_ROW_ADDR"):
                m.d.sync += [waddr.eq(wbase + prod), copy_words.eq(ir.EMBED.row), in_embed.eq(1)]
                m.next = "EMBED_ROW_CHECK"
            with m.State("EMBED_ROW_CHECK"):
                weight_check(Cat(Const(0, 2), ir.EMBED.row), "COPY_REQUEST")
            with m.State("EMBED_ROW_DONE"):
                m.d.sync += in_embed.eq(0)
                with m.If(t + 1 == ir.EMBED.count):
                    m.next = "NEXT"
                with m.Else():
                    m.d.sync += t.eq(t + 1)
                    m.next = "EMBED_ROW_READ"

            # -- VOP and GEMM: the engines check and run them; GEMM's weight offset is made here ------
            with m.State("GEMM_MULTIPLY"):          # prod is being computed
                m.next = "GEMM_ADDR"
            with m.State("GEMM_ADDR"):
                m.d.sync += self.gemm.cmd.payload.w.eq(ir.GEMM.w + prod)
                m.next = "GEMM_ISSUE"
            for name, engine in (("VOP", self.vop), ("GEMM", self.gemm), ("KV", self.kv),
                                 ("ATTN", self.attn)):
                with m.State(f"{name}_ISSUE"):      # the command (its payload set before) ...
                    m.d.comb += engine.cmd.valid.eq(1)
                    with m.If(engine.cmd.ready):
                        m.next = f"{name}_WAIT"
                with m.State(f"{name}_WAIT"):       # ... then its status ends the instruction
                    m.d.comb += engine.resp.ready.eq(1)
                    with m.If(engine.resp.valid):
                        with m.If(engine.resp.payload.status == Status.OK):
                            m.next = "NEXT"
                        with m.Else():
                            stop(engine.resp.payload.status)

            # -- the copy engine: weight memory -> scratchpad, one word per cycle ---------------------
            with m.State("COPY_REQUEST"):
                m.d.comb += [self.wreq.valid.eq(1),
                             self.wreq.payload.addr.eq(self.weight_base + waddr),
                             self.wreq.payload.length.eq(Cat(Const(0, 2), copy_words))]
                with m.If(self.wreq.ready):
                    m.d.sync += [copy_left.eq(copy_words), beat_word.eq(0)]
                    m.next = "COPY_DATA"
            with m.State("COPY_DATA"):
                last_word = copy_left == 1
                with m.If(self.wdata.valid):
                    m.d.comb += [self.spad.wr_addr.eq(copy_dst), self.spad.wr_en.eq(1),
                                 self.spad.wr_data.eq(self.wdata.payload.data.word_select(beat_word, 32)),
                                 self.wdata.ready.eq((beat_word == words_per_beat - 1) | last_word)]
                    m.d.sync += [copy_dst.eq(copy_dst + 1), copy_left.eq(copy_left - 1),
                                 beat_word.eq(beat_word + 1)]
                    with m.If(last_word):
                        m.next = "COPY_END"
            with m.State("COPY_END"):
                with m.If(self.werror):
                    stop(Status.BUS_ERROR)
                with m.Elif(in_embed):
                    m.next = "EMBED_ROW_DONE"
                with m.Else():
                    m.next = "NEXT"

        return m
