"""Amaranth-simulator bench of the tile's control path (:class:`rtl.tile.control_path.ControlPath`:
sequencer, scratchpad, VOP engine, KV-cache slice, KV and attention engines), with models standing
in for the weight port, the GEMM engine and the vector unit, compared state for state with the ISS.

The weight port is modelled at its stream interface (byte ranges of an image, random gaps); the
vector unit at its stream interface too (:func:`vector_unit_model`: it consumes the operand beats
of every pass as the real unit does, checks that the passes of a row agree, and answers with the
results of :func:`sim_models.tile_iss.vop_result` beat by beat), so these tests check what the
control path moves and where, fast. The RTL vector unit and weight port join in the tile's cocotb
regression.
"""

import random
from dataclasses import dataclass

import numpy as np
from amaranth.sim import Simulator

from rtl.tile.control_path import ControlPath
from rtl.tile.perf_counters import Activity
from rtl.tile.vop_engine import PASS_OPERANDS
from rtl.vpu.layouts import OPERANDS, REDUCTIONS, Op
from sim_models import vpu
from sim_models.tile_isa import STATUS, VOPS, TileConfig, encode_program
from sim_models.tile_iss import TileFault, TileIss, vop_result

__all__ = ["Bench", "iss_run", "check_against_iss", "STATUS_CODE", "host_access",
           "receive", "wait_for", "vector_unit_model"]

STATUS_CODE = {name: code for code, name in STATUS.items()}


async def wait_for(ctx, signal):
    """Tick until the clock edge at which ``signal`` is high (a handshake completes at that edge).

    A plain loop rather than ``tick().until()``: a background testbench may be left suspended here
    when the simulation ends, and a suspended ``until`` cannot be closed cleanly.
    """
    while True:
        high = ctx.get(signal)
        await ctx.tick()
        if high:
            return


async def host_access(ctx, region, addr, data=None):
    """One host access through a region window; returns the word read (or None for a write)."""
    ctx.set(region.req.valid, 1)
    ctx.set(region.req.payload.addr, addr)
    ctx.set(region.req.payload.write, data is not None)
    ctx.set(region.req.payload.data, data or 0)
    await wait_for(ctx, region.req.ready)
    ctx.set(region.req.valid, 0)
    ctx.set(region.resp.ready, 1)
    while not ctx.get(region.resp.valid):
        await ctx.tick()
    word = ctx.get(region.resp.payload.data)
    await ctx.tick()
    ctx.set(region.resp.ready, 0)
    return None if data is not None else word


async def receive(ctx, port):
    """Accept one transfer on stream ``port`` (the bench is the sink); returns its payload."""
    ctx.set(port.ready, 1)
    while not ctx.get(port.valid):
        await ctx.tick()
    payload = ctx.get(port.payload)
    await ctx.tick()
    ctx.set(port.ready, 0)
    return payload


async def _stream_in(ctx, streams, rng, gaps):
    """Take one beat from every stream of ``streams`` at once (as the vector unit does)."""
    while rng.random() < gaps:
        await ctx.tick()
    while not all(ctx.get(s.valid) for s in streams):
        await ctx.tick()
    beats = [[ctx.get(s.payload[j]) for j in range(len(s.payload))] for s in streams]
    for s in streams:
        ctx.set(s.ready, 1)
    await ctx.tick()
    for s in streams:
        ctx.set(s.ready, 0)
    return beats


def _refused(op, length, s0, s1, config):
    """What the vector unit answers with an error beat (``rtl.vpu.vector_unit.VectorUnit``)."""
    if not 1 <= length <= vpu.MAX_LENGTH:
        return True
    if op == Op.RMSNORM:
        return (s0 >> 23 & 0xFF) == 0xFF or (s0 >> 31 and s0 & 0x7FFF_FFFF)
    if op == Op.ROPE:
        return length % 2 or length > config.vpu_rope_length
    if op == Op.TOPK:
        return not 1 <= s0 <= min(length, config.vpu_max_k)
    return False


async def vector_unit_model(ctx, engine, config, rng, gaps=0.3, log=None):
    """The vector unit at its streams: one command at a time, every pass of every row consumed,
    then the row's results. Asserts that the passes of a row bring the same row (``rope``'s first
    pass its rotation)."""
    lanes = config.lanes
    while True:
        cmd = await receive(ctx, engine.vcmd)
        op, n, rows = Op(cmd.op), cmd.length, max(cmd.rows, 1)
        if log is not None:
            log.append((op, n, rows))
        if _refused(op, n, cmd.scalar0, cmd.scalar1, config):
            await _emit(ctx, engine, [([0] * lanes, True)], rng, gaps, final=True)
        else:
            beats = -(-n // lanes)
            passes = PASS_OPERANDS.get(op, ("".join(OPERANDS[op]),))
            for r in range(rows):
                seen = []
                for names in passes:
                    rows_in = {x: [] for x in names}
                    for _ in range(beats):
                        got = await _stream_in(ctx, [getattr(engine, "v" + x) for x in names], rng, gaps)
                        for x, beat in zip(names, got, strict=True):
                            rows_in[x] += beat
                    seen.append({x: np.array(v[:n], dtype=np.uint32) for x, v in rows_in.items()})
                if op == Op.ROPE:
                    assert np.array_equal(seen[0]["a"], np.roll(seen[1]["a"], -(n // 2))), "rope pass 1"
                for later in seen[1:]:
                    if op != Op.ROPE:
                        assert np.array_equal(later["a"], seen[0]["a"]), "passes of a row differ"
                operands = {x: v[None, :] for p in seen for x, v in p.items()}
                if op == Op.ROPE:
                    operands["a"] = seen[1]["a"][None, :]
                words = vop_result(VOPS[op.value], operands, cmd.scalar0, cmd.scalar1, lanes)[0]
                if op == Op.TOPK:
                    k = cmd.scalar0
                    parts = [words[:k], words[k:]]
                elif op in REDUCTIONS:
                    parts = [words[:1]]
                else:
                    parts = [words]
                results = []
                for part in parts:
                    for at in range(0, len(part), lanes):
                        chunk = list(part[at:at + lanes]) + [0] * lanes
                        results.append(([int(w) for w in chunk[:lanes]], False))
                await _emit(ctx, engine, results, rng, gaps, final=r == rows - 1)


async def _emit(ctx, engine, beats, rng, gaps, final):
    """Result beats on ``vo``; with ``final``, the last one carries ``last`` (the command's end)."""
    for i, (words, error) in enumerate(beats):
        while rng.random() < gaps:
            await ctx.tick()
        ctx.set(engine.vo.valid, 1)
        for j, w in enumerate(words):
            ctx.set(engine.vo.payload.data[j], w)
        ctx.set(engine.vo.payload.error, error)
        ctx.set(engine.vo.payload.last, final and i == len(beats) - 1)
        await wait_for(ctx, engine.vo.ready)
        ctx.set(engine.vo.valid, 0)


@dataclass
class Bench:
    """Loads a program, registers and scratchpad words, runs the control path, reads everything back.

    ``image``: the weight memory; ``seed``, ``gaps``: the models' random idle cycles;
    ``bus_error_after``: the weight port reports an error response after that many beats;
    ``attention``: options of the attention engine.
    """
    config: TileConfig
    image: bytes = b""
    data_bytes: int = 8
    seed: int = 0
    gaps: float = 0.3
    bus_error_after: int | None = None
    head_dim: int = 32
    attention: dict | None = None

    gemm_status: int = 0

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.requests = []
        self.vpu_commands = []
        self.gemm_commands = []

    async def _gemm_model(self, ctx, seq):
        """Stands in for the GEMM engine while it is not part of the bench: records each command
        and answers ``gemm_status``."""
        while True:
            cmd = await receive(ctx, seq.gemm.cmd)
            self.gemm_commands.append({name: getattr(cmd, name) for name in
                                       ("dst", "src", "m", "k", "n", "w", "af", "wf")})
            ctx.set(seq.gemm.resp.valid, 1)
            ctx.set(seq.gemm.resp.payload.status, self.gemm_status)
            await wait_for(ctx, seq.gemm.resp.ready)
            ctx.set(seq.gemm.resp.valid, 0)

    async def serve_weights(self, ctx, seq):
        """The weight port at its stream interface (``seq.wreq``, ``seq.wdata``, ``seq.werror``):
        byte ranges of ``image``, random gaps, an error response after ``bus_error_after`` beats."""
        beats_served = 0
        while True:
            req = await receive(ctx, seq.wreq)
            addr, length = req.addr, req.length
            self.requests.append((addr, length))
            data = self.image[addr:addr + length].ljust(length, b"\0")
            for at in range(0, length, self.data_bytes):
                while self.rng.random() < self.gaps:
                    ctx.set(seq.wdata.valid, 0)
                    await ctx.tick()
                chunk = data[at:at + self.data_bytes].ljust(self.data_bytes, b"\0")
                ctx.set(seq.wdata.valid, 1)
                ctx.set(seq.wdata.payload.data, int.from_bytes(chunk, "little"))
                ctx.set(seq.wdata.payload.last, at + self.data_bytes >= length)
                await wait_for(ctx, seq.wdata.ready)
                beats_served += 1
                if self.bus_error_after is not None and beats_served > self.bus_error_after:
                    ctx.set(seq.werror, 1)
            ctx.set(seq.wdata.valid, 0)

    def run(self, program, *, regs=None, spad=None, step_limit=0xFFFF_FFFF, prog_len=None,
            abort_after=None, max_cycles=50_000):
        """Run ``program`` (instructions or an image); returns status, pc, steps, cycles, registers,
        scratchpad and program memory as read back through the host windows, and ``activity``: the
        run's cycles per :class:`~rtl.tile.perf_counters.Activity` name of the sequencer's
        ``activity`` (they add up to ``cycles``: asserted)."""
        dut = ControlPath(self.config, head_dim=self.head_dim, data_bytes=self.data_bytes,
                          attention=self.attention)
        seq = dut.seq
        image = program if isinstance(program, bytes) else encode_program(program)
        prog_len = len(image) // 32 if prog_len is None else prog_len
        out = {}

        async def host(ctx):
            ctx.set(seq.prog_len, prog_len)
            ctx.set(seq.step_limit, step_limit)
            ctx.set(seq.weight_base, 0)
            ctx.set(seq.weight_size, len(self.image))
            for i in range(0, len(image), 4):
                await host_access(ctx, seq.program, i // 4, int.from_bytes(image[i:i + 4], "little"))
            for r, value in (regs or {}).items():
                await host_access(ctx, seq.gpr, r, value)
            for addr, value in (spad or {}).items():
                await host_access(ctx, dut.spad.host, addr, int(value))
            ctx.set(seq.start, 1)
            await ctx.tick()
            ctx.set(seq.start, 0)
            stopped = 0
            activity = dict.fromkeys((a.name for a in Activity), 0)
            for cycle in range(max_cycles):
                if abort_after is not None and cycle == abort_after:
                    ctx.set(seq.abort, 1)
                *_, pulse, busy, code, doing = await ctx.tick().sample(seq.stopped, seq.busy, seq.code,
                                                                       seq.activity)
                stopped += pulse
                if busy:                            # the values of the cycle that just ended
                    activity[Activity(doing).name] += 1
                if pulse:
                    assert not busy and ctx.get(seq.code) == code, "the pulse comes with the stop"
                if not busy and stopped:
                    break
            else:
                raise AssertionError(f"no stop within {max_cycles} cycles")
            await ctx.tick()
            assert stopped == 1 and not ctx.get(seq.stopped), f"one stop pulse per run, saw {stopped}"
            assert ctx.get(seq.done)
            out.update(status=ctx.get(seq.code), pc=ctx.get(seq.pc), steps=ctx.get(seq.steps),
                       cycles=ctx.get(seq.cycles), activity=activity)
            assert sum(activity.values()) == out["cycles"], f"activity {activity}, {out['cycles']} cycles"
            out["regs"] = [await host_access(ctx, seq.gpr, r) for r in range(16)]
            out["spad"] = [await host_access(ctx, dut.spad.host, a) for a in range(self.config.spad_words)]
            out["program"] = [await host_access(ctx, seq.program, w) for w in range(len(image) // 4)]

        async def weight_memory(ctx):
            await self.serve_weights(ctx, seq)

        async def vector_unit(ctx):
            await vector_unit_model(ctx, dut.vop, self.config, random.Random(self.seed + 1), self.gaps,
                                    self.vpu_commands)

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(host)
        sim.add_testbench(weight_memory, background=True)
        sim.add_testbench(vector_unit, background=True)

        async def gemm_engine(ctx):
            await self._gemm_model(ctx, seq)

        sim.add_testbench(gemm_engine, background=True)
        sim.run()
        words = [int.from_bytes(image[i:i + 4], "little") for i in range(0, len(image), 4)]
        assert out["program"] == words, "program memory read back"
        return out


def iss_run(config, program, image, *, regs=None, spad=None, max_steps=10_000_000, head_dim=32):
    """The ISS's run of the same program: ``(iss, status, fault pc or None, steps or None)``."""
    iss = TileIss(config, image, head_dim=head_dim)
    for addr, value in (spad or {}).items():
        iss.spad[addr] = value
    try:
        steps = iss.run(program, regs=regs, max_steps=max_steps)
        return iss, 0, None, steps
    except TileFault as fault:
        return iss, fault.status, fault.pc, None


def check_against_iss(config, program, image=b"\0" * 64, *, regs=None, spad=None, step_limit=None,
                      seed=0, data_bytes=8, gaps=0.3, head_dim=32, max_cycles=50_000, attention=None):
    """Run on the RTL control path and on the ISS: status, fault pc (or steps), registers and the
    whole scratchpad must agree. Returns the RTL run's read-back. ``attention``: options of the
    attention engine (``rtl.tile.control_path.ControlPath``)."""
    bench = Bench(config, image, data_bytes=data_bytes, seed=seed, gaps=gaps, head_dim=head_dim,
                  attention=attention)
    limit = 0xFFFF_FFFF if step_limit is None else step_limit
    rtl = bench.run(program, regs=regs, spad=spad, step_limit=limit, max_cycles=max_cycles)
    iss, status, pc, steps = iss_run(config, program, image, regs=regs, spad=spad,
                                     max_steps=10_000_000 if step_limit is None else step_limit,
                                     head_dim=head_dim)
    assert rtl["status"] == status, f"status {STATUS[rtl['status']]} (RTL) vs {STATUS[status]} (ISS)"
    if pc is not None:
        assert rtl["pc"] == pc, f"stopped at {rtl['pc']} (RTL) vs {pc} (ISS)"
    else:
        assert rtl["steps"] == steps
    assert rtl["regs"] == [0] + iss.regs[1:], "registers"
    diff = [a for a in range(config.spad_words) if rtl["spad"][a] != int(iss.spad[a])]
    assert not diff, (f"scratchpad words {diff[:8]}... differ: RTL {[hex(rtl['spad'][a]) for a in diff[:4]]} "
                      f"ISS {[hex(int(iss.spad[a])) for a in diff[:4]]}")
    rtl["vpu_commands"] = bench.vpu_commands
    rtl["requests"] = bench.requests
    return rtl
