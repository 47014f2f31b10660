"""cocotb testbench of the whole compute tile (:class:`rtl.tile.tile.Tile`): programs loaded and run
through its AXI4-Lite port, weights read from an AXI4 memory, results compared with the ISS.

The host is cocotbext-axi's ``AxiLiteMaster`` reached through the project's driver
(:class:`poblano.host.tile_registers.AsyncRegisters`); the weight memory is cocotbext-axi's
``AxiRamRead`` with random pauses on its channels, the image placed at a non-zero base address.
Each case (of the JSON file named by ``POBLANO_TILE_CASES``, written by the pytest wrapper with
:func:`write_cases`) loads the whole scratchpad, the registers and the program, starts the tile,
waits for the interrupt and compares the stop status, the fault pc or the step count, every
register and every scratchpad word with what :class:`sim_models.tile_iss.TileIss` computed.
"""

import json
import logging
import os
import random

import cocotb
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiRamRead, AxiReadBus

from poblano.host.tile_registers import AsyncRegisters, AxiLiteTransport, program_words
from rtl.tile.register_map import tile_register_map
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
                         "spad": [int(w) for w in iss.spad]},
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
        dut._log.info("%s: %s after %d instructions, %d cycles on the tile", case["name"],
                      STATUS[status["code"]], await regs.steps.read(), await regs.cycles.read())


def write_model_runs(path, runner, result=None, pauses=True):
    """Write the runs of a :class:`poblano.compiler.TileRunner` (its ``trace``, after ``generate``)
    for :func:`model_matches_the_iss`, with the ISS's scratchpad at the end; ``result``: where the
    testbench writes the tile's cycles per run (JSON); ``pauses``: the weight memory pauses at
    random, or answers every cycle."""
    from sim_models.tile_isa import encode_program

    runs = [{"phase": r["phase"], "ids_addr": r["ids_addr"], "ids": r["ids"],
             "regs": {str(k): v for k, v in r["regs"].items()}, "program": encode_program(r["program"]).hex(),
             "logits_addr": r["logits_addr"], "logits": r["logits"]} for r in runner.trace]
    with open(path, "w") as f:
        json.dump({"image": bytes(runner.compiled.image.data).hex(), "runs": runs,
                   "spad": [int(w) for w in runner.iss.spad], "result": str(result) if result else None,
                   "pauses": pauses}, f)


@cocotb.test()
async def model_matches_the_iss(dut):
    """A compiled model's runs (prefill, then decode steps) replayed on the tile from a fresh state,
    as :class:`poblano.compiler.TileRunner` ran them on the ISS: each run's logits, then the whole
    scratchpad at the end, equal the ISS's; the KV cache lives on in the tile from run to run."""
    with open(os.environ["POBLANO_TILE_MODEL"]) as f:
        model = json.load(f)
    image = bytes.fromhex(model["image"])
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
        cycles.append({"phase": run["phase"], "cycles": await regs.cycles.read(),
                       "instructions": await regs.steps.read()})
        dut._log.info("%s: %d instructions, %d cycles, logits equal the ISS's", what,
                      cycles[-1]["instructions"], cycles[-1]["cycles"])
    got = await regs.read_words("spad", 0, tile.spad_words)
    diff = [a for a, (x, y) in enumerate(zip(got, model["spad"], strict=True)) if x != y]
    assert not diff, f"scratchpad words {diff[:8]} differ from the ISS's ({len(diff)} in all)"
    if model["result"]:
        with open(model["result"], "w") as f:
            json.dump(cycles, f)
