"""Amaranth-simulator unit tests of the fabric's arbiter, allocators and VC buffer."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.noc.arbiter import RoundRobinArbiter
from rtl.noc.layouts import PORTS, NocParams, legal_outputs
from rtl.noc.switch_allocator import SwitchAllocator
from rtl.noc.vc_allocator import VcAllocator
from rtl.noc.vc_buffer import VcBuffer


def _run(dut, tb):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def _bits(value, n):
    return [(value >> k) & 1 for k in range(n)]


# -- arbiter ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_arbiter_grants_one_requester_and_is_fair(n):
    dut = RoundRobinArbiter(n)
    rng = random.Random(n)

    async def tb(ctx):
        waited = [0] * n
        for _ in range(150):
            req = rng.getrandbits(n) | (1 if rng.random() < 0.1 else 0)
            ctx.set(dut.requests, req)
            ctx.set(dut.advance, 1)
            g = ctx.get(dut.grant)
            assert ctx.get(dut.valid) == (req != 0)
            assert g & ~req == 0 and bin(g).count("1") == (1 if req else 0)
            for k in range(n):
                if req >> k & 1:
                    waited[k] = 0 if g >> k & 1 else waited[k] + 1
                    # a requester is passed over at most n - 1 times in a row while it keeps asking
                    assert waited[k] <= n - 1, (k, waited)
                else:
                    waited[k] = 0
            await ctx.tick()

    _run(dut, tb)


def test_arbiter_holds_priority_without_advance():
    dut = RoundRobinArbiter(4)

    async def tb(ctx):
        ctx.set(dut.requests, 0b1010)
        ctx.set(dut.advance, 0)
        for _ in range(3):
            assert ctx.get(dut.grant) == 0b0010
            await ctx.tick()
        ctx.set(dut.advance, 1)
        await ctx.tick()
        assert ctx.get(dut.grant) == 0b1000
        await ctx.tick()
        assert ctx.get(dut.grant) == 0b0010

    _run(dut, tb)


def test_arbiter_of_one_passes_request_through():
    dut = RoundRobinArbiter(1)

    async def tb(ctx):
        for req in (0, 1, 0):
            ctx.set(dut.requests, req)
            assert ctx.get(dut.grant) == req and ctx.get(dut.valid) == req

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def test_arbiter_rejects_bad_size():
    with pytest.raises(ValueError):
        RoundRobinArbiter(0)


# -- VC buffer ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("vcs, depth, ports", [(1, 1, 1), (2, 3, 1), (4, 4, 2), (3, 5, 2)])
def test_vc_buffer_matches_fifo_model(vcs, depth, ports):
    dut = VcBuffer(vcs=vcs, depth=depth, shape=16, read_ports=ports)
    rng = random.Random(vcs * 100 + depth)

    async def tb(ctx):
        model = [[] for _ in range(vcs)]
        overflow = False
        word = 0
        for _ in range(250):
            for v in range(vcs):
                assert ctx.get(dut.count[v]) == len(model[v])
            # reads (distinct VCs per port)
            chosen = rng.sample(range(vcs), min(ports, vcs))
            pops = []
            for k in range(ports):
                if k < len(chosen):
                    v = chosen[k]
                    ctx.set(dut.r_vc[k], v)
                    en = rng.random() < 0.5
                    ctx.set(dut.r_en[k], en)
                    if model[v]:
                        assert ctx.get(dut.r_data[k]) == model[v][0]
                        if en:
                            pops.append(v)
                else:
                    ctx.set(dut.r_en[k], 0)
            w = rng.random() < 0.6
            wv = rng.randrange(vcs)
            word = (word + 1) & 0xFFFF
            ctx.set(dut.w_en, w)
            ctx.set(dut.w_vc, wv)
            ctx.set(dut.w_data, word)
            await ctx.tick()
            if w:
                if len(model[wv]) - (wv in pops) < depth:
                    model[wv].append(word)
                else:
                    overflow = True
            for v in pops:
                model[v].pop(0)
            assert ctx.get(dut.overflow) == overflow

    _run(dut, tb)


# -- switch allocator -----------------------------------------------------------------------------

@pytest.mark.parametrize("vcs, speedup", [(2, 1), (4, 2), (4, 1)])
def test_switch_allocator_matching_and_fairness(vcs, speedup):
    p = NocParams(vcs=vcs, classes=2)
    dut = SwitchAllocator(p, speedup=speedup)
    rng = random.Random(vcs + speedup)
    n = PORTS * vcs
    bound = 4 * PORTS * vcs  # generous; the observed worst case is logged by the assertion

    async def tb(ctx):
        ports = [1 << rng.choice(legal_outputs(j // vcs)) for j in range(n)]
        waited = [0] * n
        for cycle in range(300):
            # persistent requests: a request stays until granted (then a new random one may appear)
            for j in range(n):
                ctx.set(dut.port[j], ports[j])
            req = [0] * n
            for j in range(n):
                req[j] = 1 if waited[j] > 0 or rng.random() < 0.7 else 0
            tails = [rng.random() < 0.4 for _ in range(n)]
            ctx.set(dut.req, sum(b << j for j, b in enumerate(req)))
            ctx.set(dut.tail, sum(b << j for j, b in enumerate(tails)))
            granted = _bits(ctx.get(dut.granted), n)
            per_out = [0] * PORTS
            per_in = [0] * PORTS
            for j in range(n):
                if granted[j]:
                    assert req[j], f"cycle {cycle}: VC {j} granted without a request"
                    o = ports[j].bit_length() - 1
                    per_out[o] += 1
                    per_in[j // vcs] += 1
                    assert ctx.get(dut.out_valid) >> o & 1
                    assert ctx.get(dut.out_in[o]) == 1 << (j // vcs)
                    assert ctx.get(dut.out_vc[o]) == j % vcs
            assert max(per_out) <= 1, f"cycle {cycle}: an output granted twice"
            assert max(per_in) <= speedup, f"cycle {cycle}: an input granted {max(per_in)} times"
            assert bin(ctx.get(dut.out_valid)).count("1") == sum(per_out)
            # read ports name the granted VCs of each input
            for i in range(PORTS):
                reads = sorted(ctx.get(dut.rd_vc[i][r]) for r in range(speedup)
                               if ctx.get(dut.rd_valid[i][r]))
                assert reads == sorted(j % vcs for j in range(i * vcs, (i + 1) * vcs) if granted[j])
            for j in range(n):
                if req[j]:
                    waited[j] = 0 if granted[j] else waited[j] + 1
                    assert waited[j] <= bound, f"VC {j} starved for {waited[j]} cycles"
                if granted[j] and tails[j]:
                    ports[j] = 1 << rng.choice(legal_outputs(j // vcs))
            await ctx.tick()

    _run(dut, tb)


# -- VC allocator ---------------------------------------------------------------------------------

@pytest.mark.parametrize("vcs, classes", [(2, 2), (4, 2)])
def test_vc_allocator_never_gives_an_output_vc_twice(vcs, classes):
    """Random heads and a random one-per-output switch grant: an output VC, once given, is not given
    again until its tail crosses; every pick is of the head's class, free and has a credit."""
    p = NocParams(vcs=vcs, classes=classes, depth=4)
    dut = VcAllocator(p)
    rng = random.Random(vcs * 10 + classes)
    n = PORTS * vcs

    async def tb(ctx):
        owned = [[None] * vcs for _ in range(PORTS)]   # owner input VC per output VC
        served = 0
        for cycle in range(150):
            heads = [rng.random() < 0.6 for _ in range(n)]
            hport = [rng.choice(legal_outputs(j // vcs)) for j in range(n)]
            for j in range(n):
                ctx.set(dut.head_req[j], heads[j])
                ctx.set(dut.head_port[j], 1 << hport[j])
                ctx.set(dut.head_hash[j], rng.randrange(4))
            tail_vc = [None] * PORTS
            for o in range(PORTS):
                busy = [u for u in range(vcs) if owned[o][u] is not None]
                credit_ok = rng.getrandbits(vcs)
                ctx.set(dut.credit_ok[o], credit_ok)
                ctx.set(dut.credit_full[o], credit_ok & rng.getrandbits(vcs))
                ctx.set(dut.credit_in[o], 0)
                if busy and rng.random() < 0.3:
                    tail_vc[o] = rng.choice(busy)
                ctx.set(dut.tail_valid[o], tail_vc[o] is not None)
                ctx.set(dut.tail_vc[o], tail_vc[o] or 0)
                ctx.set(dut.tail_need[o], 0)
            eligible = _bits(ctx.get(dut.eligible), n)
            grant = [0] * n
            for o in range(PORTS):
                cands = [j for j in range(n) if eligible[j] and hport[j] == o]
                assert all(heads[j] for j in cands)
                if cands and rng.random() < 0.8:
                    grant[rng.choice(cands)] = 1
            ctx.set(dut.grant, sum(b << j for j, b in enumerate(grant)))
            picks = {}
            for j in range(n):
                if grant[j]:
                    o, u = hport[j], ctx.get(dut.pick[j])
                    picks[j] = u
                    assert p.class_of_vc(u) == p.class_of_vc(j % vcs), "pick outside the head's class"
                    assert owned[o][u] is None or tail_vc[o] == u, \
                        f"cycle {cycle}: output {o} VC {u} given twice"
                    assert ctx.get(dut.credit_ok[o]) >> u & 1
            await ctx.tick()
            for o in range(PORTS):
                if tail_vc[o] is not None:
                    owned[o][tail_vc[o]] = None
            for j, u in picks.items():
                owned[hport[j]][u] = j
            served += sum(grant)
            assert not ctx.get(dut.error)
        assert served > 30

    _run(dut, tb)


# -- parameter validation ---------------------------------------------------------------------------

def test_bad_parameters_raise_cleanly():
    """Rejected parameters raise ValueError and leave no unused-elaboratable warning behind."""
    import gc

    from rtl.noc.mesh import Mesh
    from rtl.noc.network_interface import NetworkInterface
    from rtl.noc.router import Router

    p = NocParams(coord_bits=2)
    for make in (lambda: Router(p, 4, 0), lambda: Mesh(p, 5, 2), lambda: NetworkInterface(p, 2, 0, 2, 2),
                 lambda: NetworkInterface(p, 0, 0, 2, 2, inj_depth=0), lambda: SwitchAllocator(p, speedup=3),
                 lambda: VcBuffer(vcs=0, depth=1, shape=1)):
        with pytest.raises(ValueError):
            make()
    gc.collect()
    with pytest.raises(ValueError):
        NocParams(vcs=3, classes=2)
