"""Reference model of the fabric: header format, zero-load latency, patterns, delivery checking."""

import random

import pytest
from amaranth.hdl import Const, Module
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.noc.layouts import NocParams
from rtl.noc.layouts import flow_vc as rtl_flow_vc
from sim_models.noc import (
    PATTERNS,
    HeaderFormat,
    NetworkModel,
    average_zero_load_latency,
    destination,
    flow_vc,
    hops,
    zero_load_latency,
    zero_load_table,
)
from verification.packing import pack, unpack

SETTINGS = settings(derandomize=True, deadline=None, max_examples=100)


def _fmt(p):
    return HeaderFormat(width=p.width, coord_bits=p.coord_bits, class_bits=p.class_bits)


@pytest.mark.parametrize("p", [NocParams(), NocParams(width=32, coord_bits=3, classes=4, vcs=4)])
@SETTINGS
@given(data=st.data())
def test_header_format_matches_rtl_layout(p, data):
    fmt = _fmt(p)
    values = {name: data.draw(st.integers(0, (1 << bits) - 1)) for name, bits in fmt.fields()}
    assert fmt.pack(**values) == pack(p.header_layout, values)
    assert fmt.unpack(pack(p.header_layout, values)) == unpack(p.header_layout, fmt.pack(**values))


def test_header_field_overflow_rejected():
    with pytest.raises(ValueError, match="dest_x"):
        HeaderFormat().pack(dest_x=16)
    with pytest.raises(TypeError):
        HeaderFormat().pack(bogus=1)


def test_zero_load_latency_values():
    assert zero_load_latency((0, 0), (0, 0)) == 5
    assert zero_load_latency((0, 0), (1, 0)) == 7
    assert zero_load_latency((0, 0), (3, 3)) == 5 + 2 * 6
    assert zero_load_latency((2, 1), (0, 3), length=4) == 5 + 2 * 4 + 3
    with pytest.raises(ValueError):
        zero_load_latency((0, 0), (1, 1), length=0)


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 15))
def test_zero_load_table_two_cycles_per_hop(kx, ky, length):
    table = zero_load_table(kx, ky, length)
    assert len(table) == (kx * ky) ** 2
    for (s, d), lat in table.items():
        assert lat == table[d, s]
        assert lat - zero_load_latency(s, s, length) == 2 * hops(s, d)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("k", [2, 4, 8])
def test_patterns(pattern, k):
    rng = random.Random(1)
    for y in range(k):
        for x in range(k):
            for _ in range(20):
                d = destination(pattern, (x, y), k, k, rng, hotspot=(1, 1))
                assert 0 <= d[0] < k and 0 <= d[1] < k
                if pattern == "uniform":
                    assert d != (x, y)
                if pattern == "transpose":
                    assert d == (y, x)
                if pattern == "bitcomp":
                    assert d == (k - 1 - x, k - 1 - y)
                if pattern == "neighbor":
                    assert d == ((x + 1) % k, y)


def test_uniform_covers_all_others():
    rng = random.Random(3)
    seen = {destination("uniform", (1, 2), 4, 4, rng) for _ in range(2000)}
    assert seen == {(x, y) for x in range(4) for y in range(4)} - {(1, 2)}


def test_unknown_pattern():
    with pytest.raises(ValueError, match="unknown traffic pattern"):
        destination("tornado", (0, 0), 4, 4, random.Random())
    with pytest.raises(ValueError, match="square"):
        destination("transpose", (0, 0), 4, 2, random.Random())


def test_average_zero_load_latency():
    # neighbor on a 4x4 ring-less mesh: 12 nodes 1 hop, 4 nodes wrap 3 hops back
    assert average_zero_load_latency("neighbor", 4, 4) == pytest.approx(5 + 2 * (12 * 1 + 4 * 3) / 16)
    # uniform on 2x2: every other node is 1, 1, 2 hops away
    assert average_zero_load_latency("uniform", 2, 2, 4) == pytest.approx(5 + 3 + 2 * 4 / 3)


# -- delivery checking ----------------------------------------------------------------------------

def _traffic(seed, kx=3, ky=3, n=60):
    rng = random.Random(seed)
    fmt = HeaderFormat()
    msgs = []
    for seq in range(n):
        src = (rng.randrange(kx), rng.randrange(ky))
        dst = (rng.randrange(kx), rng.randrange(ky))
        length = rng.randrange(1, 5)
        head = fmt.pack(dest_x=dst[0], dest_y=dst[1], length=length, user=seq,
                        src_x=rng.randrange(16))                       # src is overwritten
        words = [head] + [rng.getrandbits(64) for _ in range(length - 1)]
        msgs.append((src, dst, rng.randrange(2), words))
    return fmt, msgs


def _delivery_order(msgs, seed):
    """A random interleaving that keeps every flow in order (what a correct network may produce)."""
    rng = random.Random(seed)
    flows = {}
    for m in msgs:
        flows.setdefault((m[0], m[1], m[2]), []).append(m)
    out = []
    while flows:
        key = rng.choice(sorted(flows))
        out.append(flows[key].pop(0))
        if not flows[key]:
            del flows[key]
    return out


def _expected_words(fmt, m):
    src, dst, cls, words = m
    return [fmt.rewrite(words[0], src, cls)] + words[1:]


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_correct_network_passes(seed):
    fmt, msgs = _traffic(seed)
    model = NetworkModel(3, 3, fmt)
    for src, _dst, cls, words in msgs:
        assert model.send(src, cls, words)
    for m in _delivery_order(msgs, seed):
        model.deliver(m[1], m[2], _expected_words(fmt, m))
    counts = model.finish()
    assert counts.clean and counts.delivered == counts.sent == len(msgs)


@pytest.mark.parametrize("fault", ["lost", "duplicated", "corrupted", "reordered", "misrouted"])
@pytest.mark.parametrize("strict", [True, False])
def test_faults_are_caught(fault, strict):
    fmt, msgs = _traffic(7, n=80)
    # make sure flow 0 has two messages so it can be reordered
    msgs.append((msgs[0][0], msgs[0][1], msgs[0][2], list(msgs[0][3])))
    msgs[-1][3][0] = fmt.pack(**{**fmt.unpack(msgs[-1][3][0]), "user": 999})
    model = NetworkModel(3, 3, fmt, strict=strict)
    for src, _dst, cls, words in msgs:
        model.send(src, cls, words)
    order = _delivery_order(msgs, 1)
    victim = next(k for k, m in enumerate(order) if m[0:3] == msgs[0][0:3])
    if fault == "lost":          # the last of its flow (losing an earlier one also shows as reordering)
        del order[max(k for k, m in enumerate(order) if m[0:3] == msgs[0][0:3])]
    elif fault == "duplicated":
        order.append(order[victim])
    elif fault == "reordered":
        later = next(k for k, m in enumerate(order) if k > victim and m[0:3] == msgs[0][0:3])
        order.insert(victim, order.pop(later))
    deliveries = [(m[1], m[2], _expected_words(fmt, m)) for m in order]
    if fault == "corrupted":
        node, cls, words = deliveries[victim]
        deliveries[victim] = (node, cls, words[:-1] + [words[-1] ^ 1 << 63])
    if fault == "misrouted":
        node, cls, words = deliveries[victim]
        deliveries[victim] = (node, 1 - cls, words)
    try:
        for d in deliveries:
            model.deliver(*d)
        model.finish()
    except AssertionError as e:
        assert strict and str(e).startswith(fault)
        return
    assert not strict
    assert getattr(model.counts, fault) >= 1


def test_out_of_mesh_dropped():
    fmt = HeaderFormat()
    model = NetworkModel(2, 2, fmt)
    assert not model.send((0, 0), 0, [fmt.pack(dest_x=2, dest_y=0, length=1)])
    assert model.counts.dropped == 1 and model.outstanding() == 0
    assert model.finish().clean


@pytest.mark.parametrize("vcs, classes, coord_bits", [(2, 2, 2), (4, 2, 2), (6, 2, 2), (4, 1, 3)])
def test_flow_vc_matches_rtl(vcs, classes, coord_bits):
    """The Python VC choice is the RTL's (``rtl.noc.layouts.flow_vc``) for every flow of a mesh, and it
    uses every VC of each class."""
    p = NocParams(vcs=vcs, classes=classes, coord_bits=coord_bits)
    side = min(4, p.max_side)
    cases = [((sx, sy), (dx, dy), c) for sx in range(side) for sy in range(side) for dx in range(side)
             for dy in range(side) for c in range(classes)]
    values = [rtl_flow_vc(p, Const(c, p.class_bits), *(Const(v, coord_bits) for v in (*s, *d)))
              for s, d, c in cases]
    sim = Simulator(Module())

    async def tb(ctx):
        used = set()
        for (s, d, c), value in zip(cases, values, strict=True):
            expected = flow_vc(s, d, c, vcs=vcs, classes=classes)
            assert ctx.get(value) == expected, (s, d, c)
            used.add(expected)
        assert used == set(range(vcs))

    sim.add_testbench(tb)
    sim.run()
