"""RmsOutput (RMSNorm's per-element output, and with r = 1 rope's binary32 product) against
sim_models.vpu, in the Amaranth simulator: every class of x and gain, scales at both ends of their
range, both multiplier implementations.
"""

import random

import numpy as np
import pytest

from rtl.vpu.rms_output import RmsOutput
from sim_models import fp32, vpu
from verification.pipeline import run_pipeline


def output_vectors(rng, count):
    finite = [0x0000_0000, 0x8000_0000, 0x0000_0001, 0x807F_FFFF, 0x0080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF,
              0x3F80_0000, 0xBF80_0000, 0x4000_0000, 0xC000_0000]
    gains = finite + [0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0001, 0x7F80_0001]
    scales = [(1 << 23, -152), ((1 << 24) - 1, 133), (0xB504F3, -23), (1 << 23, 0)]
    rows = []
    for _ in range(count):
        x = rng.randrange(0, 0x7F80_0000) | (rng.getrandbits(1) << 31)
        if rng.random() < 0.15:
            x = rng.choice(finite)
        if rng.random() < 0.5:
            x = int(np.float32(rng.gauss(0, 1) * 2.0 ** rng.randrange(-140, 120)).view(np.uint32))
        g = rng.choice(gains) if rng.random() < 0.2 else int(np.float32(rng.gauss(1, 0.2)).view(np.uint32))
        if rng.random() < 0.2:
            g = rng.randrange(0, 1 << 32)
        if rng.random() < 0.3:
            r = rng.choice(scales)
        else:
            r = (rng.randrange(1 << 23, 1 << 24), rng.randrange(-152, 134))
        rows.append({"x": x, "gain": g, "r_sig": r[0], "r_lsb": r[1]})
    return rows


def _expected_output(v):
    x, g = v["x"], v["gain"]
    sx, mx, ex = fp32.decode_finite(x)
    sg, mg, eg = fp32.decode_finite(g) if not (fp32.is_nan(g) or fp32.is_inf(g)) else (g >> 31, 0, 0)
    return vpu._rms_output(sx, mx, ex, v["r_sig"], v["r_lsb"], g, sg, mg, eg)


@pytest.mark.parametrize("multiplier", ["dsp", "lut"])
def test_output_matches_model(multiplier):
    seed = 12
    print(f"seed {seed}")
    rng = random.Random(seed)
    vectors = output_vectors(rng, 1500)
    dut = RmsOutput(multiplier=multiplier)
    got = run_pipeline(dut, vectors, ["result"], junk=lambda: output_vectors(rng, 1)[0])
    bad = [(v, g["result"], _expected_output(v)) for v, g in zip(vectors, got, strict=True)
           if g["result"] != _expected_output(v)]
    assert not bad, f"seed {seed}:\n" + "\n".join(
        f"x={v['x']:#010x} gain={v['gain']:#010x} r=({v['r_sig']:#x}, {v['r_lsb']}): "
        f"got {g:#010x}, expected {w:#010x}" for v, g, w in bad[:10])


def test_unit_scale_is_the_binary32_product():
    """With r = 1 the unit is vpu.mul (rope's products): every special of x and gain, random values."""
    seed = 13
    print(f"seed {seed}")
    rng = random.Random(seed)
    specials = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0001, 0x0000_0001,
                0x807F_FFFF, 0x7F7F_FFFF, 0x3F80_0000]
    pairs = [(a, b) for a in specials for b in specials]
    pairs += [(rng.randrange(1 << 32), rng.randrange(1 << 32)) for _ in range(1500)]
    vectors = [{"x": a, "gain": b, "r_sig": 1 << 23, "r_lsb": -23} for a, b in pairs]
    got = run_pipeline(RmsOutput(), vectors, ["result"])
    want = np.asarray(vpu.mul(np.array([a for a, _ in pairs], np.uint32).view(np.float32),
                              np.array([b for _, b in pairs], np.uint32).view(np.float32))).view(np.uint32)
    bad = [(a, b, g["result"], int(w)) for (a, b), g, w in zip(pairs, got, want, strict=True)
           if g["result"] != w]
    assert not bad, f"seed {seed}:\n" + "\n".join(f"{a:#010x} * {b:#010x}: got {g:#010x}, expected {w:#010x}"
                                                   for a, b, g, w in bad[:10])


def _rounding_corners():
    """(x_sig, r_sig) pairs whose product makes h's rounding hit a corner: a tie (guard set, nothing
    below) with an even kept part, and a carry into the next binade (the 24 leading bits all ones, the
    guard set: products just below 2**47)."""
    rng = random.Random(5)
    ties, carries = [], []

    def sparse():
        return (1 << 23) | sum(1 << rng.randrange(23) for _ in range(rng.randrange(1, 4)))

    while len(ties) < 30:
        x, r = sparse(), sparse()
        p = x * r
        normal = p << (47 - (p.bit_length() - 1))
        kept, guard, low = normal >> 24, (normal >> 23) & 1, normal & ((1 << 23) - 1)
        if guard and kept % 2 == 0 and low == 0:
            ties.append((x, r))
    while len(carries) < 30:
        r = rng.randrange(0xB504F4, 1 << 24)
        x = ((1 << 47) - 1) // r
        if x >= 1 << 23 and (x * r) >> 23 == (1 << 24) - 1 and (x * r) >> 22 & 1:
            carries.append((x, r))
    return ties + carries


def test_scale_rounding_corners():
    """h = round24x(x * r) at its ties and at the carry into the next binade (both easily missed by
    random operands)."""
    pairs = _rounding_corners()
    vectors = [{"x": (127 << 23) | (x & 0x7F_FFFF), "gain": 0x3F80_0000, "r_sig": r, "r_lsb": -23}
               for x, r in pairs]
    vectors += [{"x": (100 << 23) | (x & 0x7F_FFFF), "gain": 0x4040_0000, "r_sig": r, "r_lsb": 10}
                for x, r in pairs]
    got = run_pipeline(RmsOutput(), vectors, ["result"])
    bad = [(v, g["result"], _expected_output(v)) for v, g in zip(vectors, got, strict=True)
           if g["result"] != _expected_output(v)]
    assert not bad, "\n".join(f"x={v['x']:#010x} r=({v['r_sig']:#x}, {v['r_lsb']}): got {g:#010x}, "
                              f"expected {w:#010x}" for v, g, w in bad[:10])


def test_infinite_x_at_any_scale():
    """An infinite x gives ±Inf (NaN with a zero or NaN gain) whatever the scale, also one small
    enough that the product of the significands would be finite."""
    specials = [0x7F80_0000, 0xFF80_0000]
    gains = [0x7F80_0000, 0xFF80_0000, 0x3F80_0000, 0xBF80_0000, 0x0000_0000, 0x8000_0000, 0x7FC0_0000,
             0x0000_0001]
    vectors = [{"x": x, "gain": g, "r_sig": r_sig, "r_lsb": r_lsb} for x in specials for g in gains
               for r_sig, r_lsb in ((1 << 23, -152), (1 << 23, -23), ((1 << 24) - 1, 133))]
    got = run_pipeline(RmsOutput(), vectors, ["result"])
    for v, g in zip(vectors, got, strict=True):
        sign = (v["x"] ^ v["gain"]) >> 31
        gain_nan = (v["gain"] & 0x7FFF_FFFF) > 0x7F80_0000
        want = 0x7FC0_0000 if gain_nan or v["gain"] & 0x7FFF_FFFF == 0 else 0x7F80_0000 | (sign << 31)
        assert g["result"] == want, f"x={v['x']:#010x} gain={v['gain']:#010x} r_lsb={v['r_lsb']}: " \
                                    f"got {g['result']:#010x}, expected {want:#010x}"
