"""The vector unit over a sequence of commands (Amaranth simulator): what one command leaves behind
must not change the next one's results.

Regression: a softmax or rmsnorm row with a NaN or an infinity marks the row bad (all-NaN outputs);
the flag outlived the command, so the following ``scale``, ``add`` or ``rope`` commands came out
NaN too (found by the compute tile's attention on the RTL: a query head whose keys held a NaN
poisoned the scores of the next head)."""

import numpy as np
from amaranth.sim import Simulator

from rtl.tile.vop_engine import PASS_OPERANDS
from rtl.vpu.layouts import OPERANDS, Op
from rtl.vpu.vector_unit import VectorUnit
from sim_models.tile_iss import vop_result

LANES = 4
NAN, INF = 0x7FC00000, 0x7F800000


def _f(*values):
    return [int(v) for v in np.array(values, dtype=np.float32).view(np.uint32)]


def _run(commands):
    """Send each ``(op, operands {name: words}, scalar0)`` (one row) and return each result row."""
    dut = VectorUnit(LANES, max_k=4, rope_length=32)
    results = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        for op, operands, scalar0 in commands:
            n = len(operands["a"])
            ctx.set(dut.cmd.payload.op, op)
            ctx.set(dut.cmd.payload.length, n)
            ctx.set(dut.cmd.payload.rows, 1)
            ctx.set(dut.cmd.payload.scalar0, scalar0)
            ctx.set(dut.cmd.valid, 1)
            while not ctx.get(dut.cmd.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            out = []
            passes = PASS_OPERANDS.get(op, ("".join(OPERANDS[op]),))
            for k, names in enumerate(passes):
                for at in range(0, n, LANES):
                    streams = {x: getattr(dut, x) for x in names}
                    for x, port in streams.items():
                        words = operands[x]
                        if op == Op.ROPE and k == 0 and x == "a":          # rope's rotated pass
                            words = words[n // 2:] + words[:n // 2]
                        beat = (words[at:at + LANES] + [0] * LANES)[:LANES]
                        for j in range(LANES):
                            ctx.set(port.payload[j], beat[j])
                        ctx.set(port.valid, 1)
                    while True:
                        ready = ctx.get(dut.a.ready)
                        if ctx.get(dut.o.valid):
                            out += [ctx.get(dut.o.payload.data[j]) for j in range(LANES)]
                        await ctx.tick()
                        if ready:
                            break
                    for port in streams.values():
                        ctx.set(port.valid, 0)
            while len(out) < n:
                if ctx.get(dut.o.valid):
                    out += [ctx.get(dut.o.payload.data[j]) for j in range(LANES)]
                await ctx.tick()
            results.append(out[:n])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def test_a_bad_row_does_not_outlive_its_command():
    cos, sin = _f(1.0, 0.5, 0.0, -1.0), _f(0.0, 0.5, 1.0, 0.25)
    commands = [
        (Op.SOFTMAX, {"a": [NAN] + _f(1.0, 2.0)}, 0),
        (Op.SCALE, {"a": _f(3.0, -1.0, 7.0)}, _f(0.5)[0]),
        (Op.ROPE, {"a": _f(1.0, 2.0, 3.0, 4.0), "b": cos, "c": sin}, 0),
        (Op.RMSNORM, {"a": [INF] + _f(1.0), "b": _f(1.0, 2.0)}, _f(1e-5)[0]),
        (Op.ADD, {"a": _f(1.0, 2.0), "b": _f(3.0, 4.0)}, 0),
        (Op.SOFTMAX, {"a": _f(1.0, 2.0)}, 0),
        (Op.SOFTMAX, {"a": _f(1.0, 2.0, INF)}, 0),
        (Op.ROPE, {"a": _f(1.0, 2.0, 3.0, 4.0), "b": cos, "c": sin}, 0),
    ]
    got = _run(commands)
    for (op, operands, scalar0), row in zip(commands, got, strict=True):
        arrays = {x: np.array(v, dtype=np.uint32)[None, :] for x, v in operands.items()}
        want = [int(w) for w in vop_result(op.name.lower(), arrays, scalar0, 0, LANES)[0]]
        assert row == want, f"{op.name}: {[hex(w) for w in row]} vs {[hex(w) for w in want]}"
    assert got[0] == [NAN] * 3 and got[3] == [NAN] * 2, "the bad rows themselves stay NaN"
