"""The compute tile's host register map: the one table, and the C header and Markdown made from it.

The host (a CPU, a PCIe bridge, a cocotb testbench) reaches the tile through an AXI4-Lite
subordinate: control and status registers, and memory-mapped windows onto the sequencer's registers,
the program memory and the scratchpad. :func:`tile_register_map` is the single description of that
map. Everything else is generated from it, never kept by hand:

* the register block :class:`rtl.tile.axil_registers.AxilRegisters` (its ports and address decoder);
* the Python host driver :mod:`poblano.host.tile_registers` (accessors per register and field);
* the C header and the Markdown table (:meth:`RegisterMap.c_header`, :meth:`RegisterMap.markdown`;
  ``poblano regs`` writes them, ``docs/tile_registers.md`` holds a copy checked by a test).

The vocabulary is generic (a :class:`RegisterMap` of :class:`Register` and :class:`Region` entries) so
another block can describe its own map the same way. This module is plain Python: the host driver and
the CLI import it without Amaranth.

Access kinds (:attr:`Register.access`)
--------------------------------------
``const``   read-only, a value fixed at build time (identification, configuration); no core port.
``ro``      read-only, the value the core drives on an ``In`` port.
``rw``      host read/write; the value is an ``Out`` port to the core, ``init`` after reset.
``w1c``     interrupt status: the core sets bits with one-cycle pulses, the host writes 1 to clear;
            with ``irq_enable`` naming an ``rw`` register, ``status & enable`` raises the interrupt.
``strobe``  write-only command: the core sees the written value with a one-cycle pulse; reads give 0.

A :class:`Region` is a window of ``words`` 32-bit words that the core serves itself (block RAM, or the
sequencer's register file) through a request/response stream pair; see :mod:`rtl.tile.axil_registers`.

Every register is one 32-bit word at a word-aligned byte offset: the map is word-only (the register
block refuses writes with partial byte strobes). Bits of a register that no field covers read as 0
and ignore writes.
"""

import keyword
import re
from dataclasses import dataclass, field

from sim_models.tile_isa import STATUS, TileConfig

__all__ = ["CONST", "RO", "RW", "W1C", "STROBE", "ACCESS_KINDS", "Field", "Register", "Region",
           "RegisterMap", "tile_register_map", "TILE_REGISTERS", "TILE_ID", "TILE_MAP_VERSION",
           "DEFAULT_PROG_WORDS", "MAX_PROG_WORDS", "PROGRAM_WORDS_PER_INSTRUCTION", "PERF_COUNTERS"]

CONST, RO, RW, W1C, STROBE = "const", "ro", "rw", "w1c", "strobe"
ACCESS_KINDS = (CONST, RO, RW, W1C, STROBE)
"""Register access kinds (see the module docstring)."""

_ACCESS_TEXT = {
    CONST: "read-only, fixed at build time",
    RO: "read-only, driven by the core",
    RW: "read/write",
    W1C: "read; write 1 to clear a bit",
    STROBE: "write-only command (reads 0)",
}

_REG_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Field names that would shadow an attribute of an Amaranth ``View`` (the core-side port) or of a
# register accessor of the host driver.
_RESERVED_FIELDS = frozenset({"eq", "shape", "as_value", "as_bits", "read", "write", "modify", "field",
                              "fields", "name", "offset", "address", "access", "width", "value"})
# Port names of the register block itself.
_RESERVED_PORTS = frozenset({"s_axil", "irq"})


@dataclass(frozen=True)
class Field:
    """A named bit field ``[lsb + width - 1 : lsb]`` of a register.

    ``values`` optionally names the field's values, as ``((value, name), ...)``: they go into the
    docs, the C header (``<REG>_<FIELD>_<NAME>``) and the driver (:meth:`value_name`).
    """
    name: str
    lsb: int
    width: int = 1
    doc: str = ""
    values: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not _FIELD_NAME.match(self.name) \
                or keyword.iskeyword(self.name) or self.name in _RESERVED_FIELDS:
            raise ValueError(f"field name {self.name!r} must be a lower-case identifier, not a Python "
                             f"keyword nor one of {', '.join(sorted(_RESERVED_FIELDS))}")
        for what, value, minimum in (("lsb", self.lsb, 0), ("width", self.width, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"field {self.name}: {what} must be an integer of at least {minimum}, "
                                 f"got {value!r}")
        if self.lsb + self.width > 32:
            raise ValueError(f"field {self.name} [{self.msb}:{self.lsb}] does not fit a 32-bit register")
        object.__setattr__(self, "values", tuple((int(v), str(n)) for v, n in self.values))
        for value, name in self.values:
            if not 0 <= value < 1 << self.width:
                raise ValueError(f"field {self.name}: value {value} ({name}) does not fit {self.width} bits")
            if not _FIELD_NAME.match(name):
                raise ValueError(f"field {self.name}: value name {name!r} must be a lower-case identifier")

    @property
    def msb(self):
        return self.lsb + self.width - 1

    @property
    def mask(self):
        """The field's bits, in place in the register."""
        return ((1 << self.width) - 1) << self.lsb

    @property
    def bits_text(self):
        return str(self.lsb) if self.width == 1 else f"{self.msb}:{self.lsb}"

    def value_name(self, value):
        """The name of ``value`` from :attr:`values`, or ``None``."""
        return dict(self.values).get(value)


@dataclass(frozen=True)
class Register:
    """One 32-bit register at byte ``offset``.

    Parameters
    ----------
    name : str
        Upper-case identifier (the core-side port is its lower-case form).
    offset : int
        Byte offset, a multiple of 4.
    access : str
        One of :data:`ACCESS_KINDS`.
    doc : str
        What the register means (goes into the docs and the header).
    fields : tuple of Field
        Named bit fields; none means the register is one unsigned value of ``width`` bits.
    width : int
        Bits of a register without fields (1..32); with fields it is derived (highest field bit + 1).
    init : int or dict
        The value of a ``const`` register, the reset value of an ``rw`` register (an integer, or a dict
        of field values); 0 for the other kinds.
    irq_enable : str, optional
        ``w1c`` only: the name of the ``rw`` register whose bits enable the interrupt.
    """
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple = ()
    width: int = 32
    init: int = 0
    irq_enable: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _REG_NAME.match(self.name):
            raise ValueError(f"register name {self.name!r} must be an upper-case identifier")
        if self.access not in ACCESS_KINDS:
            raise ValueError(f"register {self.name}: access must be one of {', '.join(ACCESS_KINDS)}, "
                             f"got {self.access!r}")
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or self.offset < 0 \
                or self.offset % 4:
            raise ValueError(f"register {self.name}: offset must be a non-negative multiple of 4, "
                             f"got {self.offset!r}")
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.fields:
            names = [f.name for f in self.fields]
            if len(set(names)) != len(names):
                raise ValueError(f"register {self.name}: duplicate field names in {names}")
            for i, a in enumerate(self.fields):
                if not isinstance(a, Field):
                    raise ValueError(f"register {self.name}: fields must be Field objects, got {a!r}")
                for b in self.fields[:i]:
                    if a.mask & b.mask:
                        raise ValueError(f"register {self.name}: fields {b.name} and {a.name} overlap")
            object.__setattr__(self, "width", max(f.msb for f in self.fields) + 1)
        elif not isinstance(self.width, int) or isinstance(self.width, bool) or not 1 <= self.width <= 32:
            raise ValueError(f"register {self.name}: width must be 1..32, got {self.width!r}")
        init = self.init
        if isinstance(init, dict):
            init = self.pack(**init)
        if not isinstance(init, int) or isinstance(init, bool) or init < 0 or init & ~self.mask:
            raise ValueError(f"register {self.name}: init {self.init!r} has bits outside the register "
                             f"(mask {self.mask:#x})")
        if init and self.access not in (CONST, RW):
            raise ValueError(f"register {self.name}: only const and rw registers have an init value")
        object.__setattr__(self, "init", init)
        if self.irq_enable is not None and self.access != W1C:
            raise ValueError(f"register {self.name}: irq_enable is for w1c registers only")

    @property
    def mask(self):
        """The bits that exist (the union of the fields, or the low ``width`` bits)."""
        if self.fields:
            mask = 0
            for f in self.fields:
                mask |= f.mask
            return mask
        return (1 << self.width) - 1

    @property
    def port_name(self):
        """The name of the register's core-side port on the register block."""
        return self.name.lower()

    @property
    def readable(self):
        return self.access != STROBE

    @property
    def writable(self):
        return self.access in (RW, W1C, STROBE)

    def field(self, name):
        """The :class:`Field` called ``name``; :class:`KeyError` naming the known fields if none."""
        for f in self.fields:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.fields) or "none"
        raise KeyError(f"register {self.name} has no field {name!r} (fields: {known})")

    def pack(self, **values):
        """The register word with each named field set to its value (others 0).

        :class:`KeyError` for an unknown field, :class:`ValueError` for a value that does not fit.
        """
        word = 0
        for name, value in values.items():
            f = self.field(name)
            if not isinstance(value, int) or not 0 <= value < 1 << f.width:
                raise ValueError(f"{self.name}.{name} = {value!r} does not fit {f.width} bit"
                                 f"{'s' if f.width > 1 else ''}")
            word |= int(value) << f.lsb
        return word

    def unpack(self, word):
        """``{field: value}`` of a register word (``{"value": word}`` for a register without fields)."""
        if not self.fields:
            return {"value": word & self.mask}
        return {f.name: (word >> f.lsb) & ((1 << f.width) - 1) for f in self.fields}


@dataclass(frozen=True)
class Region:
    """A window of ``words`` 32-bit words at byte ``offset``, served by the core.

    ``window`` is the bytes of address space the region decodes (a power of two, at least
    ``4 * words``, default the smallest such); ``offset`` must be a multiple of it. Addresses inside
    the window beyond ``words`` hit nothing (an error response), so a fixed window can hold a
    region whose size is a build parameter and the offsets of a map stay the same across builds.
    """
    name: str
    offset: int
    words: int
    doc: str
    window: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _REG_NAME.match(self.name):
            raise ValueError(f"region name {self.name!r} must be an upper-case identifier")
        if not isinstance(self.words, int) or isinstance(self.words, bool) or self.words < 1:
            raise ValueError(f"region {self.name}: words must be a positive integer, got {self.words!r}")
        window = self.window
        if window is None:
            window = 1 << max(2, (4 * self.words - 1).bit_length())
            object.__setattr__(self, "window", window)
        if not isinstance(window, int) or isinstance(window, bool) or window < 4 or window & (window - 1):
            raise ValueError(f"region {self.name}: window must be a power of two of at least 4 bytes, "
                             f"got {window!r}")
        if 4 * self.words > window:
            raise ValueError(f"region {self.name}: {self.words} words do not fit a window of {window} bytes")
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or self.offset < 0 \
                or self.offset % window:
            raise ValueError(f"region {self.name}: offset {self.offset!r} is not a multiple of its "
                             f"window ({window:#x} bytes)")

    @property
    def port_name(self):
        return self.name.lower()

    @property
    def size(self):
        """Bytes the region holds (``4 * words``)."""
        return 4 * self.words

    @property
    def window_bits(self):
        """log2 of the window in bytes."""
        return self.window.bit_length() - 1


@dataclass(frozen=True)
class RegisterMap:
    """A block's registers and regions, checked for overlaps and name clashes.

    ``addr_bits`` is the AXI address width the block decodes (default: just enough for the highest
    entry); every address within it that no entry covers is an error response.
    """
    name: str
    registers: tuple
    regions: tuple = ()
    doc: str = ""
    addr_bits: int | None = None
    _by_name: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "registers", tuple(self.registers))
        object.__setattr__(self, "regions", tuple(self.regions))
        entries = self.registers + self.regions
        by_name = {}
        for entry in entries:
            if not isinstance(entry, (Register, Region)):
                raise ValueError(f"map {self.name}: entries must be Register or Region, got {entry!r}")
            key = entry.name.lower()
            if key in by_name:
                raise ValueError(f"map {self.name}: two entries named {entry.name}")
            if key in _RESERVED_PORTS:
                raise ValueError(f"map {self.name}: {entry.name} clashes with the port {key}")
            by_name[key] = entry
        object.__setattr__(self, "_by_name", by_name)
        spans = sorted((e.offset, e.offset + (4 if isinstance(e, Register) else e.window), e.name)
                        for e in entries)
        for (_, end_a, name_a), (start_b, _, name_b) in zip(spans, spans[1:], strict=False):
            if start_b < end_a:
                raise ValueError(f"map {self.name}: {name_b} at {start_b:#x} overlaps {name_a}")
        for reg in self.registers:
            if reg.irq_enable is not None:
                enable = by_name.get(reg.irq_enable.lower())
                if not isinstance(enable, Register) or enable.access != RW:
                    raise ValueError(f"map {self.name}: {reg.name}.irq_enable must name an rw register, "
                                     f"got {reg.irq_enable!r}")
        end = max((e for _, e, _ in spans), default=4)
        needed = max(2, (end - 1).bit_length())
        if self.addr_bits is None:
            object.__setattr__(self, "addr_bits", needed)
        elif not isinstance(self.addr_bits, int) or isinstance(self.addr_bits, bool) \
                or not needed <= self.addr_bits <= 64:
            raise ValueError(f"map {self.name}: addr_bits must be {needed}..64, got {self.addr_bits!r}")

    def __getitem__(self, name):
        """The register or region called ``name`` (any case); :class:`KeyError` listing the names."""
        try:
            return self._by_name[name.lower()]
        except (KeyError, AttributeError):
            raise KeyError(f"map {self.name} has no register or region {name!r} "
                           f"(known: {', '.join(e.name for e in self.entries)})") from None

    def __contains__(self, name):
        return isinstance(name, str) and name.lower() in self._by_name

    @property
    def entries(self):
        return self.registers + self.regions

    def find(self, address):
        """``(entry, word)`` at byte ``address`` (``word`` is the index within a region, 0 for a
        register), or ``None`` where nothing is mapped. The two low address bits are ignored."""
        address &= ~3
        for reg in self.registers:
            if reg.offset == address:
                return reg, 0
        for region in self.regions:
            word = (address - region.offset) >> 2
            if 0 <= word < region.words:
                return region, word
        return None

    # -- generated text --------------------------------------------------------------------------

    def c_header(self, prefix, *, source="rtl/tile/register_map.py"):
        """A C header: ``<prefix>_<REG>_OFFSET``, per field ``_SHIFT``/``_WIDTH``/``_MASK`` (the mask in
        place: ``field = (word & MASK) >> SHIFT``) and named values, const values and reset values,
        per region ``_BASE``/``_WORDS``/``_SIZE``/``_WINDOW``. Offsets are from the block's base."""
        guard = f"{prefix}_REGS_H"
        lines = [f"/* {self.name}: host register map. Generated from {source} by `poblano regs "
                 "--c-header`; do not edit. */",
                 f"#ifndef {guard}", f"#define {guard}", "",
                 f"#define {prefix}_ADDR_BITS {self.addr_bits}u", ""]
        names = set()

        def define(name, value):
            if name in names:
                raise ValueError(f"map {self.name}: the C header would define {name} twice")
            names.add(name)
            lines.append(f"#define {name} {value}")

        for reg in self.registers:
            lines.append(f"/* {reg.name} ({reg.access}): {_one_line(reg.doc)} */")
            define(f"{prefix}_{reg.name}_OFFSET", f"0x{reg.offset:03x}u")
            if reg.access == CONST:
                define(f"{prefix}_{reg.name}_VALUE", f"0x{reg.init:08x}u")
            elif reg.access == RW:
                define(f"{prefix}_{reg.name}_RESET", f"0x{reg.init:08x}u")
            for f in reg.fields:
                base = f"{prefix}_{reg.name}_{f.name.upper()}"
                define(f"{base}_SHIFT", f"{f.lsb}u")
                define(f"{base}_WIDTH", f"{f.width}u")
                define(f"{base}_MASK", f"0x{f.mask:08x}u")
                for value, value_name in f.values:
                    define(f"{base}_{value_name.upper()}", f"{value}u")
            lines.append("")
        for region in self.regions:
            lines.append(f"/* {region.name} region: {_one_line(region.doc)} */")
            define(f"{prefix}_{region.name}_BASE", f"0x{region.offset:06x}u")
            define(f"{prefix}_{region.name}_WORDS", f"{region.words}u")
            define(f"{prefix}_{region.name}_SIZE", f"0x{region.size:x}u")
            define(f"{prefix}_{region.name}_WINDOW", f"0x{region.window:x}u")
            lines.append("")
        lines.append(f"#endif /* {guard} */")
        return "\n".join(lines) + "\n"

    def markdown(self):
        """The map as Markdown: a register table (one row per register, one per field below it) and
        a region table. ``docs/tile_registers.md`` holds the tile's copy, checked by a test."""
        rows = ["| offset | register | access | bits | field | reset / value | description |",
                "|---|---|---|---|---|---|---|"]
        for reg in self.registers:
            if reg.access in (CONST, RW):
                init = f"`0x{reg.init:08X}`"
            elif reg.access in (W1C,):
                init = "`0`"
            else:
                init = "-"
            bits = "" if reg.fields else f"{reg.width - 1}:0"
            doc = _one_line(reg.doc)
            if reg.irq_enable:
                doc += f" Interrupt enable: `{reg.irq_enable}`."
            rows.append(f"| `0x{reg.offset:03X}` | `{reg.name}` | {reg.access} | {bits} | | {init} | "
                        f"{doc} |")
            for f in reg.fields:
                fdoc = _one_line(f.doc)
                if f.values:
                    fdoc += " Values: " + ", ".join(f"{v} `{n}`" for v, n in f.values) + "."
                value = f"`{(reg.init & f.mask) >> f.lsb}`" if reg.access in (CONST, RW) else ""
                rows.append(f"| | | | {f.bits_text} | `{f.name}` | {value} | {fdoc} |")
        text = "\n".join(rows) + "\n"
        if self.regions:
            rows = ["| base | region | words | window | description |", "|---|---|---|---|---|"]
            for region in self.regions:
                rows.append(f"| `0x{region.offset:06X}` | `{region.name}` | {region.words} | "
                            f"`0x{region.window:X}` | {_one_line(region.doc)} |")
            text += "\n" + "\n".join(rows) + "\n"
        return text


def _one_line(text):
    return " ".join(text.split())


# -- the compute tile's map -----------------------------------------------------------------------

TILE_ID = int.from_bytes(b"PBLN", "little")
"""``ID``: the bytes ``P B L N`` at increasing addresses (0x4E4C4250)."""
TILE_MAP_VERSION = (1, 1)
"""``VERSION``: (major, minor) of this map; a host refuses a major it does not know. Minor 1 added
the performance counters (``PERF_*``)."""
PROGRAM_WORDS_PER_INSTRUCTION = 8
"""A 256-bit instruction is 8 consecutive little-endian 32-bit words of ``PROGRAM``."""
DEFAULT_PROG_WORDS = 1024
"""Default program capacity in instructions (32 KiB of program memory)."""
MAX_PROG_WORDS = 1 << 16
"""Branch targets are 16-bit instruction indices (``sim_models.tile_isa``)."""

_PERF_BASE = 0x060
_PERF_COUNTERS = (
    ("GEMM_CYCLES", "Cycles of the current or last run spent executing `GEMM`s (from the cycle after "
     "each one's decode to its end)."),
    ("ATTN_CYCLES", "Cycles spent executing `ATTN`s."),
    ("VOP_CYCLES", "Cycles spent executing `VOP`s."),
    ("KV_CYCLES", "Cycles spent executing `KVOPEN`s and `KVAPPEND`s."),
    ("COPY_CYCLES", "Cycles spent executing `LOAD`s and `EMBED`s (checks, token-id scan, copies)."),
    ("OTHER_CYCLES", "Every other cycle of the run: fetch, decode and next-pc cycles of every "
     "instruction, and the scalar and control instructions. The six `PERF_*_CYCLES` add up to "
     "`CYCLES`."),
    ("WEIGHT_STALL_CYCLES", "Cycles in which a weight range was requested and not yet fully "
     "delivered, its consumer (a GEMM or a copy) would take a beat, and the weight port had none."),
    ("WEIGHT_BYTES", "Bytes of the weight ranges requested (a GEMM's weights, once or once per "
     "M-tile, each copy's words; a GEMM's range rounded up to whole 4-byte words)."),
    ("WEIGHT_BEATS", "Data beats delivered by the weight port (`data_bytes` bytes each, the last of "
     "a range partly filled)."),
    ("KV_READS", "Records returned by the KV-cache controller to the attention engine's reads (a "
     "record read twice counts twice)."),
    ("KV_APPENDS", "Records the KV-cache controller appended (`KVAPPEND`; the one record a position "
     "mismatch appends and takes back included)."),
)
"""The performance counters, in register order from ``_PERF_BASE`` (``rtl.tile.perf_counters``:
their definitions, in the same order)."""
PERF_COUNTERS = tuple(name.lower() for name, _ in _PERF_COUNTERS)
"""The counters' names as the registers' ``PERF_<NAME>`` suffix in lower case: the keys of a run's
breakdown (``verification.tile.model_run``) and the ports of ``rtl.tile.perf_counters.PerfCounters``."""

_GPR_BASE = 0x1000
_PROGRAM_BASE, _PROGRAM_WINDOW = 0x20_0000, 4 * PROGRAM_WORDS_PER_INSTRUCTION * MAX_PROG_WORDS
_SPAD_BASE, _SPAD_WINDOW = 0x40_0000, 4 << 20        # spad_words <= 2**20 (TileConfig)


def tile_register_map(*, spad_words=TileConfig.spad_words, prog_words=DEFAULT_PROG_WORDS,
                      rows=TileConfig.rows, cols=TileConfig.cols, interleave=TileConfig.interleave,
                      lanes=TileConfig.lanes):
    """The compute tile's host register map for one build.

    Parameters are the tile's build parameters (defaults: those of
    :class:`sim_models.tile_isa.TileConfig`); ``prog_words`` is the program memory's capacity in
    256-bit instructions (1..65536). Offsets do not depend on them: the regions sit in fixed windows
    (``PROGRAM`` 2 MiB at ``0x200000``, ``SPAD`` 4 MiB at ``0x400000``) sized for the largest build,
    so the address width is 23 bits and a host finds the actual sizes in ``SPAD_WORDS`` and
    ``PROG_WORDS``.
    """
    TileConfig(spad_words=spad_words, rows=rows, cols=cols, interleave=interleave, lanes=lanes)
    for name, value in (("rows", rows), ("cols", cols), ("interleave", interleave), ("lanes", lanes)):
        if value > 255:
            raise ValueError(f"{name} must fit the 8-bit CONFIG field, got {value}")
    if not isinstance(prog_words, int) or isinstance(prog_words, bool) \
            or not 1 <= prog_words <= MAX_PROG_WORDS:
        raise ValueError(f"prog_words must be an integer from 1 to {MAX_PROG_WORDS}, got {prog_words!r}")

    status_values = tuple(sorted(STATUS.items()))
    irq_fields = (
        Field("done", 0, doc="A run stopped, whatever its status."),
        Field("error", 1, doc="A run stopped with a non-zero status code."),
    )
    registers = (
        Register("ID", 0x000, CONST, "Identification: the ASCII bytes `PBLN` at increasing addresses.",
                 init=TILE_ID),
        Register("VERSION", 0x004, CONST, "Version of this register map; a host refuses a major "
                 "version it does not know.",
                 fields=(Field("minor", 0, 16, "Compatible additions."),
                         Field("major", 16, 16, "Incompatible changes.")),
                 init={"minor": TILE_MAP_VERSION[1], "major": TILE_MAP_VERSION[0]}),
        Register("CONFIG", 0x008, CONST, "Build parameters of the compute units.",
                 fields=(Field("rows", 0, 8, "MAC array rows."),
                         Field("cols", 8, 8, "MAC array columns."),
                         Field("interleave", 16, 8, "Accumulators per MAC-array element (a tile of "
                               "`rows x cols * interleave` outputs)."),
                         Field("lanes", 24, 8, "Vector-unit lanes.")),
                 init={"rows": rows, "cols": cols, "interleave": interleave, "lanes": lanes}),
        Register("SPAD_WORDS", 0x00C, CONST, "Scratchpad size in 32-bit words (the words of the "
                 "`SPAD` region).", width=21, init=spad_words),
        Register("PROG_WORDS", 0x010, CONST, "Program memory capacity in 256-bit instructions (the "
                 "`PROGRAM` region holds 8 words per instruction).", width=17, init=prog_words),
        Register("CTRL", 0x020, STROBE, "Run control. A write acts on the bits written as 1; writing "
                 "0 does nothing.",
                 fields=(Field("start", 0, doc="Start a run at instruction 0 with the registers "
                               "`r1`..`r15` as the host left them; ignored while busy."),
                         Field("abort", 1, doc="Stop the running program between two "
                               "instructions; the run ends with `code` = `aborted`."))),
        Register("STATUS", 0x024, RO, "Run state: whether a program runs, and how the last run "
                 "stopped.",
                 fields=(Field("busy", 0, doc="A program is running."),
                         Field("done", 1, doc="A run has stopped since reset (`code` and `PC` "
                               "describe it); cleared by `start`."),
                         Field("code", 8, 4, "The status code of the last run "
                               "(`sim_models.tile_isa.STATUS`; 0 = HALT).", values=status_values))),
        Register("IRQ_STATUS", 0x028, W1C, "Interrupt causes; the interrupt line is high while a "
                 "cause is set and enabled.", fields=irq_fields, irq_enable="IRQ_ENABLE"),
        Register("IRQ_ENABLE", 0x02C, RW, "Interrupt enables, one per `IRQ_STATUS` bit.",
                 fields=irq_fields),
        Register("PC", 0x030, RO, "Instruction index the sequencer is at (busy), or stopped at (the "
                 "HALT or the faulting instruction).", width=32),
        Register("STEPS", 0x034, RO, "Instructions executed by the current or last run.", width=32),
        Register("CYCLES", 0x038, RO, "Clock cycles of the current or last run, from start to stop "
                 "(wraps at 2**32).", width=32),
        Register("STEP_LIMIT", 0x03C, RW, "Watchdog: a run that would execute more instructions "
                 "stops with `code` = `step_limit`.", width=32, init=0xFFFF_FFFF),
        Register("WEIGHT_BASE_LO", 0x040, RW, "Bits 31:0 of the AXI byte address of the weight "
                 "image (weight address 0).", width=32),
        Register("WEIGHT_BASE_HI", 0x044, RW, "Bits 39:32 of the weight image's AXI byte address.",
                 width=8),
        Register("WEIGHT_SIZE_LO", 0x048, RW, "Bits 31:0 of the weight image's size in bytes: a "
                 "read beyond it stops the run with `code` = `weight_range`.", width=32),
        Register("WEIGHT_SIZE_HI", 0x04C, RW, "Bits 39:32 of the weight image's size in bytes.",
                 width=8),
        Register("PROG_LEN", 0x050, RW, "Instructions of the loaded program: fetching or branching "
                 "at or beyond it stops the run with `code` = `pc_range`.", width=17),
    ) + tuple(
        Register(f"PERF_{name}", _PERF_BASE + 4 * i, RO, doc + " Cleared by `CTRL.start`, counted "
                 "while the run is busy; stops at 2**32 - 1.", width=32)
        for i, (name, doc) in enumerate(_PERF_COUNTERS))
    regions = (
        Region("GPR", _GPR_BASE, 16, "The sequencer's registers `r0`..`r15` (word `i` is `r<i>`; "
               "`r0` reads 0 and ignores writes). Set the program's inputs (`r1`, ...) before "
               "`start`."),
        Region("PROGRAM", _PROGRAM_BASE, PROGRAM_WORDS_PER_INSTRUCTION * prog_words,
               "Program memory: instruction `i` is the 8 words from `8 i`, least significant word "
               "first (the 32-byte little-endian image of `sim_models.tile_isa.encode_program`).",
               window=_PROGRAM_WINDOW),
        Region("SPAD", _SPAD_BASE, spad_words, "The activation scratchpad, one 32-bit word per "
               "address (the instructions' scratchpad addresses).", window=_SPAD_WINDOW),
    )
    return RegisterMap("compute tile", registers, regions,
                       doc="Host view of one compute tile: control and status registers, the "
                           "sequencer's registers, program memory and scratchpad.")


TILE_REGISTERS = tile_register_map()
"""The tile's map with the default build parameters."""
