"""KV engine (with the real KV-cache controller and scratchpad) against the ISS: KVOPEN and KVAPPEND
statuses in the ISS's order of checks, and the whole KV cache afterwards.

After every scenario (and at its checkpoints) the bench reads the controller back through its read
port: for each sequence the ISS's records ``0 .. length - 1`` (with their status), then one record
at ``length`` (``out_of_range`` proves the length, ``not_live`` a closed sequence), and a ``STAT``
(free pages, live sequences), all compared with ``TileIss.kv``. ``KV_ENGINE_SEED=<n>`` reruns the
random test with seed ``n``.
"""

import os
import random
from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.sim import Simulator

from rtl.kv.kv_cache import KvCache
from rtl.kv.layouts import Op as KvOp
from rtl.tile.kv_engine import KvEngine, to_bfloat16
from rtl.tile.layouts import KvCommand
from rtl.tile.scratchpad import Scratchpad
from sim_models import vpu
from sim_models.kv_cache import STATUSES
from sim_models.tile_isa import STATUS, Instruction, TileConfig
from sim_models.tile_iss import TileFault, TileIss
from verification.packing import pack, unpack

HD = 32
TILE = TileConfig(spad_words=512, lanes=4, kv_pages=8, kv_page_tokens=4, kv_seqs=4, kv_max_pages_per_seq=4)
SMALL_KV = TileConfig(spad_words=512, lanes=4, kv_pages=3, kv_page_tokens=4, kv_seqs=4,
                      kv_max_pages_per_seq=2)      # 3 pages of 4 records, at most 8 records a sequence
K_AT, V_AT = 0, 256                     # default K and V regions
MAX_CYCLES = 20_000

BF16_CORNERS = [                # (binary32, its bfloat16)
    (0x3F808000, 0x3F80),   # tie, even below: down
    (0x3F818000, 0x3F82),   # tie, odd below: up
    (0x3F807FFF, 0x3F80),   # just below the tie
    (0x3F808001, 0x3F81),   # just above the tie
    (0x3FFF8000, 0x4000),   # tie up, carry into the exponent
    (0x3FFFFFFF, 0x4000),
    (0x7F7FFFFF, 0x7F80),   # overflow to Inf
    (0x7F7F8000, 0x7F80),   # tie at the largest binade: odd, up to Inf
    (0xFF7FFFFF, 0xFF80),   # to -Inf
    (0x7F800000, 0x7F80),   # Inf
    (0xFF800000, 0xFF80),
    (0x7FC00000, 0x7FC0),   # NaN -> the canonical NaN, whatever its sign and payload
    (0x7F800001, 0x7FC0),
    (0xFF800001, 0x7FC0),
    (0xFFFFFFFF, 0x7FC0),
    (0x7FFF8000, 0x7FC0),
    (0x80000000, 0x8000),   # -0
    (0x00000000, 0x0000),
    (0x00000001, 0x0000),   # subnormals
    (0x00008000, 0x0000),   # tie, even: down
    (0x00018000, 0x0002),   # tie, odd: up
    (0x807FFFFF, 0x8080),   # largest subnormal rounds to the smallest normal
    (0x007F7FFF, 0x007F),
    (0x80008001, 0x8001),
]


# -- operations: an ISA instruction with its registers, and the command the sequencer would send ----

@dataclass
class KvOperation:
    instruction: Instruction
    regs: dict
    command: dict
    label: str = ""


CHECK = "check"
"""A checkpoint in a scenario: the KV state is compared there too."""


def kvopen(seq, count, reg=0):
    """``KVOPEN seq count seq_r=r1`` with ``r1 = reg``."""
    return KvOperation(Instruction("KVOPEN", dict(seq=seq, seq_r=1, count=count)), {1: reg},
                       dict(append=0, seq=seq + reg, count=count), f"KVOPEN {seq}+{reg} x{count}")


def kvappend(*, seq, pos, count=1, kvh=1, layer=0, hd=HD, k=K_AT, v=V_AT, k_reg=0, v_reg=0):
    """``KVAPPEND`` with ``r1 = seq``, ``r2 = pos``, ``r3``/``r4`` added to ``k``/``v``."""
    fields = dict(layer=layer, kvh=kvh, hd=hd, count=count, k=k, k_r=3, v=v, v_r=4, pos_r=2, seq_r=1)
    command = dict(append=1, seq=seq, layer=layer, kvh=kvh, hd=hd, count=count, k=k + k_reg,
                   v=v + v_reg, pos=pos)
    return KvOperation(Instruction("KVAPPEND", fields), {1: seq, 2: pos, 3: k_reg, 4: v_reg}, command,
                       f"KVAPPEND seq={seq} pos={pos} count={count} kvh={kvh} layer={layer} hd={hd} "
                       f"k={k}+{k_reg} v={v}+{v_reg}")


# -- the bench --------------------------------------------------------------------------------------

class Harness(Elaboratable):
    """KvEngine joined to a KvCache and a Scratchpad; ``bypass`` hands the controller's command port
    to the testbench (``tb_cmd``, ``tb_reply_ready``) for STAT."""

    def __init__(self, config, head_dim):
        self.engine = KvEngine(config, head_dim)
        g = self.engine.geometry
        self.kv = KvCache(**g.config.as_dict())
        self.spad = Scratchpad(config.spad_words, config.lanes)
        self.bypass = Signal()
        self.tb_cmd = stream.Signature(g.command_layout()).create(path=("tb_cmd",))
        self.tb_reply_ready = Signal()

    def elaborate(self, platform):
        m = Module()
        engine, kv, spad, tb = self.engine, self.kv, self.spad, self.tb_cmd
        m.submodules.engine, m.submodules.kv, m.submodules.spad = engine, kv, spad
        wiring.connect(m, engine.spad, spad.wide)
        with m.If(self.bypass):
            m.d.comb += [kv.cmd.valid.eq(tb.valid), kv.cmd.payload.eq(tb.payload),
                         tb.ready.eq(kv.cmd.ready), kv.cmd_reply.ready.eq(self.tb_reply_ready)]
        with m.Else():
            m.d.comb += [kv.cmd.valid.eq(engine.kv_cmd.valid), kv.cmd.payload.eq(engine.kv_cmd.payload),
                         engine.kv_cmd.ready.eq(kv.cmd.ready), kv.cmd_reply.ready.eq(engine.kv_reply.ready)]
        m.d.comb += [engine.kv_reply.valid.eq(kv.cmd_reply.valid & ~self.bypass),
                     engine.kv_reply.payload.eq(kv.cmd_reply.payload),
                     spad.host_enable.eq(0)]
        return m


async def _wait_for(ctx, signal, limit=MAX_CYCLES):
    """Tick until the clock edge at which ``signal`` is high; returns the cycles waited (>= 1)."""
    for cycles in range(1, limit + 1):
        high = ctx.get(signal)
        await ctx.tick()
        if high:
            return cycles
    raise AssertionError(f"{signal.name} stayed low for {limit} cycles")


def expected_state(iss):
    """The KV state as the bench reads it back, from the ISS's controller model."""
    kv = iss.kv
    seqs = []
    for s in range(kv.config.seqs):
        if kv.live[s]:
            seqs.append(("ok", kv.read(s, 0, kv.length[s])["data"], "out_of_range"))
        else:
            seqs.append(("not_live", [], "not_live"))
    return {"free_pages": kv.free_pages, "live_seqs": kv.live_seqs, "seqs": seqs}


@dataclass
class Result:
    statuses: list = field(default_factory=list)        # RTL status names (the ISS's too)
    cycles: list = field(default_factory=list)          # RTL cycles, command accepted to status valid
    appends: list = field(default_factory=list)         # cycles at which the engine's appends went out


def run(config, ops, *, spad=None, head_dim=HD, seed=0, gaps=False):
    """Run ``ops`` (and ``CHECK`` points) on the ISS and on the RTL; assert that every status and
    the KV state at every checkpoint and at the end agree. Returns a :class:`Result`."""
    spad = spad or {}
    rng = random.Random(seed)
    iss = TileIss(config, weights=b"", head_dim=head_dim)
    for addr, word in spad.items():
        iss.spad[addr] = word
    iss_statuses, iss_states = [], []
    for op in ops:
        if op == CHECK:
            iss_states.append(expected_state(iss))
            continue
        try:
            iss.run([op.instruction, Instruction("HALT")], regs=op.regs)
            iss_statuses.append("ok")
        except TileFault as fault:
            iss_statuses.append(fault.status_name)
    iss_states.append(expected_state(iss))

    dut = Harness(config, head_dim)
    engine, kv, g = dut.engine, dut.kv, dut.engine.geometry
    result, rtl_states = Result(), []
    cycle = [0]

    async def monitor(ctx):
        while True:
            assert not ctx.get(engine.spad.wr_en), "the engine only reads the scratchpad"
            assert not (ctx.get(engine.spad.rd_en) and ctx.get(engine.ctl.cmd.ready)), "reads while idle"
            if not ctx.get(dut.bypass) and ctx.get(kv.cmd.valid) and ctx.get(kv.cmd.ready) \
                    and ctx.get(kv.cmd.payload.op) == KvOp.APPEND:
                result.appends.append(cycle[0])
            await ctx.tick()
            cycle[0] += 1

    async def stat(ctx):
        ctx.set(dut.bypass, 1)
        ctx.set(dut.tb_cmd.payload.as_value(), pack(g.command_layout(), dict(op=KvOp.STAT)))
        ctx.set(dut.tb_cmd.valid, 1)
        await _wait_for(ctx, dut.tb_cmd.ready)
        ctx.set(dut.tb_cmd.valid, 0)
        ctx.set(dut.tb_reply_ready, 1)
        while not ctx.get(kv.cmd_reply.valid):
            await ctx.tick()
        reply = unpack(g.command_reply_layout(), ctx.get(kv.cmd_reply.payload.as_value()))
        await ctx.tick()
        ctx.set(dut.tb_reply_ready, 0)
        ctx.set(dut.bypass, 0)
        return reply

    async def read(ctx, seq, start, count):
        ctx.set(kv.rd.payload.as_value(), pack(g.read_layout(), dict(seq=seq, start=start, count=count)))
        ctx.set(kv.rd.valid, 1)
        ctx.set(kv.rd_reply.ready, 1)
        await _wait_for(ctx, kv.rd.ready)
        ctx.set(kv.rd.valid, 0)
        items = []
        for _ in range(MAX_CYCLES):
            if ctx.get(kv.rd_reply.valid):
                items.append(unpack(g.read_reply_layout(), ctx.get(kv.rd_reply.payload.as_value())))
                if items[-1]["last"]:
                    break
            await ctx.tick()
        await ctx.tick()
        ctx.set(kv.rd_reply.ready, 0)
        assert not any(i["corrected"] or i["poisoned"] for i in items)
        status = STATUSES[items[0]["status"]]
        data = [] if items[0]["empty"] else [i["data"] for i in items]
        return status, data

    async def read_state(ctx):
        reply = await stat(ctx)
        seqs = []
        for s, (_, records, _) in enumerate(iss_states[len(rtl_states)]["seqs"]):
            status, data = await read(ctx, s, 0, len(records))
            probe, _ = await read(ctx, s, len(records), 1)
            seqs.append((status, data, probe))
        return {"free_pages": reply["free_pages"], "live_seqs": reply["live_seqs"], "seqs": seqs}

    async def execute(ctx, command):
        ctx.set(engine.ctl.cmd.payload.as_value(), pack(KvCommand, command))
        ctx.set(engine.ctl.cmd.valid, 1)
        cycles = await _wait_for(ctx, engine.ctl.cmd.ready)
        ctx.set(engine.ctl.cmd.valid, 0)
        start = cycles
        while not ctx.get(engine.ctl.resp.valid):
            await ctx.tick()
            cycles += 1
            assert cycles < MAX_CYCLES, "no status"
        status = unpack(engine.ctl.resp.payload.shape(), ctx.get(engine.ctl.resp.payload.as_value()))
        for _ in range(rng.randrange(3) if gaps else 0):
            await ctx.tick()
            assert ctx.get(engine.ctl.resp.valid), "the status is held until taken"
        ctx.set(engine.ctl.resp.ready, 1)
        await ctx.tick()
        ctx.set(engine.ctl.resp.ready, 0)
        return STATUS[status["status"]], cycles - start + 1

    async def bench(ctx):
        for addr, word in spad.items():
            ctx.set(dut.spad.core.wr_en, 1)
            ctx.set(dut.spad.core.wr_addr, addr)
            ctx.set(dut.spad.core.wr_data, word)
            await ctx.tick()
        ctx.set(dut.spad.core.wr_en, 0)
        for op in ops:
            if op == CHECK:
                rtl_states.append(await read_state(ctx))
                continue
            status, cycles = await execute(ctx, op.command)
            result.cycles.append(cycles)
            result.statuses.append(status)
        rtl_states.append(await read_state(ctx))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(bench)
    sim.run()

    labels = [op.label for op in ops if op != CHECK]
    for label, rtl_status, iss_status in zip(labels, result.statuses, iss_statuses, strict=True):
        assert rtl_status == iss_status, f"{label}: {rtl_status} (RTL) vs {iss_status} (ISS)"
    for n, (rtl_state, iss_state) in enumerate(zip(rtl_states, iss_states, strict=True)):
        for s, (got, want) in enumerate(zip(rtl_state["seqs"], iss_state["seqs"], strict=True)):
            assert got == want, f"checkpoint {n}: sequence {s} differs: RTL {got[0]}, {len(got[1])} " \
                                f"records, probe {got[2]}; ISS {want[0]}, {len(want[1])} records"
        assert rtl_state == iss_state, f"checkpoint {n}: free pages / live sequences differ"
    return result


def _spad(seed, count=TILE.spad_words):
    """``count`` words from 0: random binary32 values, one in 16 a rounding corner."""
    rng = random.Random(seed)
    words = np.array([rng.uniform(-8, 8) for _ in range(count)], dtype=np.float32).view(np.uint32)
    return {a: rng.choice(BF16_CORNERS)[0] if rng.random() < 1 / 16 else int(w) for a, w in enumerate(words)}


# -- parameters -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("config", "head_dim", "match"), [
    (TILE, 48, "head_dim"),
    (TILE, 0, "head_dim"),
    (TILE, 4096, "head_dim"),
    (TileConfig(spad_words=512, lanes=64), 96, r"lanes \(64\).*head_dim \(96\)"),
])
def test_parameters_are_checked(config, head_dim, match):
    with pytest.raises(ValueError, match=match):
        KvEngine(config, head_dim)


# -- the rounding -----------------------------------------------------------------------------------

def test_to_bfloat16_matches_the_golden_model():
    word = Signal(32)
    out = Signal(16)
    m = Module()
    m.d.comb += out.eq(to_bfloat16(word))
    rng = random.Random(3)
    words = [w for w, _ in BF16_CORNERS] + [rng.getrandbits(32) for _ in range(3000)] + \
        [(rng.getrandbits(9) << 23) | rng.choice([0x7FFF, 0x8000, 0x18000, 0x7FFFFF, 0x408000])
         for _ in range(500)]
    got = []

    async def bench(ctx):
        for w in words:
            ctx.set(word, w)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    want = vpu.to_bfloat16(np.array(words, dtype=np.uint32).view(np.float32))
    assert got == [int(x) for x in want]
    assert got[:len(BF16_CORNERS)] == [b for _, b in BF16_CORNERS]


def test_every_rounding_corner_reaches_the_records():
    corners = [w for w, _ in BF16_CORNERS]
    k_words = (corners * 3)[:2 * HD + 5]
    v_words = list(reversed(corners * 3))[:2 * HD + 5]
    spad = {K_AT + i: w for i, w in enumerate(k_words)} | {V_AT + i: w for i, w in enumerate(v_words)}
    r = run(TILE, [kvopen(0, 2), kvappend(seq=0, pos=0, count=1, kvh=2),
                   kvappend(seq=0, pos=1, count=1, kvh=2, k=K_AT + 5, v=V_AT + 3)], spad=spad)
    assert r.statuses == ["ok"] * 3


# -- KVOPEN -----------------------------------------------------------------------------------------

def test_open_in_order_and_stop_at_the_first_refusal():
    r = run(TILE, [kvopen(0, 2), kvopen(1, 0), CHECK,
                   kvopen(1, 2),                   # 1 is live: nothing opened
                   kvopen(2, 3),                   # 2 and 3 open, 4 is no sequence
                   kvopen(0, 1, reg=1)])           # 1 again
    assert r.statuses == ["ok", "ok", "kv_error", "kv_error", "kv_error"]


def test_open_ids_too_wide_for_the_controller_do_not_alias():
    wide = (1 << 32) + 2                           # low bits: sequence 2, not live
    r = run(TILE, [kvopen(0, 1), kvopen(0xFFFF, 1, reg=wide - 0xFFFF), kvopen(8 + 2, 1),
                   kvopen(0xFFFF, 3, reg=0xFFFF_FFFF), kvopen(0, 1, reg=4), CHECK, kvopen(1, 3)])
    assert r.statuses == ["ok", "kv_error", "kv_error", "kv_error", "kv_error", "ok"]


# -- KVAPPEND ---------------------------------------------------------------------------------------

def test_append_heads_layers_and_registers():
    ops = [kvopen(0, 4),
           # layer 1, 2 heads: sequences r1 + 1*2 + g = 2, 3; three positions; k, v with registers
           kvappend(seq=0, pos=0, count=3, kvh=2, layer=1, k=100, k_reg=20, v=300, v_reg=7),
           CHECK,
           kvappend(seq=2, pos=3, count=2, kvh=2, layer=0, k=5, v=261),
           kvappend(seq=1, pos=0, count=1, kvh=1, layer=0, k=0, k_reg=3, v=0, v_reg=450),
           kvappend(seq=0, pos=0, count=4, kvh=1, layer=0, k=33, v=200),    # a whole page
           kvappend(seq=0, pos=4, count=1, kvh=1, layer=0, k=480, v=480)]   # the next, to the end
    r = run(TILE, ops, spad=_spad(11))
    assert r.statuses == ["ok"] * 6


def test_position_mismatch_is_undone():
    ops = [kvopen(0, 3), kvappend(seq=0, pos=0, count=2), kvappend(seq=1, pos=0, count=4), CHECK,
           kvappend(seq=0, pos=1),                 # shorter than the sequence
           kvappend(seq=0, pos=3),                 # longer
           kvappend(seq=0, pos=2 + 32),            # equal in the bits of the reply's position
           kvappend(seq=0, pos=0x8000_0002),
           kvappend(seq=1, pos=3, count=2),        # its page is full: the undo frees a new one
           kvappend(seq=1, pos=5, count=2),
           CHECK,
           # head 0 (sequence 1) fits, head 1 (sequence 2) holds 0 records, not 4: head 0 keeps its
           kvappend(seq=1, pos=4, count=1, kvh=2),
           kvappend(seq=0, pos=2, count=1, kvh=3)]  # sequence 1 now holds 5: stops at head 1
    r = run(TILE, ops, spad=_spad(12))
    assert r.statuses == ["ok"] * 3 + ["kv_error"] * 8


def test_not_live_and_missing_sequences():
    ops = [kvopen(1, 1),
           kvappend(seq=0, pos=0),                 # not live
           kvappend(seq=1, pos=0, kvh=2, count=2),  # sequence 1 appended, 2 not live
           kvappend(seq=3, pos=0, kvh=2),           # 3 not live
           kvappend(seq=1, pos=2, kvh=1, layer=3),  # 1 + 3: sequence 4 does not exist
           kvappend(seq=0xFFFF_FFFF, pos=0, kvh=2, layer=0xFFF),   # far beyond, must not alias
           kvappend(seq=0xFFFF_FFFF, pos=2, layer=2),   # 2**32 + 1: sequence 1 in 32 bits
           kvappend(seq=9, pos=2),                 # 8 + 1 would alias sequence 1 in 3 bits
           kvappend(seq=1, pos=2)]
    r = run(TILE, ops, spad=_spad(13))
    assert r.statuses == ["ok"] + ["kv_error"] * 7 + ["ok"]


def test_sequence_full_and_no_space():
    # SMALL_KV: 3 pages of 4 records, at most 2 pages (8 records) a sequence
    ops = [kvopen(0, 3),
           kvappend(seq=0, pos=0, count=8),       # two pages: full
           kvappend(seq=0, pos=8),                # seq_full
           kvappend(seq=0, pos=7),                # full and a mismatch
           kvappend(seq=1, pos=0, count=3),       # the last page
           CHECK,
           kvappend(seq=1, pos=2),                # a mismatch in place: undone
           kvappend(seq=2, pos=0),                # no_space
           kvappend(seq=1, pos=3, count=2),       # one fits, then no_space: that one stays
           kvappend(seq=1, pos=4),                # a new page: no_space
           kvappend(seq=1, pos=1)]                # a mismatch and no space
    r = run(SMALL_KV, ops, spad=_spad(14))
    assert r.statuses == ["ok", "ok", "kv_error", "kv_error", "ok"] + ["kv_error"] * 5


def test_undo_frees_the_page_it_took():
    ops = [kvopen(0, 3),
           kvappend(seq=0, pos=0, count=4), kvappend(seq=1, pos=0, count=4),   # one page left
           CHECK,
           kvappend(seq=1, pos=2),                # holds 4: the append takes the last page ...
           kvappend(seq=1, pos=5),
           kvappend(seq=2, pos=0, count=2)]       # ... which must be free again
    r = run(SMALL_KV, ops, spad=_spad(15))
    assert r.statuses == ["ok", "ok", "ok", "kv_error", "kv_error", "ok"]


FAULTS = [
    (dict(hd=64), "bad_field"),
    (dict(hd=0), "bad_field"),
    (dict(hd=31), "bad_field"),
    (dict(kvh=0), "bad_field"),
    (dict(count=0), "bad_field"),
    (dict(hd=64, k=0xFFFFF), "bad_field"),                 # the fields before the ranges
    (dict(kvh=0, k_reg=0xFFFF_FFFF), "bad_field"),
    (dict(k=500), "spad_range"),                           # 500 + 32 > 512
    (dict(v=481), "spad_range"),
    (dict(k=0xFFFFF, k_reg=0xFFFF_FFFF), "spad_range"),    # far beyond: no wrap
    (dict(v=0xFFFFF, v_reg=0xFFFF_FFFF), "spad_range"),
    (dict(k=600, v=600), "spad_range"),
    (dict(count=4095, kvh=255), "spad_range"),             # a span of 33 million words
    (dict(count=4033, kvh=130), "spad_range"),             # 2**24 + 64 words: no bit dropped
    (dict(count=3, kvh=3, k=224), "spad_range"),           # K ends at 512, V at 256 + 288
    (dict(k=481, seq=3), "spad_range"),                    # the ranges before the sequence
    (dict(seq=3, hd=16), "bad_field"),
    (dict(seq=3), "kv_error"),
    (dict(pos=1), "kv_error"),
    (dict(k=480, v=480), "ok"),                            # K and V to the last word
]


def test_faults_in_order():
    ops = [kvopen(0, 1)] + [kvappend(**(dict(seq=0, pos=0) | fields)) for fields, _ in FAULTS]
    r = run(TILE, ops, spad=_spad(16))
    assert r.statuses == ["ok"] + [status for _, status in FAULTS]


def test_cycles_per_record():
    r = run(TILE, [kvopen(0, 1), kvappend(seq=0, pos=0, count=8)], spad=_spad(17))
    gaps = [int(x) for x in np.diff(r.appends)]
    print(f"lanes {TILE.lanes}, head_dim {HD}: appends every {gaps} cycles, "
          f"{r.cycles[1]} cycles for 8 records")
    assert gaps == [2 * HD // TILE.lanes + 1] * 7


@pytest.mark.parametrize(("lanes", "head_dim"), [(8, 64), (64, 32)])
def test_other_row_widths(lanes, head_dim):
    config = TileConfig(spad_words=1024, lanes=lanes, kv_pages=8, kv_page_tokens=4, kv_seqs=4,
                        kv_max_pages_per_seq=4)
    end = config.spad_words - head_dim
    ops = [kvopen(0, 4),
           kvappend(seq=0, pos=0, count=3, kvh=2, hd=head_dim, k=1, v=517),
           kvappend(seq=1, pos=3, count=2, hd=head_dim, k=7, v=400),
           kvappend(seq=2, pos=0, count=2, kvh=2, hd=head_dim, k=9, v=600),
           kvappend(seq=0, pos=1, hd=head_dim),
           kvappend(seq=0, pos=3, hd=head_dim, k=end, v=end)]
    r = run(config, ops, spad=_spad(18, config.spad_words), head_dim=head_dim)
    assert r.statuses == ["ok"] * 4 + ["kv_error", "ok"]
    gaps = [int(x) for x in np.diff(r.appends[:6])]
    print(f"lanes {lanes}, head_dim {head_dim}: appends every {gaps} cycles")
    assert max(gaps[:2]) == max(2 * head_dim // min(lanes, head_dim) + 1, 8)


# -- random -----------------------------------------------------------------------------------------

def _random_ops(rng, config, n):
    """Some sequences opened, then ``n`` KVOPEN and KVAPPEND, mostly valid: the position mostly what
    the first head's sequence holds (from a shadow ISS), ranges mostly inside the scratchpad."""
    shadow = TileIss(config, weights=b"", head_dim=HD)
    seqs = config.kv_seqs
    ops = []

    def add(op):
        ops.append(op)
        try:
            shadow.run([op.instruction, Instruction("HALT")], regs=op.regs)
        except TileFault:
            pass

    add(kvopen(0, seqs if rng.random() < 0.7 else rng.randrange(1, seqs + 1)))
    for _ in range(n):
        if rng.random() < 0.15:
            add(kvopen(rng.randrange(seqs + 2), rng.choice([0, 1, 1, 2, 3])))
        else:
            kvh, count = rng.choice([1, 1, 2, 2, 3]), rng.choice([1, 1, 2, 3])
            lengths = shadow.kv.length
            even = [f for f in range(seqs - kvh + 1) if len({lengths[f + g] for g in range(kvh)}) == 1]
            if even and rng.random() < 0.9:         # heads that hold the same number of records
                first = rng.choice(even)
            else:
                first = rng.randrange(seqs - kvh + 1) if rng.random() < 0.8 else rng.randrange(seqs + 2)
            layer = rng.randrange(first // kvh + 1)
            seq = first - layer * kvh
            known = first < seqs and rng.random() < 0.9
            pos = shadow.kv.length[first] if known else rng.randrange(6)
            span = count * kvh * HD
            k = rng.randrange(config.spad_words - span + 1 if rng.random() < 0.95 else config.spad_words)
            v = rng.randrange(config.spad_words - span + 1)
            hd = HD if rng.random() < 0.95 else rng.choice([0, 16, 64])
            add(kvappend(seq=seq, pos=pos, count=count, kvh=kvh, layer=layer, hd=hd, k=k, v=v))
        if rng.random() < 0.1:
            ops.append(CHECK)
    return ops


SEEDS = [int(os.environ["KV_ENGINE_SEED"])] if "KV_ENGINE_SEED" in os.environ else [1, 2, 3, 4]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_programs(seed):
    print(f"seed {seed} (KV_ENGINE_SEED={seed} reruns it)")
    rng = random.Random(seed)
    ops = _random_ops(rng, TILE, 16)
    r = run(TILE, ops, spad=_spad(seed), seed=seed, gaps=True)
    print({name: r.statuses.count(name) for name in sorted(set(r.statuses))})
