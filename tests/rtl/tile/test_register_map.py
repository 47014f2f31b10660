"""The tile's register map table: sanity, the vocabulary's checks, the generated C header (compiled)
and Markdown (the copy in docs/ is current), ``poblano regs``, and the host driver on the model."""

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from poblano import cli
from poblano.host.tile_registers import (
    AsyncRegisters,
    BusError,
    RegisterBlockModel,
    RegisterError,
    Registers,
    Transport,
    UnknownNameError,
    bytes_from_words,
    program_words,
    words_from_bytes,
)
from rtl.tile.register_map import (
    CONST,
    RO,
    RW,
    STROBE,
    TILE_ID,
    TILE_REGISTERS,
    W1C,
    Field,
    Region,
    Register,
    RegisterMap,
    tile_register_map,
)
from sim_models.tile_isa import STATUS, Instruction, TileConfig, encode_program

DOCS = Path(__file__).resolve().parents[3] / "docs"

# The contract other blocks and host software rely on: name -> (offset, access, fields)
EXPECTED = {
    "ID": (0x000, CONST, ()),
    "VERSION": (0x004, CONST, ("minor", "major")),
    "CONFIG": (0x008, CONST, ("rows", "cols", "interleave", "lanes")),
    "SPAD_WORDS": (0x00C, CONST, ()),
    "PROG_WORDS": (0x010, CONST, ()),
    "CTRL": (0x020, STROBE, ("start", "abort")),
    "STATUS": (0x024, RO, ("busy", "done", "code")),
    "IRQ_STATUS": (0x028, W1C, ("done", "error")),
    "IRQ_ENABLE": (0x02C, RW, ("done", "error")),
    "PC": (0x030, RO, ()),
    "STEPS": (0x034, RO, ()),
    "CYCLES": (0x038, RO, ()),
    "STEP_LIMIT": (0x03C, RW, ()),
    "WEIGHT_BASE_LO": (0x040, RW, ()),
    "WEIGHT_BASE_HI": (0x044, RW, ()),
    "WEIGHT_SIZE_LO": (0x048, RW, ()),
    "WEIGHT_SIZE_HI": (0x04C, RW, ()),
    "PROG_LEN": (0x050, RW, ()),
    "PERF_GEMM_CYCLES": (0x060, RO, ()),
    "PERF_ATTN_CYCLES": (0x064, RO, ()),
    "PERF_VOP_CYCLES": (0x068, RO, ()),
    "PERF_KV_CYCLES": (0x06C, RO, ()),
    "PERF_COPY_CYCLES": (0x070, RO, ()),
    "PERF_OTHER_CYCLES": (0x074, RO, ()),
    "PERF_WEIGHT_STALL_CYCLES": (0x078, RO, ()),
    "PERF_WEIGHT_BYTES": (0x07C, RO, ()),
    "PERF_WEIGHT_BEATS": (0x080, RO, ()),
    "PERF_KV_READS": (0x084, RO, ()),
    "PERF_KV_APPENDS": (0x088, RO, ()),
}


# -- the table -----------------------------------------------------------------------------------

def test_tile_map_holds_the_contract():
    m = TILE_REGISTERS
    assert {r.name: (r.offset, r.access, tuple(f.name for f in r.fields)) for r in m.registers} == EXPECTED
    status = m["STATUS"]
    assert (status.field("busy").lsb, status.field("done").lsb) == (0, 1)
    assert (status.field("code").lsb, status.field("code").width) == (8, 4)
    assert dict(status.field("code").values) == STATUS
    assert max(STATUS) < 1 << status.field("code").width
    assert [(f.name, f.lsb) for f in m["IRQ_STATUS"].fields] == [("done", 0), ("error", 1)]
    assert m["IRQ_STATUS"].irq_enable == "IRQ_ENABLE"
    assert m["IRQ_ENABLE"].init == 0 and m["STEP_LIMIT"].init == 0xFFFF_FFFF
    assert m["ID"].init == TILE_ID == 0x4E4C4250
    assert m["WEIGHT_BASE_HI"].width == m["WEIGHT_SIZE_HI"].width == 8       # bits 39:32
    tile = TileConfig()
    assert m["CONFIG"].unpack(m["CONFIG"].init) == {"rows": tile.rows, "cols": tile.cols,
                                                      "interleave": tile.interleave, "lanes": tile.lanes}
    assert m["SPAD_WORDS"].init == m["SPAD"].words == tile.spad_words
    assert m["PROGRAM"].words == 8 * m["PROG_WORDS"].init
    assert m["GPR"].words == 16


@pytest.mark.parametrize("regmap", [TILE_REGISTERS, tile_register_map(spad_words=1 << 20, prog_words=1 << 16),
                                    tile_register_map(spad_words=1, prog_words=1, lanes=1)],
                         ids=["default", "largest", "smallest"])
def test_tile_map_layout(regmap):
    assert regmap.addr_bits == 23                          # the same for every build
    spans = []
    for reg in regmap.registers:
        assert reg.offset % 4 == 0 and reg.offset < 0x100, reg.name   # control registers low
        spans.append((reg.offset, reg.offset + 4, reg.name))
    for region in regmap.regions:
        assert region.offset % region.window == 0 and region.window & (region.window - 1) == 0
        assert region.offset >= 0x1000 and region.size <= region.window
        spans.append((region.offset, region.offset + region.window, region.name))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"{a} overlaps {b}"
    assert spans[-1][1] <= 1 << regmap.addr_bits
    for entry in regmap.entries:                           # every entry documented
        assert len(entry.doc) > 10, entry.name
        for f in getattr(entry, "fields", ()):
            assert len(f.doc) > 5, f"{entry.name}.{f.name}"
    # every address decodes to the entry that covers it, and nothing else does
    for reg in regmap.registers:
        assert regmap.find(reg.offset) == (reg, 0) and regmap.find(reg.offset + 3) == (reg, 0)
    for region in regmap.regions:
        assert regmap.find(region.offset) == (region, 0)
        assert regmap.find(region.offset + region.size - 4) == (region, region.words - 1)
        if region.size < region.window:
            assert regmap.find(region.offset + region.size) is None
    assert regmap.find(0x014) is None and regmap.find(0xFFC) is None


@pytest.mark.parametrize("kwargs, message", [
    ({"spad_words": 0}, "spad_words"),
    ({"spad_words": (1 << 20) + 1}, "spad_words"),
    ({"prog_words": 0}, "prog_words"),
    ({"prog_words": (1 << 16) + 1}, "prog_words"),
    ({"lanes": 3}, "power of two"),
    ({"rows": 256}, "8-bit CONFIG"),
])
def test_tile_map_rejects_bad_build_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tile_register_map(**kwargs)


def _reg(name="A", offset=0, access=RW, **kwargs):
    return Register(name, offset, access, "doc", **kwargs)


@pytest.mark.parametrize("build, message", [
    (lambda: _reg(offset=2), "multiple of 4"),
    (lambda: _reg(access="wo"), "access must be one of"),
    (lambda: _reg(name="lower"), "upper-case"),
    (lambda: _reg(width=33), "width must be 1..32"),
    (lambda: _reg(width=8, init=0x100), "bits outside"),
    (lambda: _reg(access=RO, init=1), "only const and rw"),
    (lambda: _reg(fields=(Field("a", 0, 4), Field("b", 3))), "overlap"),
    (lambda: _reg(fields=(Field("a", 0), Field("a", 1))), "duplicate"),
    (lambda: _reg(fields=(Field("a", 0, 2),), init={"a": 4}), "does not fit"),
    (lambda: _reg(fields=(Field("a", 0),), init={"b": 1}), "no field 'b'"),
    (lambda: _reg(irq_enable="B"), "w1c registers only"),
    (lambda: Field("a", 30, 3), "does not fit a 32-bit"),
    (lambda: Field("read", 0), "field name"),
    (lambda: Field("eq", 0), "field name"),
    (lambda: Field("Busy", 0), "field name"),
    (lambda: Field("code", 0, 2, values=((4, "big"),)), "does not fit 2 bits"),
    (lambda: Region("R", 0x10, 8, "doc"), "not a multiple of its window"),
    (lambda: Region("R", 0, 8, "doc", window=16), "do not fit"),
    (lambda: Region("R", 0, 8, "doc", window=48), "power of two"),
    (lambda: RegisterMap("m", (_reg(), _reg(name="B"))), "overlaps"),
    (lambda: RegisterMap("m", (_reg(offset=0x24),), (Region("R", 0x20, 4, "doc"),)), "overlaps"),
    (lambda: RegisterMap("m", (_reg(), _reg(name="A", offset=4))), "two entries named A"),
    (lambda: RegisterMap("m", (_reg(name="IRQ"),)), "clashes with the port"),
    (lambda: RegisterMap("m", (_reg(access=W1C, irq_enable="B"), _reg(name="B", offset=4, access=RO))),
     "must name an rw register"),
    (lambda: RegisterMap("m", (_reg(offset=0x40),), addr_bits=6), "addr_bits must be 7..64"),
])
def test_vocabulary_rejects_bad_tables(build, message):
    with pytest.raises((ValueError, KeyError), match=message):
        build()


def test_pack_unpack_and_lookup():
    status = TILE_REGISTERS["status"]
    assert status.pack(busy=1, code=9) == 0x901
    assert status.unpack(0x0000_0A03) == {"busy": 1, "done": 1, "code": 10}
    assert TILE_REGISTERS["PC"].unpack(0xFFFF_FFFF) == {"value": 0xFFFF_FFFF}
    with pytest.raises(ValueError, match="does not fit 4 bits"):
        status.pack(code=16)
    with pytest.raises(KeyError, match="no register or region 'NOPE'"):
        TILE_REGISTERS["NOPE"]
    assert "spad" in TILE_REGISTERS and "nope" not in TILE_REGISTERS


# -- generated text ------------------------------------------------------------------------------

def test_docs_hold_the_current_register_table():
    assert TILE_REGISTERS.markdown() in (DOCS / "tile_registers.md").read_text()


def test_markdown_names_every_register_field_and_value():
    text = TILE_REGISTERS.markdown()
    for entry in TILE_REGISTERS.entries:
        assert f"`{entry.name}`" in text
    for name in STATUS.values():
        assert f"`{name}`" in text
    assert "| `0x024` | `STATUS` | ro |" in text and "| 11:8 | `code` |" in text


def test_c_header_compiles_and_agrees_with_the_table(tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH: the generated header was not compiled")
    regmap = tile_register_map(spad_words=5000, prog_words=300)
    (tmp_path / "tile_regs.h").write_text(regmap.c_header("POBLANO_TILE"))
    checks = ["#include <stdint.h>", '#include "tile_regs.h"', '#include "tile_regs.h"  /* guarded */']
    for reg in regmap.registers:
        checks.append(f"_Static_assert(POBLANO_TILE_{reg.name}_OFFSET == {reg.offset}u, \"{reg.name}\");")
        if reg.access == CONST:
            checks.append(f"_Static_assert(POBLANO_TILE_{reg.name}_VALUE == {reg.init}u, \"{reg.name}\");")
        if reg.access == RW:
            checks.append(f"_Static_assert(POBLANO_TILE_{reg.name}_RESET == {reg.init}u, \"{reg.name}\");")
        for f in reg.fields:
            p = f"POBLANO_TILE_{reg.name}_{f.name.upper()}"
            checks.append(f"_Static_assert({p}_MASK == {f.mask}u && {p}_SHIFT == {f.lsb}u && "
                          f"{p}_WIDTH == {f.width}u, \"{p}\");")
            for value, name in f.values:
                checks.append(f"_Static_assert({p}_{name.upper()} == {value}u, \"{p}\");")
    for region in regmap.regions:
        p = f"POBLANO_TILE_{region.name}"
        checks.append(f"_Static_assert({p}_BASE == {region.offset}u && {p}_WORDS == {region.words}u && "
                      f"{p}_SIZE == {region.size}u && {p}_WINDOW == {region.window}u, \"{p}\");")
    checks.append("_Static_assert(POBLANO_TILE_ADDR_BITS == 23u, \"addr\");")
    checks.append("uint32_t start(void) { return POBLANO_TILE_CTRL_START_MASK; }")
    source = tmp_path / "check.c"
    source.write_text("\n".join(checks) + "\n")
    out = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only",
                          str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    # a wrong value must fail: the check is not vacuous
    source.write_text("\n".join(checks[:2] + ["_Static_assert(POBLANO_TILE_STATUS_OFFSET == 0u, \"x\");"]))
    assert subprocess.run([cc, "-std=c11", "-fsyntax-only", str(source)], capture_output=True,
                          cwd=tmp_path).returncode != 0


def test_c_header_refuses_a_name_clash():
    regmap = RegisterMap("m", (_reg(fields=(Field("b", 0),)), _reg(name="A_B", offset=4)))
    header = regmap.c_header("X")                  # A_B_SHIFT vs A_B_OFFSET: distinct, fine
    assert "#define X_A_B_SHIFT 0u" in header and "#define X_A_B_OFFSET 0x004u" in header
    clash = RegisterMap("m", (_reg(fields=(Field("b", 0, 2, values=((1, "shift"),)),)),
                              _reg(name="A_B", offset=4)))
    with pytest.raises(ValueError, match="X_A_B_SHIFT twice"):
        clash.c_header("X")


def test_regs_command_writes_header_and_markdown(tmp_path, capsys):
    header, table = tmp_path / "t.h", tmp_path / "t.md"
    assert cli.main(["regs", "--c-header", str(header), "--markdown", str(table),
                     "--spad-words", "4096", "--prog-words", "64"]) == 0
    regmap = tile_register_map(spad_words=4096, prog_words=64)
    assert header.read_text() == regmap.c_header("POBLANO_TILE")
    assert table.read_text() == regmap.markdown()
    capsys.readouterr()
    assert cli.main(["regs"]) == 0
    assert capsys.readouterr().out == TILE_REGISTERS.markdown()
    assert cli.main(["regs", "--prog-words", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("poblano regs: error: prog_words")


# -- the host driver, on the register block's model -------------------------------------------

def test_driver_reads_and_writes_every_kind():
    model = RegisterBlockModel()
    regs = Registers(model)
    assert regs.id.read() == TILE_ID and regs.version.major.read() == 1
    assert regs.config.read_fields()["lanes"] == 8
    assert regs.step_limit.read() == 0xFFFF_FFFF
    regs.step_limit.write(1000)
    assert model.values["STEP_LIMIT"] == 1000
    regs.irq_enable.write(done=1)
    regs.irq_enable.modify(error=1)
    assert regs.irq_enable.read_fields() == {"done": 1, "error": 1}
    regs.irq_enable.done.write(0)                          # read-modify-write of one field
    assert model.values["IRQ_ENABLE"] == 0b10
    model.inputs["STATUS"] = TILE_REGISTERS["STATUS"].pack(busy=1, code=3)
    assert regs.status.busy.read() == 1 and regs.status.code.read() == 3
    assert regs.status.code.value_name(3) == "spad_range"
    regs.ctrl.write(start=1)
    regs.ctrl.abort.write(1)
    assert model.strobes == [("CTRL", 1), ("CTRL", 2)]
    model.pulse("IRQ_STATUS", 0b11)
    assert model.irq
    regs.irq_status.error.write(1)                         # write 1 to clear
    assert regs.irq_status.read() == 0b01 and not model.irq  # done is set but not enabled
    regs.write_words("spad", 10, [1, 2, 3])
    assert regs.read_words("spad", 9, 5) == [0, 1, 2, 3, 0]
    assert regs.gpr.read(0, 2) == [0, 0]
    regs.gpr.write(1, [42])
    assert model.regions["GPR"][1] == 42
    regs.write32(0x03C, 77)
    assert regs.read32(0x03C) == 77


@pytest.mark.parametrize("action, error, message", [
    (lambda r: r.nope, UnknownNameError, "no register or region 'nope'"),
    (lambda r: r.status.nope, UnknownNameError, "STATUS has no field 'nope'"),
    (lambda r: r.status.write(1), RegisterError, "read-only"),
    (lambda r: r.id.write(1), RegisterError, "read-only"),
    (lambda r: r.ctrl.read(), RegisterError, "write-only"),
    (lambda r: r.ctrl.start.read(), RegisterError, "write-only"),
    (lambda r: r.ctrl.write(start=2), RegisterError, "does not fit 1 bit"),
    (lambda r: r.ctrl.write(go=1), UnknownNameError, "no field 'go'"),
    (lambda r: r.ctrl.write(1, start=1), RegisterError, "not both"),
    (lambda r: r.ctrl.write(), RegisterError, "nothing to write"),
    (lambda r: r.irq_enable.write(4), RegisterError, "bits outside"),
    (lambda r: r.weight_base_hi.write(0x100), RegisterError, "bits outside"),
    (lambda r: r.step_limit.write(1 << 32), RegisterError, "does not fit 32 bits"),
    (lambda r: r.step_limit.write(-1), RegisterError, "does not fit 32 bits"),
    (lambda r: r.step_limit.write("7"), RegisterError, "expected an integer"),
    (lambda r: r.irq_status.modify(done=1), RegisterError, "modify is for rw"),
    (lambda r: r.read_words("gpr", 10, 7), RegisterError, "beyond its 16 words"),
    (lambda r: r.write_words("gpr", 0, [1 << 32]), RegisterError, "does not fit 32 bits"),
    (lambda r: r.read_words("status", 0, 1), RegisterError, "not a region"),
    (lambda r: r.read_words("gpr", -1, 1), RegisterError, "non-negative"),
    (lambda r: r.read32(0x100), BusError, "SLVERR"),
])
def test_driver_errors_are_clear(action, error, message):
    regs = Registers(RegisterBlockModel())
    with pytest.raises(error, match=message):
        action(regs)


def test_unknown_names_are_attribute_errors_too():
    regs = Registers(RegisterBlockModel())
    assert not hasattr(regs, "nope") and hasattr(regs, "spad")
    assert not hasattr(regs.status, "nope") and hasattr(regs.status, "busy")
    assert "step_limit" in dir(regs) and "code" in dir(regs.status)


def test_async_driver_with_a_base_address():
    model = RegisterBlockModel()
    log = []

    async def read32(address):
        await asyncio.sleep(0)
        log.append(("r", address))
        return model.read32(address - 0x1000_0000)

    async def write32(address, value):
        await asyncio.sleep(0)
        log.append(("w", address))
        model.write32(address - 0x1000_0000, value)

    regs = AsyncRegisters(Transport(read32, write32), base=0x1000_0000)

    async def main():
        assert await regs.id.read() == TILE_ID
        await regs.irq_enable.write(done=1, error=1)
        await regs.irq_enable.modify(done=0)
        assert await regs.irq_enable.read_fields() == {"done": 0, "error": 1}
        await regs.write_words("program", 8, [5, 6])
        assert await regs.program.read(8, 2) == [5, 6]
        with pytest.raises(RegisterError, match="write-only"):
            await regs.ctrl.read()

    asyncio.run(main())
    assert log[0] == ("r", 0x1000_0000)
    assert ("w", 0x1000_0000 + 0x20_0000 + 32) in log


def test_program_and_word_helpers():
    program = [Instruction("LI", {"rd": 1, "imm": 7}), Instruction("HALT")]
    words = program_words(program)
    assert len(words) == 16 and bytes_from_words(words) == encode_program(program)
    assert program_words(encode_program(program)) == words
    assert words_from_bytes(b"\x01\x00\x00\x00\xff\xff\xff\xff") == [1, 0xFFFF_FFFF]
    with pytest.raises(RegisterError, match="multiple of 4"):
        words_from_bytes(b"\x01")
    with pytest.raises(RegisterError, match="multiple of 32"):
        program_words(b"\x00" * 4)
    model = RegisterBlockModel(tile_register_map(prog_words=2))
    Registers(model).write_words("program", 0, words)
    assert model.regions["PROGRAM"] == words


def test_model_answers_like_the_register_block():
    model = RegisterBlockModel()
    assert model.access("write", 0x03C, 5, strobe=0b0111) == (0, 2)
    assert model.values["STEP_LIMIT"] == 0xFFFF_FFFF
    assert model.access("read", 0x020) == (0, 0)           # strobe reads 0
    assert model.access("write", 0x000, 0) == (0, 0)       # const: accepted, ignored
    assert model.access("read", 0x000) == (TILE_ID, 0)
    with pytest.raises(BusError, match="write at 0x000014: SLVERR"):
        model.write32(0x014, 1)
    with pytest.raises(RegisterError, match="not a w1c"):
        model.pulse("STATUS", 1)
