"""Amaranth-simulator tests of the traffic generator and checker against ``sim_models.noc_traffic``."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.noc.layouts import NocParams
from rtl.noc.traffic_checker import TrafficChecker
from rtl.noc.traffic_generator import TrafficGenerator
from sim_models.noc import HeaderFormat
from sim_models.noc_traffic import (
    HIST_BINS,
    CheckerModel,
    TrafficConfig,
    body_salt,
    generate,
    mix_seed,
    tag,
    untag,
)

PARAMS = NocParams(width=64, vcs=2, depth=4, classes=2, coord_bits=3)
FMT = HeaderFormat(width=PARAMS.width, coord_bits=PARAMS.coord_bits, class_bits=PARAMS.class_bits)


def _run(dut, tb):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def _set_config(ctx, port, cfg):
    for name, value in cfg.as_fields().items():
        ctx.set(getattr(port, name), value)


@pytest.mark.parametrize("pattern,kx,ky,node", [
    ("uniform", 4, 4, (1, 2)), ("uniform", 3, 2, (2, 1)), ("hotspot", 4, 4, (0, 0)),
    ("transpose", 4, 4, (3, 1)), ("bitcomp", 2, 2, (0, 1)), ("neighbor", 3, 3, (2, 0)),
])
def test_generator_creates_exactly_the_model_packets(pattern, kx, ky, node):
    cfg = TrafficConfig.from_rate(0.6, 3, pattern=pattern, hot_x=1, hot_y=1, seed=7 + kx, warmup=40,
                                  measure=200)
    expected = generate(cfg, node, kx, ky, PARAMS.classes)
    assert len(expected) > 20 and {p.cls for p in expected} == {0, 1}
    dut = TrafficGenerator(PARAMS, *node, kx, ky, queue_depth=64)
    rng = random.Random(3)
    seen = {0: [], 1: []}

    async def tb(ctx):
        _set_config(ctx, dut.config, cfg)
        ctx.set(dut.mixed_seed, mix_seed(cfg.seed))
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        words = {0: [], 1: []}
        for t in range(cfg.warmup + cfg.measure + 400):
            ctx.set(dut.now, t)
            ctx.set(dut.create, t < cfg.warmup + cfg.measure)
            ctx.set(dut.measuring, t >= cfg.warmup)
            for c in (0, 1):
                ctx.set(dut.tx[c].ready, rng.random() < 0.7)
            for c in (0, 1):
                if ctx.get(dut.tx[c].valid) and ctx.get(dut.tx[c].ready):
                    words[c].append(ctx.get(dut.tx[c].payload.data))
                    if ctx.get(dut.tx[c].payload.last):
                        seen[c].append((t, words[c]))
                        words[c] = []
            await ctx.tick()
        assert ctx.get(dut.idle) and ctx.get(dut.overflow) == 0
        assert ctx.get(dut.created) == len(expected)

    _run(dut, tb)
    for c in (0, 1):
        mine = [p for p in expected if p.cls == c]
        assert len(seen[c]) == len(mine)
        for pkt, (t_sent, words) in zip(mine, seen[c], strict=True):
            head = words[0]
            h = FMT.unpack(head)
            assert (h["dest_x"], h["dest_y"]) == pkt.dst
            assert (h["src_x"], h["src_y"], h["mclass"], h["length"]) == (*node, c, cfg.length)
            assert untag(h["user"]) == (pkt.t, pkt.seq, pkt.measured)
            assert words[1:] == [head ^ body_salt(k, PARAMS.width) for k in range(1, cfg.length)]
            assert t_sent > pkt.t


def test_generator_counts_refused_creations_when_its_queue_is_full():
    cfg = TrafficConfig(rate=65536, length=2, cls_random=False, cls=1, measure=50)
    dut = TrafficGenerator(PARAMS, 0, 0, 2, 2, queue_depth=8)

    async def tb(ctx):
        _set_config(ctx, dut.config, cfg)
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        for t in range(cfg.measure):
            ctx.set(dut.now, t)
            ctx.set(dut.create, 1)
            await ctx.tick()
        ctx.set(dut.create, 0)
        assert ctx.get(dut.created) == 8
        assert ctx.get(dut.overflow) == cfg.measure - 8
        assert not ctx.get(dut.idle)

    _run(dut, tb)


def test_generator_rejects_a_header_without_room_for_the_tag():
    with pytest.raises(ValueError, match="41 user bits"):
        TrafficGenerator(NocParams(width=32, vcs=2, classes=2, coord_bits=2), 0, 0, 2, 2)


# -- checker ----------------------------------------------------------------------------------------

def _packet(src, dst, cls, seq, ts, length, measured=True):
    head = FMT.pack(dest_x=dst[0], dest_y=dst[1], src_x=src[0], src_y=src[1], mclass=cls, length=length,
                    user=tag(ts, seq, measured))
    return [head] + [head ^ body_salt(k, PARAMS.width) for k in range(1, length)]


def _checker_traffic(rng, node, kx, ky, length):
    """Per class: in-order packets from random sources with ``x < kx - 1``, and one of each fault from
    sources with ``x == kx - 1`` (so that each fault is counted once, as what it is)."""
    streams = {0: [], 1: []}
    seqs = {}
    for _ in range(60):
        src = (rng.randrange(kx - 1), rng.randrange(ky))
        cls = rng.randrange(2)
        seq = seqs.get((src, cls), rng.randrange(1 << 16))
        seqs[src, cls] = (seq + 1 + (rng.random() < 0.2)) & 0xFFFF     # gaps are legal (other nodes)
        streams[cls].append(_packet(src, node, cls, seq, rng.randrange(1 << 24), length,
                                    measured=rng.random() < 0.8))
    e = kx - 1
    dup = _packet((e, 0), node, 0, 0xFFFF, 3, length)
    streams[0][4:4] = [dup, list(dup)]                                   # duplicate
    streams[1][9:9] = [_packet((e, 1), node, 1, 1, 3, length),           # reordered: 0 after 1
                       _packet((e, 1), node, 1, 0, 4, length)]
    streams[0][2:2] = [_packet((e, 3), node, 0, 10, 3, length),          # a long gap is no fault
                       _packet((e, 3), node, 0, 0x500A, 3, length)]
    bad = _packet((e, 2), node, 0, 7, 9, length)
    bad[-1] ^= 1 << 5                                                    # corrupted body
    streams[0][7:7] = [bad]
    streams[1].append(_packet((e, 3), ((node[0] + 1) % kx, node[1]), 1, 0, 5, length))   # misrouted
    streams[1].append(_packet((e, 0), node, 0, 0, 5, length))            # wrong class
    streams[0].append(_packet((e, 1), node, 0, 100, 5, length + 1))      # wrong length
    streams[0].append(_packet((e, 2), node, 1, 200, 5, length)[:-1])     # last word missing
    return streams


@pytest.mark.parametrize("stall,hist_shift", [(0, 0), (20000, 2)])
def test_checker_counts_exactly_as_the_model(stall, hist_shift):
    kx, ky, node, length = 4, 4, (2, 1), 3
    rng = random.Random(11 + stall)
    cfg = TrafficConfig(length=length, stall=stall, warmup=30, measure=300, hist_shift=hist_shift, seed=5)
    streams = _checker_traffic(rng, node, kx, ky, length)
    dut = TrafficChecker(PARAMS, *node, kx, ky)
    model = CheckerModel(node, kx, ky, FMT, cfg)

    async def tb(ctx):
        _set_config(ctx, dut.config, cfg)
        ctx.set(dut.mixed_seed, mix_seed(cfg.seed))
        ctx.set(dut.clear, 1)
        for a in range(HIST_BINS):
            ctx.set(dut.clear_addr, a)
            await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        ctx.set(dut.running, 1)
        pos = {0: [0, 0], 1: [0, 0]}       # packet, word
        t = 0
        while any(pos[c][0] < len(streams[c]) for c in (0, 1)) and t < 5000:
            ctx.set(dut.now, t)                 # random time stamps: latencies wrap modulo 2**24
            ctx.set(dut.window, cfg.warmup <= t < cfg.warmup + cfg.measure)
            offers = {}
            for c in (0, 1):
                k, w = pos[c]
                if k < len(streams[c]) and rng.random() < 0.8:
                    pkt = streams[c][k]
                    offers[c] = (pkt[w], w == len(pkt) - 1)
                ctx.set(dut.rx[c].valid, c in offers)
                if c in offers:
                    ctx.set(dut.rx[c].payload.data, offers[c][0])
                    ctx.set(dut.rx[c].payload.last, offers[c][1])
            taken = [c for c in (0, 1) if ctx.get(dut.rx[c].valid) and ctx.get(dut.rx[c].ready)]
            assert len(taken) <= 1
            for c in taken:
                model.word(t, c, *offers[c])
                pos[c][1] += 1
                if offers[c][1]:
                    pos[c] = [pos[c][0] + 1, 0]
            await ctx.tick()
        for c in (0, 1):
            ctx.set(dut.rx[c].valid, 0)
        await ctx.tick()
        status = {name: ctx.get(getattr(dut.status, name)) for name in (
            "window_words", "packets", "measured", "latency_sum", "latency_max", "signature",
            "corrupted", "duplicated", "reordered")}
        hist = []
        for a in range(HIST_BINS):
            ctx.set(dut.hist_addr, a)
            hist.append(ctx.get(dut.hist_data))
        return_value.update(status=status, hist=hist)

    return_value = {}
    _run(dut, tb)
    assert model.corrupted == 5 and model.duplicated == 1 and model.reordered == 1
    expected = {name: getattr(model, name) for name in return_value["status"]}
    assert return_value["status"] == expected
    assert return_value["hist"] == model.histogram
