"""Reducer (sum, sum_squares) and MaxReducer against sim_models.vpu, in the Amaranth simulator.

Each configuration is built once and fed one long stream of rows: lengths 1, lanes - 1, lanes,
lanes * slots + 3 and 300 in both modes, with elements over the whole binary32 range (normals from
2**-60 to 2**60, random finite patterns, subnormals, zeros of both signs); rows that cancel
exactly in the tree; rows whose result is the residue of the 48-bit roundings (big accumulators
cancelling in the tree's last level: any other order or pairing differs); rows with NaN and
infinities in any lane and beat; masked lanes holding garbage (NaN, Inf) that must be ignored;
significands whose squares sit either side of 2**47, and single elements whose squares lie within
2**12 of a binary32 rounding tie (so the low bits of the 48-bit squares show); then a run of
short rows (one or two beats) back to back with no idle cycle at all, a burst of one-beat rows,
and rows with random bubbles between their beats. Every result must match the model bit for bit,
arrive exactly ``latency`` cycles after its row's last beat, and rows streamed without bubbles
must never see ``ready`` low (after a bubble, a beat waits at most ``slots - 1`` cycles); one
configuration of each unit runs with ``o.ready`` low half the time instead (results held until
taken, none lost or reordered, the input held back once the result queue is full).
"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from rtl.vpu.max_reducer import MaxReducer
from rtl.vpu.reducer import Reducer
from sim_models import vpu

QNAN = 0x7FC0_0000
POS_INF, NEG_INF = 0x7F80_0000, 0xFF80_0000
GARBAGE = [QNAN, 0xFFFF_FFFF, POS_INF, NEG_INF, 0x7F7F_FFFF, 0x0000_0001]


def simulate(dut, rows, seed, backpressure=0.0):
    """Stream ``rows`` (dicts: ``bits``, ``squares``, ``gaps``) into ``dut``.

    ``gaps[b]`` idle cycles come before beat ``b``; ``o.ready`` is low on a ``backpressure``
    fraction of cycles. Returns the results as ``(cycle, bits)``, the cycle of each row's last-beat
    transfer, and the cycles each row spent waiting for ``ready``.
    """
    lanes = dut.lanes
    rng = random.Random(seed)
    results, lasts, waits = [], [], []
    patience = getattr(dut, "slots", 1) - 1 if not backpressure else 10_000

    async def drive(ctx):
        cycle = 0
        for row in rows:
            bits = row["bits"]
            count = -(-len(bits) // lanes)
            waited = 0
            for b in range(count):
                for _ in range(row["gaps"][b]):
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick()
                    cycle += 1
                chunk = [int(v) for v in bits[b * lanes:(b + 1) * lanes]]
                mask = (1 << len(chunk)) - 1
                chunk += [rng.choice(GARBAGE) for _ in range(lanes - len(chunk))]
                ctx.set(dut.i.payload, {"data": chunk, "mask": mask, "first": int(b == 0),
                                        "last": int(b == count - 1), "squares": row["squares"]})
                ctx.set(dut.i.valid, 1)
                beat_wait = 0
                while not ctx.get(dut.i.ready):
                    await ctx.tick()
                    cycle += 1
                    waited += 1
                    beat_wait += 1
                    # Without backpressure a slot's ring position comes round within `slots` cycles.
                    assert beat_wait <= patience, f"seed {seed}: ready stuck low"
                if b == count - 1:
                    lasts.append(cycle)
                await ctx.tick()
                cycle += 1
            waits.append(waited)
        ctx.set(dut.i.valid, 0)
        for _ in range(dut.latency + 4 + 20 * len(rows) * (backpressure > 0)):
            if len(results) == len(rows):
                break
            await ctx.tick()

    async def collect(ctx):
        cycle, offered = 0, None
        ready_rng = random.Random(seed + 1)
        while True:
            ready = int(ready_rng.random() >= backpressure)
            ctx.set(dut.o.ready, ready)
            valid, payload = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            if offered is not None:                   # lib.stream: held until taken
                assert valid and payload == offered, f"seed {seed}: cycle {cycle}: result dropped or changed"
            offered = payload if valid and not ready else None
            if valid and ready:
                results.append((cycle, payload))
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(drive)
    sim.add_testbench(collect, background=True)
    sim.run()
    return results, lasts, waits


def check(dut, rows, expected, seed, backpressure=0.0):
    results, lasts, waits = simulate(dut, rows, seed, backpressure)
    assert len(results) == len(rows), f"seed {seed}: {len(results)} results for {len(rows)} rows"
    got = [bits for _, bits in results]
    bad = [(k, r, g, w) for k, (r, g, w) in enumerate(zip(rows, got, expected, strict=True)) if g != w]
    assert not bad, f"seed {seed}: {len(bad)} of {len(rows)} rows wrong\n" + "\n".join(
        f"row {k} ({r['kind']}, n={len(r['bits'])}, squares={r['squares']}): got {g:#010x}, "
        f"expected {w:#010x}" for k, r, g, w in bad[:8])
    if not backpressure:
        late = [(k, out - last) for k, ((out, _), last) in enumerate(zip(results, lasts, strict=True))
                if out - last != dut.latency]
        assert not late, f"seed {seed}: results not {dut.latency} cycles after the last beat: {late[:8]}"
        stalled = [k for k, (r, w) in enumerate(zip(rows, waits, strict=True)) if not any(r["gaps"]) and w]
        assert not stalled, f"seed {seed}: ready low for rows streamed without bubbles: {stalled[:8]}"
    else:                     # the queue filled up and held the input back: that path ran
        assert any(w for r, w in zip(rows, waits, strict=True) if not any(r["gaps"]))
    return waits


def as_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)


def wide(rng, n):
    """Elements over the whole binary32 range (no NaN or Inf)."""
    kind = rng.integers(0, 10, n)
    normal = rng.standard_normal(n) * np.exp2(rng.integers(-60, 61, n).astype(np.float64))
    bits = as_bits(normal.astype(np.float32))
    anything = rng.integers(0, 0xFF, n) << 23 | rng.integers(0, 1 << 23, n) | rng.integers(0, 2, n) << 31
    subnormal = rng.integers(1, 1 << 23, n) | rng.integers(0, 2, n) << 31
    zero = rng.integers(0, 2, n) << 31
    bits = np.where(kind < 2, anything, bits)
    bits = np.where(kind == 2, subnormal, bits)
    bits = np.where(kind == 3, zero, bits)
    return bits


def cancelling(rng, n):
    """``x`` and ``-x`` in a shuffled row: the accumulators cancel in the tree."""
    half = wide(rng, n // 2)
    bits = np.concatenate([half, half ^ (1 << 31), wide(rng, n % 2) & 0x807F_FFFF])
    return rng.permutation(bits)


def order_sensitive(rng, width, layers=1):
    """A row whose result is the residue of 48-bit roundings, so any other order or pairing of the
    accumulators gives another result: accumulator ``j`` gets ``big_j`` (about 2**30; the second
    half of the accumulators holds the negatives of the first, so the tree's last level cancels
    them) and then ``layers`` terms of 2**-24 to 2**-8, which the 48-bit sums round away in part."""
    big = (rng.standard_normal(width // 2) * 2.0 ** 30).astype(np.float32)
    bits = [as_bits(big), as_bits(-big)] + ([as_bits(big[:1])] if width % 2 else [])
    for _ in range(layers):
        tiny = rng.standard_normal(width) * np.exp2(rng.integers(-24, -7, width).astype(np.float64))
        bits.append(as_bits(tiny.astype(np.float32)))
    return np.concatenate(bits)


def near_tie_squares(rng, count):
    """Elements whose exact squares lie within 2**12 of a binary32 rounding tie: any error in the
    low bits of a 48-bit square (a lost carry, a wrong partial product) flips the rounding."""
    sig = rng.integers(1 << 23, 1 << 24, 1 << 16, dtype=np.int64)
    square = [int(v) ** 2 for v in sig]
    found = []
    for v, sq in zip(sig.tolist(), square, strict=True):
        drop = sq.bit_length() - 24
        distance = sq % (1 << drop) - (1 << (drop - 1))
        if 0 < abs(distance) < 1 << 12:
            found.append(v)
    assert len(found) >= count
    biased = rng.integers(110, 145, count)
    return [np.array([(int(b) << 23) | (v - (1 << 23))]) for b, v in zip(biased, found[:count], strict=True)]


def special_rows(rng, lanes):
    """Rows with NaN and infinities in chosen lanes and beats, and all-zero rows."""
    rows = []
    for n in (1, lanes, 3 * lanes + 1):
        for specials in ([QNAN], [0xFFC0_0001], [POS_INF], [NEG_INF], [POS_INF, NEG_INF],
                         [POS_INF, POS_INF], [NEG_INF, QNAN]):
            if len(specials) > n:
                continue
            bits = wide(rng, n)
            bits[rng.choice(n, len(specials), replace=False)] = specials
            rows.append(("specials", bits))
        rows.append(("zeros", rng.integers(0, 2, n) << 31))
        rows.append(("negative zeros", np.full(n, 1 << 31)))
    return rows


def reducer_rows(seed, lanes, slots):
    rng = np.random.default_rng(seed)
    spec = []
    for n in sorted({1, max(lanes - 1, 1), lanes, lanes * slots + 3, 300}):
        spec.append(("wide", wide(rng, n)))
    for n in (2 * lanes * slots, 37, 64):
        spec.append(("cancelling", cancelling(rng, n)))
    # significands whose squares sit just either side of 2**47 (the squares' 1-bit normalization)
    for sig in (0xB504F3, 0xB504F4, 0x800000, 0xFFFFFF):
        spec.append(("square edge", np.array([sig - 0x80_0000 + (int(rng.integers(1, 0xFE)) << 23)])))
    spec.append(("square edge", np.array([0xB504F4 >> 2])))         # a subnormal normalizing to it
    spec += [("near-tie square", x) for x in near_tie_squares(rng, 12)]
    for layers in (1, 1, 1, 2, 2, 3):
        spec.append(("order", order_sensitive(rng, lanes * slots, layers)))
    spec += special_rows(rng, lanes)
    rows = []
    for kind, bits in spec:                                   # both modes, beats back to back
        for squares in (0, 1):
            rows.append({"kind": kind, "bits": bits, "squares": squares, "gaps": [0] * len(bits)})
    for _ in range(24):                                       # short rows, back to back
        n = int(rng.integers(1, 2 * lanes + 1))
        rows.append({"kind": "short", "bits": wide(rng, n), "squares": int(rng.integers(0, 2)),
                     "gaps": [0] * n})
    for _ in range(40):                                       # one-beat rows, a result per cycle
        rows.append({"kind": "burst", "bits": wide(rng, 1), "squares": int(rng.integers(0, 2)), "gaps": [0]})
    for _ in range(10):                                       # bubbles inside and between rows
        n = int(rng.integers(1, lanes * slots * 3))
        gaps = [int(g) if rng.random() < 0.3 else 0 for g in rng.integers(1, 2 * slots + 2, n)]
        rows.append({"kind": "bubbles", "bits": wide(rng, n), "squares": int(rng.integers(0, 2)),
                     "gaps": gaps})
    return rows


def reducer_expected(rows, lanes, slots):
    out = []
    for row in rows:
        x = row["bits"].astype(np.uint32).view(np.float32)[None]
        fn = vpu.sum_squares if row["squares"] else vpu.sum
        out.append(int(fn(x, lanes, slots).view(np.uint32)[0]))
    return out


@pytest.mark.parametrize(("lanes", "slots", "backpressure"), [(8, 4, 0.0), (4, 3, 0.5), (2, 8, 0.0)])
def test_reducer_matches_model(lanes, slots, backpressure):
    """sum and sum_squares rows of every class, bit-exact to the model with the same lanes/slots;
    with ``o.ready`` low half the time in one configuration (results held, none lost)."""
    seed = 1000 + 10 * lanes + slots
    print(f"seed {seed}")
    rows = reducer_rows(seed, lanes, slots)
    expected = reducer_expected(rows, lanes, slots)
    assert {QNAN, POS_INF, NEG_INF, 0} <= set(expected)           # the special verdicts all occur
    dut = Reducer(lanes, slots)
    assert dut.latency == 4 + slots + 4 * ((lanes - 1).bit_length() + (slots - 1).bit_length()) + 3
    waits = check(dut, rows, expected, seed, backpressure)
    # After a bubble, a slot's later beats wait for its ring position: that path ran.
    assert sum(w for r, w in zip(rows, waits, strict=True) if r["kind"] == "bubbles") > 0
    print("cycles waited for ready after bubbles:", waits[-10:])


def max_rows(seed, lanes):
    rng = np.random.default_rng(seed)
    spec = [("wide", wide(rng, n)) for n in (1, max(lanes - 1, 1), lanes, 4 * lanes + 3, 300)]
    spec += special_rows(rng, lanes)
    spec += [("signed zeros", np.array([1 << 31, 0] * lanes)), ("minus zero", np.array([1 << 31] * 3)),
             ("negative", wide(rng, 3 * lanes) | 1 << 31), ("minus inf", np.array([NEG_INF] * 2)),
             ("tiny", np.array([0x8000_0001, 0x8000_0002, 1 << 31]))]
    rows = [{"kind": k, "bits": b, "squares": 0, "gaps": [0] * len(b)} for k, b in spec]
    rows += [{"kind": "burst", "bits": wide(rng, 1), "squares": 0, "gaps": [0]} for _ in range(12)]
    for _ in range(16):
        n = int(rng.integers(1, 3 * lanes))
        gaps = [int(g) if rng.random() < 0.3 else 0 for g in rng.integers(1, 4, n)]
        rows.append({"kind": "bubbles", "bits": wide(rng, n), "squares": 0, "gaps": gaps})
    return rows


@pytest.mark.parametrize(("lanes", "backpressure"), [(8, 0.0), (2, 0.5)])
def test_max_reducer_matches_model(lanes, backpressure):
    """max_reduce rows (NaN anywhere, +0 above -0, masked garbage ignored), latency, back to back."""
    seed = 2000 + lanes
    print(f"seed {seed}")
    rows = max_rows(seed, lanes)
    expected = [int(vpu.max_reduce(r["bits"].astype(np.uint32).view(np.float32)[None])
                    .view(np.uint32)[0]) for r in rows]
    assert {QNAN, 0, 1 << 31, NEG_INF} <= set(expected)
    check(MaxReducer(lanes), rows, expected, seed, backpressure)


def test_parameters_rejected():
    for bad in ({"lanes": 6}, {"lanes": 0}, {"slots": 0}, {"tree_stages": 0}, {"round_stages": 0}):
        with pytest.raises(ValueError):
            Reducer(**bad)
    with pytest.raises(ValueError, match="power of two"):
        MaxReducer(lanes=3)
