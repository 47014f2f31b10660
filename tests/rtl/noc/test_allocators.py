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


def _round_robin_model(n, requests, pointer):
    """The winner of a round-robin pick: the lowest request at or above ``pointer``, else the lowest."""
    order = list(range(pointer, n)) + list(range(pointer))
    return next((k for k in order if requests >> k & 1), None)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 20])
def test_arbiter_matches_round_robin_model(n):
    """Cycle for cycle against the model, with random advance and per-requester hold."""
    dut = RoundRobinArbiter(n)
    seed = 1000 + n
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def tb(ctx):
        pointer = 0
        for cycle in range(400):
            req = rng.getrandbits(n) if rng.random() < 0.8 else 1 << rng.randrange(n)
            advance, hold = rng.random() < 0.8, rng.getrandbits(n)
            ctx.set(dut.requests, req)
            ctx.set(dut.advance, advance)
            ctx.set(dut.hold, hold)
            winner = _round_robin_model(n, req, pointer)
            expected = 0 if winner is None else 1 << winner
            assert ctx.get(dut.grant) == expected, (cycle, bin(req), pointer)
            if advance and winner is not None:
                pointer = winner if hold >> winner & 1 else (winner + 1) % n
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

ALLOCATOR_CASES = [(1, 1, 1), (2, 2, 1), (4, 4, 2), (5, 2, 2), (5, 4, 1)]


@pytest.mark.parametrize("buckets", [0, 4], ids=["static", "dynamic"])
@pytest.mark.parametrize("inputs, vcs, classes", ALLOCATOR_CASES)
def test_output_allocator_matches_the_packet_model(inputs, vcs, classes, buckets):
    """Random packets on every input VC, random credits and drains: one grant per cycle, only to a
    requester that may send (a body on the output VC its packet holds, a head on a free VC it may take
    with a credit: its own with static VCs, one of its class's with dynamic VCs), each output VC held
    by one packet at a time, ``free`` as the model says, no head given a VC other than the one its
    order bucket is pinned to, and no head waits beyond a bound. Dynamic VCs get few buckets (4), so
    heads share them and get pinned often."""
    dut = OutputAllocator(inputs, vcs, classes, buckets)
    seed = inputs * 1000 + vcs * 100 + classes * 10 + buckets
    print(f"seed {seed}")
    rng = random.Random(seed)
    n = inputs * vcs
    vpc = vcs // classes
    bound = 25 * n  # generous: a pinned head waits for its VC to drain, a favourite then for n - 1 grants

    def class_vcs(r):
        """The output VCs requester ``r``'s head may take."""
        if not buckets:
            return range(r % vcs, r % vcs + 1)
        c = (r % vcs) // vpc
        return range(c * vpc, (c + 1) * vpc)

    async def tb(ctx):
        holder = [None] * vcs            # requester whose packet holds each output VC
        held_vc = [None] * n             # the output VC each requester's packet holds
        remembered = [set() for _ in range(vcs)]   # buckets each output VC carried since it drained
        left = [0] * n                   # flits of the current packet still to send (head included)
        bucket = [0] * n
        waited = [0] * n
        served = pinned_grants = 0
        for cycle in range(1500):
            for r in range(n):
                if left[r] == 0 and rng.random() < 0.5:
                    left[r], bucket[r] = rng.choice((1, 2, 4)), rng.randrange(max(buckets, 1))
            sending = [held_vc[r] is not None for r in range(n)]
            # a body flit is present only some of the time (wormhole: it may still be upstream)
            present = [left[r] > 0 and (not sending[r] or rng.random() < 0.7) for r in range(n)]
            head = [present[r] and not sending[r] for r in range(n)]
            body = [present[r] and sending[r] for r in range(n)]
            tail = [left[r] == 1 for r in range(n)]
            credit = rng.getrandbits(vcs) | (rng.getrandbits(vcs) if rng.random() < 0.5 else 0)
            drained = sum((rng.random() < 0.3) << u for u in range(vcs))
            ctx.set(dut.head, sum(b << r for r, b in enumerate(head)))
            ctx.set(dut.body, sum(b << r for r, b in enumerate(body)))
            ctx.set(dut.tail, sum(b << r for r, b in enumerate(tail)))
            if buckets:
                for r in range(n):
                    ctx.set(dut.bucket[r], bucket[r])
                    ctx.set(dut.ovc[r], held_vc[r] or 0)
                ctx.set(dut.drained, drained)
            ctx.set(dut.credit_ok, credit)
            assert ctx.get(dut.free) == sum((holder[u] is None) << u for u in range(vcs))
            grant = _bits(ctx.get(dut.grant), n)
            u = ctx.get(dut.grant_vc)
            assert sum(grant) <= 1, f"cycle {cycle}: two flits granted one link"
            new_bucket = None
            for r in range(n):
                if head[r]:
                    waited[r] = 0 if grant[r] else waited[r] + 1
                    assert waited[r] <= bound, f"cycle {cycle}: head {r} starved for {waited[r]} cycles"
                if not grant[r]:
                    continue
                assert credit >> u & 1, f"cycle {cycle}: requester {r} granted VC {u} without a credit"
                if head[r]:
                    assert u in class_vcs(r), f"cycle {cycle}: head {r} given VC {u} of another class"
                    assert holder[u] is None, f"cycle {cycle}: output VC {u} given to a second packet"
                    others = [w for w in class_vcs(r) if w != u and bucket[r] in remembered[w]]
                    assert not others, f"cycle {cycle}: head {r} of bucket {bucket[r]} given VC {u}, " \
                                       f"pinned to {others[0]}"
                    pinned_grants += bucket[r] in remembered[u]
                    new_bucket = bucket[r]
                    if not tail[r]:
                        holder[u], held_vc[r] = r, u
                else:
                    assert body[r] and holder[u] == r, f"cycle {cycle}: {r} sent on VC {u} it does not hold"
                    if tail[r]:
                        holder[u], held_vc[r] = None, None
                left[r] -= 1
                served += 1
            if sum(head) + sum(body) and not sum(grant):
                # nothing granted: then no body flit had a credit on its VC
                assert all(not (body[r] and credit >> held_vc[r] & 1) for r in range(n))
            for w in range(vcs):
                was_free = ctx.get(dut.free) >> w & 1
                if drained >> w & 1 and was_free:
                    remembered[w].clear()
            if new_bucket is not None:
                remembered[u].add(new_bucket)
            await ctx.tick()
        assert served > 400, served
        if buckets and vcs > classes:
            assert pinned_grants > 20, pinned_grants   # the order rule was exercised

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
    for buckets in (1, 3, -2):
        with pytest.raises(ValueError, match="buckets"):
            OutputAllocator(2, 2, buckets=buckets)
    gc.collect()
    with pytest.raises(ValueError):
        NocParams(vcs=3, classes=2)
    for buckets in (1, 3, 128):
        with pytest.raises(ValueError, match="order_buckets"):
            NocParams(order_buckets=buckets)
