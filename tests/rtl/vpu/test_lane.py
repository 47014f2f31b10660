"""Lane: every element-wise operation against sim_models.vpu, in the Amaranth simulator.

For each operation, 150 operands of every binary32 class (uniform bit patterns, values near the
saturation limits, wide-range normals, specials) and random scalars, one per cycle; the result of
each is read ``latency_of(op)`` cycles later and compared bit for bit with the golden model.
"""

import numpy as np
import pytest
from amaranth.hdl import Fragment

from rtl.vpu.lane import Lane
from rtl.vpu.layouts import ELEMENTWISE, Op
from verification.pipeline import run_pipeline
from verification.vpu.env import model_result, random_job, random_operand

COUNT = 150


@pytest.mark.parametrize("op", ELEMENTWISE, ids=lambda op: op.name.lower())
def test_lane_matches_the_model(op):
    seed = 500 + op.value
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    job = random_job(rng, op, 1, max_rows=1)              # for its scalars (clamp bounds in order)
    job.x, job.b, job.c = (random_operand(rng, 1, COUNT) for _ in range(3))
    want = model_result(job, 1, 1).reshape(-1)
    dut = Lane()
    operands = zip(job.x[0], job.b[0], job.c[0], strict=True)
    vectors = [{"op": op, "a": int(a), "b": int(b), "c": int(c), "scalar0": job.scalar0,
                "scalar1": job.scalar1} for a, b, c in operands]
    got = run_pipeline(dut, vectors, ["result"], latency=dut.latency_of(op))
    bad = [f"{op.name.lower()}(a={v['a']:#010x}, b={v['b']:#010x}, c={v['c']:#010x}, "
           f"s0={v['scalar0']:#010x}, s1={v['scalar1']:#010x}): got {g['result']:#010x}, "
           f"expected {int(w):#010x}"
           for v, g, w in zip(vectors, got, want, strict=True) if g["result"] != int(w)]
    assert not bad, f"seed {seed}: {len(bad)} mismatches\n" + "\n".join(bad[:10])


def test_latencies_are_known_for_every_elementwise_op():
    lane = Lane()
    Fragment.get(lane, None)                               # elaborated, as the vector unit does
    assert all(lane.latency_of(op) >= 2 for op in ELEMENTWISE)
    assert lane.max_latency == max(lane.latency_of(op) for op in ELEMENTWISE)
    with pytest.raises(ValueError, match="not an element-wise"):
        lane.latency_of(Op.SUM)
