"""Amaranth-simulator unit tests of the fabric's arbiter, output allocator and VC buffer."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.noc.arbiter import RoundRobinArbiter
from rtl.noc.layouts import NocParams
from rtl.noc.output_allocator import OutputAllocator
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


# -- output allocator -----------------------------------------------------------------------------

@pytest.mark.parametrize("inputs, vcs", [(1, 1), (2, 2), (4, 4), (5, 2)])
def test_output_allocator_matches_the_packet_model(inputs, vcs):
    """Random packets on every input VC, random credits: one grant per cycle, only to a requester that
    may send (a body on the VC it holds, a head on a free VC), each output VC held by one packet at a
    time, ``free`` as the model says, and no head waits beyond a bound."""
    dut = OutputAllocator(inputs, vcs)
    rng = random.Random(inputs * 10 + vcs)
    n = inputs * vcs
    bound = 12 * n  # generous: a favourite waits for its VC to free and then at most n - 1 grants

    async def tb(ctx):
        holder = [None] * vcs            # requester holding each output VC
        left = [0] * n                   # flits of the current packet still to send (head included)
        sending = [False] * n            # the packet's head went through
        waited = [0] * n
        served = 0
        for cycle in range(600):
            for r in range(n):
                if left[r] == 0 and rng.random() < 0.5:
                    left[r], sending[r] = rng.choice((1, 2, 4)), False
            # a body flit is present only some of the time (wormhole: it may still be upstream)
            present = [left[r] > 0 and (not sending[r] or rng.random() < 0.7) for r in range(n)]
            head = [present[r] and not sending[r] for r in range(n)]
            body = [present[r] and sending[r] for r in range(n)]
            tail = [left[r] == 1 for r in range(n)]
            credit = rng.getrandbits(vcs) | (rng.getrandbits(vcs) if rng.random() < 0.5 else 0)
            ctx.set(dut.head, sum(b << r for r, b in enumerate(head)))
            ctx.set(dut.body, sum(b << r for r, b in enumerate(body)))
            ctx.set(dut.tail, sum(b << r for r, b in enumerate(tail)))
            ctx.set(dut.credit_ok, credit)
            assert ctx.get(dut.free) == sum((holder[v] is None) << v for v in range(vcs))
            grant = _bits(ctx.get(dut.grant), n)
            assert sum(grant) <= 1, f"cycle {cycle}: two flits granted one link"
            for r in range(n):
                v = r % vcs
                if head[r]:
                    waited[r] = 0 if grant[r] else waited[r] + 1
                    assert waited[r] <= bound, f"cycle {cycle}: head {r} starved for {waited[r]} cycles"
                if not grant[r]:
                    continue
                assert credit >> v & 1, f"cycle {cycle}: requester {r} granted without a credit"
                if head[r]:
                    assert holder[v] is None, f"cycle {cycle}: output VC {v} given to a second packet"
                    if not tail[r]:
                        holder[v] = r
                    sending[r] = True
                else:
                    assert body[r] and holder[v] == r, f"cycle {cycle}: {r} sent on a VC it does not hold"
                    if tail[r]:
                        holder[v] = None
                left[r] -= 1
                served += 1
            if sum(head) + sum(body) and not sum(grant):
                # nothing granted: then nothing was eligible
                assert all(not (body[r] and credit >> (r % vcs) & 1) for r in range(n))
            await ctx.tick()
        assert served > 150, served

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
                 lambda: NetworkInterface(p, 0, 0, 2, 2, inj_depth=0), lambda: OutputAllocator(0, 2),
                 lambda: VcBuffer(vcs=0, depth=1, shape=1)):
        with pytest.raises(ValueError):
            make()
    gc.collect()
    with pytest.raises(ValueError):
        NocParams(vcs=3, classes=2)
