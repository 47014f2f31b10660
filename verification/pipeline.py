"""Amaranth-simulator driver for the fixed-latency pipelines of the arithmetic units.

The vector unit's arithmetic units (and the MX accumulate adder) have no valid or ready: a result
leaves ``latency`` enabled cycles after its operands, and the clock enable ``en`` freezes every
register. :func:`run_pipeline` streams one vector per cycle through such a unit, optionally
toggling ``en`` (with junk on the inputs while it is low), and collects the outputs of every vector:
the one harness their unit tests share.
"""

from amaranth.sim import Simulator

__all__ = ["run_pipeline", "random_enable"]


def random_enable(rng, probability=0.7):
    """An ``enable_pattern`` for :func:`run_pipeline`: ``en`` high with the given probability."""
    return lambda cycle: int(rng.random() < probability)


def run_pipeline(dut, vectors, outputs, *, latency=None, enable_pattern=None, junk=None):
    """Stream ``vectors`` through ``dut``; return one dict of ``outputs`` per vector, in order.

    Parameters
    ----------
    dut : wiring.Component
        A fixed-latency pipeline (with an ``en`` port when ``enable_pattern`` is given). A latency of
        0 means a purely combinational unit: it is then simulated without a clock.
    vectors : list of dict
        Port name -> value, one dict per operation, presented on consecutive enabled cycles.
    outputs : sequence of str
        Port names sampled when each vector's result is due.
    latency : int, optional
        Enabled cycles from operands to outputs (default ``dut.latency``).
    enable_pattern : callable, optional
        ``cycle -> 0 or 1``: the value of ``en`` in each cycle (default always 1).
    junk : callable, optional
        ``() -> dict`` of port values presented in the cycles that carry no vector (``en`` low, or
        every vector issued): inputs the pipeline must ignore. Default: the last vector stays.
    """
    latency = dut.latency if latency is None else latency
    results = []

    def sample(ctx):
        results.append({name: ctx.get(getattr(dut, name)) for name in outputs})

    async def tb(ctx):
        issued, cycle, ages = 0, 0, []        # ages: enabled edges seen by each vector in flight
        while len(results) < len(vectors):
            en = 1 if enable_pattern is None else enable_pattern(cycle)
            presenting = en and issued < len(vectors)
            values = vectors[issued] if presenting else (junk() if junk else {})
            for name, value in values.items():
                ctx.set(getattr(dut, name), value)
            if enable_pattern is not None:
                ctx.set(dut.en, en)
            if latency == 0:
                await ctx.delay(1e-8)          # combinational: settle, then read
                if presenting:
                    sample(ctx)
                    issued += 1
                cycle += 1
                continue
            await ctx.tick()
            cycle += 1
            if en:
                ages = [age + 1 for age in ages]
                if presenting:
                    ages.append(1)
                    issued += 1
                if ages and ages[0] == latency:
                    ages.pop(0)
                    sample(ctx)

    sim = Simulator(dut)
    if latency:
        sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results
