"""PageAllocator (Amaranth simulator): allocation order, counts, the free counter, bad requests."""

from amaranth.sim import Simulator

from rtl.kv.layouts import KvGeometry
from rtl.kv.page_allocator import PageAllocator


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
