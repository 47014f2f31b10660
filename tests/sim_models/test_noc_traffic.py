"""The traffic generators' and checkers' reference model (``sim_models.noc_traffic``)."""

import random
from collections import Counter

import pytest

from sim_models.noc import HeaderFormat
from sim_models.noc_traffic import (
    MASK64,
    CheckerModel,
    TrafficConfig,
    body_salt,
    expected_deliveries,
    flow_tag,
    generate,
    tag,
    untag,
    xorshift64,
)


def test_xorshift64_is_the_published_generator():
    # Marsaglia's xorshift64 (13, 7, 17) from state 1.
    assert xorshift64(1) == 0x40822041
    state, seen = 88172645463325252, set()
    for _ in range(1000):
        state = xorshift64(state)
        assert 0 < state <= MASK64
        seen.add(state)
    assert len(seen) == 1000


def test_rate_and_offered_load():
    cfg = TrafficConfig.from_rate(0.3, 4)
    assert cfg.rate == round(0.3 / 4 * 65536) and abs(cfg.offered - 0.3) < 1e-4
    assert TrafficConfig.from_rate(1.0, 1).rate == 65536


@pytest.mark.parametrize("kwargs, message", [
    (dict(pattern="tornado"), "unknown traffic pattern"),
    (dict(rate=65537), "rate must be"),
    (dict(length=0), "length must be"),
    (dict(length=16), "length must be"),
    (dict(stall=65536), "stall must be"),
])
def test_bad_configurations_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrafficConfig(**kwargs)


def test_generated_traffic_has_the_requested_statistics():
    kx = ky = 4
    cfg = TrafficConfig.from_rate(0.4, 4, seed=3, warmup=100, measure=20000)
    packets = [p for y in range(ky) for x in range(kx) for p in generate(cfg, (x, y), kx, ky)]
    per_cycle = len(packets) / (16 * (cfg.warmup + cfg.measure))
    assert abs(per_cycle - 0.1) < 0.005
    assert all(p.dst != p.src for p in packets)                            # uniform: never to itself
    counts = Counter(p.dst for p in packets)
    assert max(counts.values()) / min(counts.values()) < 1.15
    assert abs(sum(p.cls for p in packets) / len(packets) - 0.5) < 0.02
    assert all(p.measured == (p.t >= cfg.warmup) for p in packets)
    for src in {p.src for p in packets}:                                   # sequence numbers per class
        for c in (0, 1):
            assert [p.seq for p in packets if p.src == src and p.cls == c] == list(
                range(sum(1 for p in packets if p.src == src and p.cls == c)))


def test_seeds_and_nodes_give_different_streams():
    cfg = [TrafficConfig.from_rate(0.5, 2, seed=s, measure=400) for s in (1, 2)]
    a = [(p.t, p.dst) for p in generate(cfg[0], (0, 0), 4, 4)]
    assert a != [(p.t, p.dst) for p in generate(cfg[1], (0, 0), 4, 4)]
    assert a != [(p.t, p.dst) for p in generate(cfg[0], (1, 0), 4, 4)]


def test_hotspot_and_fixed_patterns():
    hot = TrafficConfig.from_rate(0.5, 1, pattern="hotspot", hot_x=2, hot_y=3, hot_rate=32768, measure=4000)
    pk = generate(hot, (0, 0), 4, 4)
    assert abs(sum(p.dst == (2, 3) for p in pk) / len(pk) - (0.5 + 0.5 / 15)) < 0.04
    for pattern, want in (("transpose", (1, 3)), ("bitcomp", (0, 2)), ("neighbor", (0, 1))):
        cfg = TrafficConfig.from_rate(0.5, 1, pattern=pattern, measure=50)
        assert {p.dst for p in generate(cfg, (3, 1), 4, 4)} == {want}


def test_a_clean_delivery_matches_the_expected_counts_and_signatures():
    kx, ky = 3, 2
    cfg = TrafficConfig.from_rate(0.3, 2, seed=9, warmup=10, measure=300)
    fmt = HeaderFormat(width=64, coord_bits=3, class_bits=1)
    checkers = {(x, y): CheckerModel((x, y), kx, ky, fmt, cfg) for y in range(ky) for x in range(kx)}
    rng = random.Random(1)
    for y in range(ky):
        for x in range(kx):
            for p in generate(cfg, (x, y), kx, ky):
                head = fmt.pack(dest_x=p.dst[0], dest_y=p.dst[1], src_x=x, src_y=y, mclass=p.cls,
                                length=cfg.length, user=tag(p.t, p.seq, p.measured))
                words = [head] + [head ^ body_salt(k, 64) for k in range(1, cfg.length)]
                t = p.t + rng.randrange(1, 30)
                for k, w in enumerate(words):
                    checkers[p.dst].word(t + k, p.cls, w, k == len(words) - 1)
    for node, (n, signature) in expected_deliveries(cfg, kx, ky).items():
        c = checkers[node]
        assert (c.packets, c.signature) == (n, signature)
        assert c.corrupted == c.duplicated == c.reordered == 0
        assert 1 <= c.latency_max < 30 + cfg.length


def test_tag_round_trips():
    assert untag(tag(0xABCDEF, 0x1234, True)) == (0xABCDEF, 0x1234, 1)
    assert flow_tag(5, 1, 7) == (5 << 17) | (1 << 16) | 7
