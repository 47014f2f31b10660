"""cocotb testbench of the whole compute tile (:class:`rtl.tile.tile.Tile`): programs loaded and run
through its AXI4-Lite port, weights read from an AXI4 memory, results compared with the ISS.

The host is cocotbext-axi's ``AxiLiteMaster`` reached through the project's driver
(:class:`poblano.host.tile_registers.AsyncRegisters`); the weight memory is cocotbext-axi's
``AxiRamRead`` with random pauses on its channels, the image placed at a non-zero base address.
Each case (of the JSON file named by ``POBLANO_TILE_CASES``, written by the pytest wrapper with
:func:`write_cases`) loads the whole scratchpad, the registers and the program, starts the tile,
waits for the interrupt and compares the stop status, the fault pc or the step count, every
register and every scratchpad word with what :class:`sim_models.tile_iss.TileIss` computed, and
checks the performance counters (``PERF_*``) against the run's cycles and the ISS's counters
(:func:`check_counters`).
"""

import json
import logging
import os
import random

import cocotb
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiRamRead, AxiReadBus

from poblano.host.tile_registers import AsyncRegisters, AxiLiteTransport, program_words
from rtl.tile.perf_counters import ACTIVITY_OF, CYCLE_COUNTER_OF, CYCLE_COUNTERS, Activity
from rtl.tile.register_map import PERF_COUNTERS, tile_register_map
from sim_models.tile_isa import STATUS, TileConfig, decode_program
from verification import config
from verification.bench import start_clock_and_reset, wait_for_high

WEIGHT_BASE = 0x1_0000_0000 + 0x2000     # above 4 GiB: the high address register matters


def _pauses(rng, probability):
    while True:
        yield rng.random() < probability


def write_cases(path, tile: TileConfig, cases, *, head_dim=32):
    """Write ``cases`` for the testbench, each with what the ISS computes for it.

    ``cases``: dicts with ``name``, ``program`` (instructions), ``image`` (bytes), optional
    ``spad`` ({address: word}), ``regs`` ({register: value}) and ``step_limit``.
    """
    from sim_models.tile_isa import encode_program
    from verification.tile.sequencer_bench import iss_run

    out = []
    for case in cases:
        limit = case.get("step_limit", 10_000_000)
        iss, status, pc, steps = iss_run(tile, case["program"], case["image"], regs=case.get("regs"),
                                         spad=case.get("spad"), max_steps=limit, head_dim=head_dim)
        spad = [0] * tile.spad_words
        for addr, value in (case.get("spad") or {}).items():
            spad[addr] = int(value)
        out.append({
            "name": case["name"], "program": encode_program(case["program"]).hex(),
            "image": bytes(case["image"]).hex(), "spad": spad,
            "regs": {str(r): v for r, v in (case.get("regs") or {}).items()}, "step_limit": limit,
            "expected": {"status": status, "pc": pc, "steps": steps, "regs": [0] + iss.regs[1:],
                         "spad": [int(w) for w in iss.spad], "counters": iss.counters()},
        })
    with open(path, "w") as f:
        json.dump(out, f)


async def _attach(dut, ram_size, pauses=True):
    """The host driver and the weight memory (pausing at random unless ``pauses`` is false) on the
    tile's ports, then reset: ``(tile config, registers, ram)``."""
    cfg = config()
    tile = TileConfig(**cfg["tile"])
    seed = random.getrandbits(32)
    dut._log.info("pause patterns seeded with %d (derived from COCOTB_RANDOM_SEED)", seed)
    rng = random.Random(seed)
    # The bus models drive their signals from their creation: make them before reset ends, or the
    # weight port's counters pick up Icarus's X from an undriven R channel.
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
    for channel in (master.write_if, master.read_if):
        channel.log.setLevel(logging.WARNING)        # not a line per register access
    regs = AsyncRegisters(AxiLiteTransport(master), tile_register_map(
        spad_words=tile.spad_words, prog_words=cfg["prog_words"], rows=tile.rows, cols=tile.cols,
        interleave=tile.interleave, lanes=tile.lanes))
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                     size=ram_size)
    ram.log.setLevel(logging.WARNING)
    if pauses:
        ram.ar_channel.set_pause_generator(_pauses(random.Random(rng.getrandbits(32)), 0.2))
        ram.r_channel.set_pause_generator(_pauses(random.Random(rng.getrandbits(32)), 0.3))
    await start_clock_and_reset(dut)
    assert await regs.id.read() == 0x4E4C4250
    return tile, regs, ram


async def _load_weights(regs, ram, image):
    ram.write(WEIGHT_BASE % ram.size, image)
    await regs.weight_base_lo.write(WEIGHT_BASE & 0xFFFF_FFFF)
    await regs.weight_base_hi.write(WEIGHT_BASE >> 32)
    await regs.weight_size_lo.write(len(image))
    await regs.weight_size_hi.write(0)


async def read_counters(regs):
    """The run's ``cycles``, ``instructions`` (``STEPS``) and every performance counter, by name
    (:data:`rtl.tile.register_map.PERF_COUNTERS`)."""
    out = {"cycles": await regs.cycles.read(), "instructions": await regs.steps.read()}
    for name in PERF_COUNTERS:
        out[name] = await getattr(regs, f"perf_{name}").read()
    return out


def check_counters(what, perf, iss, *, data_bytes, head_dim, exact_weights=True):
    """The performance counters of a run (:func:`read_counters`) against the invariants and the ISS's
    counters of the same run (``TileIss.counters()``).

    The six cycle counters add up to ``CYCLES``; a class has cycles exactly when the run executed
    an instruction of it; weight stalls happen only in GEMMs and copies; the beats carry the
    bytes; the appended records are the ISS's KV bytes written; the records read at least the
    ISS's KV bytes read (the ISS counts each record once per query and KV head; the attention
    engine reads it more than once, and checks lengths with extra reads). ``exact_weights``: the
    weight bytes equal the ISS's (true when every GEMM's weight rows are whole 4-byte words and the
    image's base is 4-byte aligned), else at least them.
    """
    split = {name: perf[name] for name in CYCLE_COUNTERS}
    assert sum(split.values()) == perf["cycles"], f"{what}: {split} do not add up to {perf['cycles']} cycles"
    ran = {CYCLE_COUNTER_OF[ACTIVITY_OF[name]] for name in iss["by_opcode"] if name in ACTIVITY_OF}
    for activity, name in CYCLE_COUNTER_OF.items():
        if activity != Activity.OTHER:      # (fetch and decode: every run has some)
            assert (perf[name] > 0) == (name in ran), f"{what}: {name} = {perf[name]}, ran {sorted(ran)}"
    assert perf["weight_stall_cycles"] <= perf["gemm_cycles"] + perf["copy_cycles"], what
    if exact_weights:
        assert perf["weight_bytes"] == iss["weight_bytes"], \
            f"{what}: {perf['weight_bytes']} weight bytes, the ISS read {iss['weight_bytes']}"
    else:
        assert perf["weight_bytes"] >= iss["weight_bytes"], what
    assert 4 * perf["weight_beats"] <= perf["weight_bytes"] <= data_bytes * perf["weight_beats"], what
    record = 4 * head_dim
    assert perf["kv_appends"] * record == iss["kv_bytes_written"], what
    assert perf["kv_reads"] * record >= iss["kv_bytes_read"], what
    assert (perf["kv_reads"] > 0) == ("ATTN" in iss["by_opcode"]), what


async def _run(dut, regs, program, what, max_cycles):
    """Load ``program``, start it, wait for the interrupt and clear it: the stop status fields."""
    await regs.write_words("program", 0, program_words(program))
    await regs.prog_len.write(len(program))
    await regs.irq_enable.write(done=1, error=1)
    await regs.ctrl.write(start=1)
    await wait_for_high(dut.irq, dut.clk, max_cycles=max_cycles, what=f"the interrupt of {what}")
    irq = await regs.irq_status.read_fields()
    await regs.irq_status.write(done=1, error=1)
    assert int(dut.irq.value) == 0, "the interrupt line falls when IRQ_STATUS is cleared"
    status = await regs.status.read_fields()
    assert status["busy"] == 0 and status["done"] == 1
    assert irq == {"done": 1, "error": int(status["code"] != 0)}, irq
    return status


@cocotb.test()
async def programs_match_the_iss(dut):
    cfg = config()
    tile, regs, ram = await _attach(dut, 1 << 16)
    with open(os.environ["POBLANO_TILE_CASES"]) as f:
        cases = json.load(f)
    for case in cases:
        ram.write(0, b"\0" * ram.size)
        await _load_weights(regs, ram, bytes.fromhex(case["image"]))
        await regs.step_limit.write(case["step_limit"])
        await regs.write_words("gpr", 0, [0] * 16)
        for r, value in case["regs"].items():
            await regs.write_words("gpr", int(r), [value])
        await regs.write_words("spad", 0, case["spad"])
        status = await _run(dut, regs, decode_program(bytes.fromhex(case["program"])),
                            f"case {case['name']}", 200_000)
        expected = case["expected"]
        assert status["code"] == expected["status"], \
            f"{case['name']}: status {STATUS[status['code']]}, the ISS {STATUS[expected['status']]}"
        if expected["pc"] is not None:
            assert await regs.pc.read() == expected["pc"], case["name"]
        else:
            assert await regs.steps.read() == expected["steps"], case["name"]
        assert await regs.read_words("gpr", 0, 16) == expected["regs"], case["name"]
        got = await regs.read_words("spad", 0, tile.spad_words)
        diff = [a for a, (x, y) in enumerate(zip(got, expected["spad"], strict=True)) if x != y]
        want = expected["spad"]
        assert not diff, (f"{case['name']}: scratchpad words {diff[:8]} differ (tile "
                          f"{[hex(got[a]) for a in diff[:4]]}, ISS {[hex(want[a]) for a in diff[:4]]})")
        perf = await read_counters(regs)
        check_counters(case["name"], perf, expected["counters"], data_bytes=cfg.get("data_bytes", 8),
                       head_dim=cfg.get("head_dim", 32))
        dut._log.info("%s: %s after %d instructions, %d cycles on the tile (%s)", case["name"],
                      STATUS[status["code"]], perf["instructions"], perf["cycles"],
                      ", ".join(f"{name} {perf[name]}" for name in PERF_COUNTERS))


def write_model_runs(path, runner, result=None, pauses=True):
    """Write the runs of a :class:`poblano.compiler.TileRunner` (its ``trace``, after ``generate``)
    for :func:`model_matches_the_iss`, with the ISS's scratchpad at the end; ``result``: where the
    testbench writes the tile's cycles, instructions and performance counters per run (JSON, a list
    of :func:`read_counters` dicts with the run's ``phase``); ``pauses``: the weight memory pauses at
    random, or answers every cycle."""
    from sim_models.tile_isa import encode_program

    runs = [{"phase": r["phase"], "ids_addr": r["ids_addr"], "ids": r["ids"],
             "regs": {str(k): v for k, v in r["regs"].items()}, "program": encode_program(r["program"]).hex(),
             "logits_addr": r["logits_addr"], "logits": r["logits"], "counters": report}
            for r, report in zip(runner.trace, runner.reports, strict=True)]
    with open(path, "w") as f:
        json.dump({"image": bytes(runner.compiled.image.data).hex(), "runs": runs,
                   "spad": [int(w) for w in runner.iss.spad], "result": str(result) if result else None,
                   "pauses": pauses}, f)


@cocotb.test()
async def model_matches_the_iss(dut):
    """A compiled model's runs (prefill, then decode steps) replayed on the tile from a fresh state,
    as :class:`poblano.compiler.TileRunner` ran them on the ISS: each run's logits, then the whole
    scratchpad at the end, equal the ISS's; the KV cache lives on in the tile from run to run. Each
    run's performance counters pass :func:`check_counters` against the ISS's counters of the run."""
    with open(os.environ["POBLANO_TILE_MODEL"]) as f:
        model = json.load(f)
    image = bytes.fromhex(model["image"])
    cfg = config()
    tile, regs, ram = await _attach(dut, 1 << (len(image) + WEIGHT_BASE % (1 << 16)).bit_length(),
                                    pauses=model.get("pauses", True))
    await _load_weights(regs, ram, image)
    await regs.step_limit.write(0xFFFF_FFFF)
    cycles = []
    for n, run in enumerate(model["runs"]):
        what = f"run {n} ({run['phase']})"
        await regs.write_words("spad", run["ids_addr"], run["ids"])
        for r, value in run["regs"].items():
            await regs.write_words("gpr", int(r), [value])
        status = await _run(dut, regs, decode_program(bytes.fromhex(run["program"])), what, 200_000_000)
        assert status["code"] == 0, f"{what}: the tile stopped with {STATUS[status['code']]}"
        got = await regs.read_words("spad", run["logits_addr"], len(run["logits"]))
        diff = [i for i, (x, y) in enumerate(zip(got, run["logits"], strict=True)) if x != y]
        assert not diff, f"{what}: logits {diff[:8]} differ ({len(diff)} of {len(got)})"
        perf = await read_counters(regs)
        check_counters(what, perf, run["counters"], data_bytes=cfg.get("data_bytes", 8),
                       head_dim=cfg["head_dim"], exact_weights=False)
        cycles.append({"phase": run["phase"], **perf})
        dut._log.info("%s: %d instructions, %d cycles, logits equal the ISS's", what,
                      cycles[-1]["instructions"], cycles[-1]["cycles"])
    got = await regs.read_words("spad", 0, tile.spad_words)
    diff = [a for a, (x, y) in enumerate(zip(got, model["spad"], strict=True)) if x != y]
    assert not diff, f"scratchpad words {diff[:8]} differ from the ISS's ({len(diff)} in all)"
    if model["result"]:
        with open(model["result"], "w") as f:
            json.dump(cycles, f)
