"""Amaranth-simulator driver for the fixed-latency pipelines of the arithmetic units.

The vector unit's arithmetic units (and the MX accumulate adder) have no valid or ready: a result
leaves ``latency`` enabled cycles after its operands, and the clock enable ``en`` freezes every
register. :func:`run_pipeline` streams one vector per cycle through such a unit, optionally
toggling ``en``, and collects the outputs of every vector: the one harness their unit tests share.
"""

from amaranth.sim import Simulator

__all__ = ["run_pipeline", "random_enable"]


def random_enable(rng, probability=0.7):
    """An ``enable_pattern`` for :func:`run_pipeline`: ``en`` high with the given probability."""
    return lambda cycle: int(rng.random() < probability)


def run_pipeline(dut, vectors, outputs, *, latency=None, enable_pattern=None):
    """Stream ``vectors`` through ``dut``; return one dict of ``outputs`` per vector, in order.

    Parameters
    ----------
    dut : wiring.Component
        A fixed-latency pipeline (with an ``en`` port when ``enable_pattern`` is given).
    vectors : list of dict
        Port name -> value, one dict per operation, presented on consecutive enabled cycles.
    outputs : sequence of str
        Port names sampled when each vector's result is due.
    latency : int, optional
        Enabled cycles from operands to outputs (default ``dut.latency``).
    enable_pattern : callable, optional
        ``cycle -> 0 or 1``: the value of ``en`` in each cycle (default always 1).
    """
    latency = dut.latency if latency is None else latency
    results = []

    async def tb(ctx):
        issued, cycle, ages = 0, 0, []        # ages: enabled edges seen by each vector in flight
        while len(results) < len(vectors):
            en = 1 if enable_pattern is None else enable_pattern(cycle)
            if issued < len(vectors):
                for name, value in vectors[issued].items():
                    ctx.set(getattr(dut, name), value)
            if enable_pattern is not None:
                ctx.set(dut.en, en)
            if latency == 0 and en and issued < len(vectors):
                results.append({name: ctx.get(getattr(dut, name)) for name in outputs})
                issued += 1
                await ctx.tick()
                cycle += 1
                continue
            await ctx.tick()
            cycle += 1
            if en:
                ages = [age + 1 for age in ages]
                if issued < len(vectors):
                    ages.append(1)
                    issued += 1
                if ages and ages[0] == latency:
                    ages.pop(0)
                    results.append({name: ctx.get(getattr(dut, name)) for name in outputs})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results
