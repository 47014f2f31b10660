"""MacArray in the Amaranth simulator: small GEMMs against sim_models.mx.matmul, and the result beat.

The cocotb regression (``test_mac_array_cocotb.py``) runs long random and adversarial GEMMs on
Verilator and Icarus; this fast test runs a 2 x 2 array (interleave 2, so two processing-element
columns pass the row lane's flags along) on GEMMs that start from +0 and from a supplied C, with
two blocks per tile (the first block initializes the accumulator, the second adds), random idle
cycles on the inputs, random stalls on ``o``, and garbage on ``c`` whenever it is not valid.
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.mx.layouts import FP32, result_beat
from rtl.mx.mac_array import MacArray
from sim_models import mx
from verification.mx import tiling

ROWS, COLS, INTERLEAVE = 2, 2, 2


def _operands(rng, m, n, k, with_c):
    a_codes = np.array([[rng.randrange(16) for _ in range(k)] for _ in range(m)], dtype=np.uint8)
    b_codes = np.array([[rng.randrange(16) for _ in range(n)] for _ in range(k)], dtype=np.uint8)
    a_scales = np.array([[rng.randrange(110, 140) for _ in range(k // 32)] for _ in range(m)], dtype=np.uint8)
    b_scales = np.array([[rng.randrange(110, 140) for _ in range(n)] for _ in range(k // 32)], dtype=np.uint8)
    c = None
    if with_c:
        c = np.array([[rng.uniform(-64, 64) for _ in range(n)] for _ in range(m)], dtype=np.float32)
    return a_codes, a_scales, b_codes, b_scales, c


@pytest.mark.parametrize("with_c", [False, True], ids=["zero-init", "with-c"])
def test_gemm_matches_the_model(with_c):
    seed = 30 + with_c
    print(f"seed {seed}")
    rng = random.Random(seed)
    m, n, k = ROWS, 2 * COLS * INTERLEAVE, 64               # two column tiles of two blocks each
    a_codes, a_scales, b_codes, b_scales, c = _operands(rng, m, n, k, with_c)
    plan = tiling.plan(m, n, k, rows=ROWS, cols=COLS, interleave=INTERLEAVE, has_c=with_c)
    assert [t.blocks for t in plan.tiles] == [2, 2]
    c_bits = tiling.as_bits(c, m, n)
    dut = MacArray(ROWS, COLS, interleave=INTERLEAVE, result_depth=4)
    queues = {
        dut.cmd: plan.commands(),
        dut.a: plan.a_beats(a_codes, a_scales),
        dut.b: plan.b_beats(b_codes, b_scales),
        dut.c: [beat for t in plan.tiles if t.has_c for beat in plan.c_beats_for(t, c_bits)],
    }
    results = []
    expected_beats = len(plan.tiles) * INTERLEAVE

    async def tb(ctx):
        presented = {stream: False for stream in queues}
        for _ in range(400):
            for stream, queue in queues.items():
                # Once valid, a beat stays until taken; a new one appears after a random idle.
                presented[stream] = bool(queue) and (presented[stream] or rng.random() < 0.75)
                ctx.set(stream.valid, presented[stream])
                if presented[stream]:
                    ctx.set(stream.payload.as_value(), queue[0])
                else:                                   # not valid: the payload is garbage
                    ctx.set(stream.payload.as_value(), rng.getrandbits(len(stream.payload.as_value())))
            ctx.set(dut.o.ready, rng.random() < 0.7)
            sampled = await ctx.tick().sample(*(s.ready for s in queues), dut.o.valid, dut.o.ready,
                                              dut.o.payload.as_value())
            readies, (o_valid, o_ready, o_payload) = sampled[2:2 + len(queues)], sampled[-3:]
            for (stream, queue), ready in zip(queues.items(), readies, strict=True):
                if presented[stream] and ready:
                    queue.pop(0)
                    presented[stream] = False
            if o_valid and o_ready:
                results.append(o_payload)
            if len(results) == expected_beats:
                break
        assert not any(queues.values()), f"seed {seed}: beats left unsent {[len(q) for q in queues.values()]}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(results) == expected_beats, f"seed {seed}: {len(results)} result beats of {expected_beats}"
    out = np.zeros((m, n), dtype=np.uint32)
    for index, tile in enumerate(plan.tiles):                 # also checks each beat's `last`
        plan.scatter(tile, results[index * INTERLEAVE:(index + 1) * INTERLEAVE], out)
    want = mx.matmul(a_codes, a_scales, b_codes, b_scales, c).view(np.uint32)
    bad = np.argwhere(out != want)
    assert not len(bad), (f"seed {seed}: {len(bad)} outputs differ; first at {tuple(bad[0])}: "
                          f"{out[tuple(bad[0])]:#010x}, expected {want[tuple(bad[0])]:#010x}")


def test_result_beat_is_the_tile_slice_then_a_one_bit_last_flag():
    """The ``o`` payload, as every testbench and driver packs it: ``[row][col]`` binary32 values
    (row 0, column 0 in the low bits) and, above them, the one-bit ``last`` flag."""
    for rows, cols in ((1, 1), (2, 3), (4, 4)):
        layout = result_beat(rows, cols)
        data = rows * cols * FP32
        assert layout.size == data + 1
        assert (layout["data"].offset, layout["last"].offset, layout["last"].width) == (0, data, 1)
