"""Multiplier against Python integer products, in the Amaranth simulator.

Both implementations (``dsp`` tiles, ``lut`` partial products) for variable and constant operands,
with and without an addend, at their natural depth and squeezed or stretched ``stages``; all-ones
operands (the carries of every adder) and seeded random ones, streamed one per cycle, ``en`` toggled.
"""

import random

import pytest

from rtl.vpu.multiplier import Multiplier, csd_digits, natural_stages
from sim_models import vpu
from verification.pipeline import random_enable, run_pipeline

# (a_width, b_width, constant, addend_width, addend_shift): the vector unit's products and odd shapes.
SHAPES = [
    (24, 34, vpu.LOG2E_Q33, 0, 0),
    (18, 18, vpu.LN2_Q18, 0, 0),
    (33, 24, None, 33, 32),
    (17, 18, None, 33, 18),
    (24, 24, None, 0, 0),
    (5, 3, None, 0, 0),
    (1, 1, None, 0, 0),
    (7, 9, 5, 0, 0),
    (12, 16, 0xFFFF, 4, 0),
    (3, 40, None, 2, 50),
]


def check(shape, mode, seed, stages=None, count=150, enable_pattern=None):
    print(f"seed {seed}")
    a_width, b_width, constant, addend_width, addend_shift = shape
    rng = random.Random(seed)
    ones = ((1 << a_width) - 1, constant or (1 << b_width) - 1, (1 << addend_width) - 1)
    vectors = [ones, (0, constant or 0, 0)] + [
        (rng.getrandbits(a_width), constant or rng.getrandbits(b_width), rng.getrandbits(addend_width))
        for _ in range(count)]
    dut = Multiplier(a_width, b_width, mode=mode, stages=stages, constant=constant,
                     addend_width=addend_width, addend_shift=addend_shift)
    ports = [{"a": a, **({"b": b} if constant is None else {}), **({"addend": c} if addend_width else {})}
             for a, b, c in vectors]
    got = [r["p"] for r in run_pipeline(dut, ports, ["p"], enable_pattern=enable_pattern)]
    bad = [(v, g) for v, g in zip(vectors, got, strict=True) if g != v[0] * v[1] + (v[2] << addend_shift)]
    assert not bad, f"seed {seed} {shape} {mode} stages={stages}: " + ", ".join(
        f"a={a:#x} b={b:#x} addend={c:#x}: got {g:#x}" for (a, b, c), g in bad[:5])
    assert dut.width == (ones[0] * ones[1] + (ones[2] << addend_shift)).bit_length()
    return dut


def shape_id(shape):
    a_width, b_width, constant, addend_width, addend_shift = shape
    return (f"{a_width}x{b_width}" + (f"c{constant:x}" if constant else "")
            + (f"+{addend_width}<<{addend_shift}" if addend_width else ""))


@pytest.mark.parametrize("mode", ["dsp", "lut"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_products(shape, mode):
    seed = sum(shape[:2]) + (mode == "lut")
    dut = check(shape, mode, seed)
    assert dut.latency == dut.natural_stages


@pytest.mark.parametrize("mode", ["dsp", "lut"])
@pytest.mark.parametrize("stages", [1, 2, 7])
def test_stages_and_clock_enable(mode, stages):
    """Fewer or more registers than the natural depth, with ``en`` low on random cycles."""
    seed = 40 + stages
    dut = check((33, 24, None, 33, 32), mode, seed, stages=stages,
                enable_pattern=random_enable(random.Random(seed + 100)))
    assert dut.latency == stages


def test_natural_stages():
    """One multiplier or one carry chain per stage: the depths the vector unit's datapaths assume."""
    depths = {}
    for mode in ("dsp", "lut"):
        for shape in SHAPES[:4]:
            a_width, b_width, constant, addend_width, addend_shift = shape
            depths[mode, shape[:2]] = natural_stages(a_width, b_width, mode=mode, constant=constant,
                                                     addend_width=addend_width, addend_shift=addend_shift)
    assert [depths["dsp", s[:2]] for s in SHAPES[:4]] == [3, 1, 3, 2]
    assert [depths["lut", s[:2]] for s in SHAPES[:4]] == [4, 3, 5, 5]


def test_csd_digits():
    for value in [1, 2, 3, 5, 7, 0xFF, 0x5555, vpu.LOG2E_Q33, vpu.LN2_Q18] + list(range(1, 300)):
        digits = csd_digits(value)
        assert sum(d << k for k, d in digits) == value
        positions = [k for k, _ in digits]
        assert all(b - a >= 2 for a, b in zip(positions, positions[1:], strict=False))  # none adjacent
    assert len(csd_digits(vpu.LOG2E_Q33)) == 14                            # 17 ones in binary


def test_bad_parameters():
    for kwargs, match in [({"mode": "dsp48"}, "mode"), ({"constant": 0}, "constant"),
                          ({"constant": 1 << 8}, "constant"), ({"stages": 0}, "stages"),
                          ({"addend_width": -1}, "addend_width")]:
        with pytest.raises(ValueError, match=match):
            Multiplier(4, 8, **kwargs)
    with pytest.raises(ValueError, match="a_width"):
        Multiplier(0, 8)
