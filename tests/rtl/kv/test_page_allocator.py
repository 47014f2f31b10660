"""PageAllocator (Amaranth simulator): allocation order, counts, the free counter, bad requests."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.kv.layouts import KvGeometry
from rtl.kv.page_allocator import PageAllocator
from sim_models.kv_cache import KvCacheModel


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _allocator(pages=4, seqs=3):
    return PageAllocator(KvGeometry(pages=pages, page_tokens=2, token_bits=8, seqs=seqs,
                                    max_pages_per_seq=2, banks=1))


async def _request(ctx, port, **strobes):
    page = strobes.pop("page", 0)
    ctx.set(port.ref_page, page)
    for name, value in strobes.items():
        ctx.set(getattr(port, name), value)
    await ctx.tick()
    for name in strobes:
        ctx.set(getattr(port, name), 0)


async def _settle(ctx, port):
    await ctx.tick()
    assert ctx.get(port.settled)


def test_lowest_page_first_and_freeing():
    dut = _allocator()
    port = dut.port

    async def bench(ctx):
        await ctx.tick()                        # candidate register loads
        got = []
        for _ in range(4):
            assert ctx.get(port.alloc_ready)
            got.append(ctx.get(port.alloc_page))
            await _request(ctx, port, alloc=1)
            assert not ctx.get(port.alloc_ready)          # recomputing for a cycle
            await _settle(ctx, port)
        assert got == [0, 1, 2, 3]
        assert ctx.get(port.free_count) == 0 and not ctx.get(port.alloc_ready)
        await _request(ctx, port, incref=1, page=2)
        await _request(ctx, port, decref=1, page=2)
        await _settle(ctx, port)
        assert ctx.get(port.free_count) == 0              # 2 -> 1: still in use
        await _request(ctx, port, decref=1, page=2)
        assert ctx.get(port.free_count) == 0              # recounted one cycle later
        assert not ctx.get(port.alloc_ready)
        await _settle(ctx, port)
        assert ctx.get(port.free_count) == 1
        assert ctx.get(port.alloc_ready) and ctx.get(port.alloc_page) == 2
        ctx.set(port.query_page, 1)
        assert ctx.get(port.query_count) == 1
        assert not ctx.get(port.error)

    _run(dut, bench)


def test_bad_requests_change_nothing_and_set_error():
    for strobes in ({"decref": 1, "page": 1}, {"incref": 1, "page": 3}, {"alloc": 1, "decref": 1},
                    {"incref": 1, "decref": 1, "page": 0}):
        dut = _allocator()
        port = dut.port

        async def bench(ctx, strobes=strobes, port=port):
            await ctx.tick()
            await _request(ctx, port, alloc=1)            # page 0 in use
            await _settle(ctx, port)
            await _request(ctx, port, **strobes)
            assert ctx.get(port.error), strobes
            assert ctx.get(port.free_count) == 3
            ctx.set(port.query_page, 0)
            assert ctx.get(port.query_count) == 1

        _run(dut, bench)


def test_count_saturation_is_an_error():
    dut = _allocator(seqs=1)                              # counts are one bit wide: max 1

    async def bench(ctx):
        await ctx.tick()
        await _request(ctx, dut.port, alloc=1)
        await _request(ctx, dut.port, incref=1, page=0)
        assert ctx.get(dut.port.error)
        ctx.set(dut.port.query_page, 0)
        assert ctx.get(dut.port.query_count) == 1

    _run(dut, bench)


@pytest.mark.parametrize("pages", [3, 5, 6, 7, 9, 12])
def test_non_power_of_two_page_counts(pages):
    """Page counts that are not powers of two hand out the same pages as the golden model.

    The lowest-free-page tree splits a slice at the largest power of two below its length, so every
    subtree but the last is a power of two; with 3, 5, 6, 7, 9 or 12 pages the split is uneven. Every
    page is allocated, some are freed (a few after an ``incref``, so they need two ``decref``s), all
    are allocated again, then random requests follow. After each request, once settled, the candidate
    page, ``alloc_ready``, ``free_count`` and every page's count must be those of the reference counts
    of :class:`sim_models.kv_cache.KvCacheModel` (lowest free page first, free at count zero). Kills
    the mutant that splits at ``len(bits) // 2`` instead (wrong high-half offset for 3, 5, 6, 7, ...
    pages), which only the slow cocotb "odd" configuration caught.
    """
    seed = pages
    rng = random.Random(seed)
    dut = _allocator(pages=pages)
    port = dut.port
    model = KvCacheModel(dut.geometry.config)    # its refcount/_alloc/_release: the allocator contract
    count_max = (1 << dut.geometry.count_width) - 1

    async def check(ctx, what):
        where = f"seed {seed}, {pages} pages, after {what}"
        counts = []
        for page in range(pages):
            ctx.set(port.query_page, page)
            counts.append(ctx.get(port.query_count))
        assert counts == model.refcount, f"{where}: counts {counts}, model {model.refcount}"
        assert ctx.get(port.free_count) == model.free_pages, where
        assert ctx.get(port.alloc_ready) == (model.free_pages > 0), where
        if model.free_pages:
            assert ctx.get(port.alloc_page) == model.refcount.index(0), (
                f"{where}: offers page {ctx.get(port.alloc_page)}, lowest free is {model.refcount.index(0)}")
        assert not ctx.get(port.error), where

    async def alloc(ctx):
        assert ctx.get(port.alloc_ready)
        page = ctx.get(port.alloc_page)
        assert page == model._alloc(), f"seed {seed}, {pages} pages: allocated page {page}"
        await _request(ctx, port, alloc=1)
        assert not ctx.get(port.alloc_ready)              # recomputing for a cycle
        await _settle(ctx, port)
        await check(ctx, f"alloc of page {page}")

    async def incref(ctx, page):
        model.refcount[page] += 1                         # as the model's fork does
        await _request(ctx, port, incref=1, page=page)
        await _settle(ctx, port)
        await check(ctx, f"incref of page {page}")

    async def decref(ctx, page):
        model._release(page)
        await _request(ctx, port, decref=1, page=page)
        await _settle(ctx, port)
        await check(ctx, f"decref of page {page}")

    async def bench(ctx):
        await ctx.tick()                                  # candidate register loads
        await check(ctx, "reset")
        for _ in range(pages):                            # every page, lowest first
            await alloc(ctx)
        assert model.free_pages == 0
        # Free a random half or so (always the last page, never all); some are shared first.
        freed = sorted(set(rng.sample(range(pages - 1), pages // 2)) | {pages - 1})
        for page in rng.sample(freed, len(freed)):
            if rng.random() < 0.3:
                await incref(ctx, page)
                await decref(ctx, page)
            await decref(ctx, page)
        assert model.free_pages == len(freed)
        for _ in freed:                                   # reallocated lowest first
            await alloc(ctx)
        assert model.free_pages == 0
        for _ in range(8 * pages):                        # then any mix of good requests
            used = [p for p in range(pages) if model.refcount[p]]
            choice = rng.random()
            if model.free_pages and (choice < 0.4 or not used):
                await alloc(ctx)
            elif choice < 0.6 and any(model.refcount[p] < count_max for p in used):
                await incref(ctx, rng.choice([p for p in used if model.refcount[p] < count_max]))
            else:
                await decref(ctx, rng.choice(used))

    _run(dut, bench)
