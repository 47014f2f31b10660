"""Host driver of a register map (by default the compute tile's), generated from the table.

Every register and region of the :class:`~rtl.tile.register_map.RegisterMap` becomes an attribute,
named in lower case, and every field an attribute of its register::

    regs = Registers(transport)                 # transport.read32(addr), transport.write32(addr, v)
    regs.id.read()                              # 0x4E4C4250
    regs.step_limit.write(100_000)
    regs.irq_enable.write(done=1, error=1)      # the fields not named are written as 0
    regs.irq_enable.modify(error=0)             # read-modify-write: the others keep their value
    regs.ctrl.write(start=1)
    regs.status.busy.read()                     # one field; regs.status.read_fields() for all
    regs.write_words("program", 0, words)       # bulk access to a region
    regs.read_words("spad", 128, 16)

:class:`Registers` drives a synchronous transport (``read32``/``write32`` return values);
:class:`AsyncRegisters` the same API with coroutines (``await regs.status.read()``), for a transport
whose methods are coroutines, such as :class:`AxiLiteTransport` over cocotbext-axi's
``AxiLiteMaster`` in a cocotb testbench. Both share one implementation: each operation is a
generator of bus accesses that the two classes run against their transport. Addresses given to
the transport are ``base`` plus the table's offsets.

Errors: :class:`RegisterError` (a ``ValueError``) for an unknown register, region or field (also an
``AttributeError``, so ``hasattr`` works), a value that does not fit, a write to a read-only
register, a read of a write-only one, or a region access out of range; :class:`BusError` when the
bus refuses an access (``SLVERR``/``DECERR``).

:class:`RegisterBlockModel` is a transport that behaves like the register block
(:class:`rtl.tile.axil_registers.AxilRegisters`) with its core side in Python: host software can
be tested without hardware, and testbenches use it as the reference of the RTL.
"""

import inspect
import operator
from typing import Any, NamedTuple

from rtl.tile.register_map import (
    CONST,
    PROGRAM_WORDS_PER_INSTRUCTION,
    RO,
    RW,
    STROBE,
    TILE_REGISTERS,
    W1C,
    Region,
    Register,
    RegisterMap,
)

__all__ = ["RegisterError", "UnknownNameError", "BusError", "Transport", "Registers", "AsyncRegisters",
           "AxiLiteTransport", "RegisterBlockModel", "words_from_bytes", "bytes_from_words",
           "program_words"]

_WORD = 0xFFFF_FFFF
RESP_NAMES = {0: "OKAY", 1: "EXOKAY", 2: "SLVERR", 3: "DECERR"}


class RegisterError(ValueError):
    """A register access the map does not allow (unknown name, value too wide, wrong direction)."""


class UnknownNameError(RegisterError, AttributeError):
    """No register, region or field of that name."""


class BusError(RuntimeError):
    """The bus answered an access with an error response; ``resp`` is the AXI code (2 = SLVERR)."""

    def __init__(self, op, address, resp):
        super().__init__(f"{op} at 0x{address:06x}: {RESP_NAMES.get(resp, resp)} response")
        self.op, self.address, self.resp = op, address, resp


class Transport(NamedTuple):
    """A transport made of two callables: ``read32(address) -> int``, ``write32(address, value)``
    (plain functions for :class:`Registers`, coroutine functions for :class:`AsyncRegisters`)."""
    read32: Any
    write32: Any


# -- the operations, as generators of bus accesses ----------------------------------------------
# Each yields ("read", address) and receives the word, or yields ("write", address, value); its
# return value is the operation's result.

def _run_sync(transport, ops):
    try:
        request = next(ops)
        while True:
            if request[0] == "read":
                result = int(transport.read32(request[1]))
            else:
                result = transport.write32(request[1], request[2])
            request = ops.send(result)
    except StopIteration as stop:
        return stop.value


async def _run_async(transport, ops):
    try:
        request = next(ops)
        while True:
            if request[0] == "read":
                result = transport.read32(request[1])
                if inspect.isawaitable(result):
                    result = await result
                result = int(result)
            else:
                result = transport.write32(request[1], request[2])
                if inspect.isawaitable(result):
                    result = await result
            request = ops.send(result)
    except StopIteration as stop:
        return stop.value


def _check_word(what, value):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise RegisterError(f"{what}: expected an integer, got {value!r}")
    value = operator.index(value)
    if not 0 <= value <= _WORD:
        raise RegisterError(f"{what} = {value:#x} does not fit 32 bits")
    return value


class _Driver:
    def __init__(self, transport, register_map=None, *, base=0):
        if not (hasattr(transport, "read32") and hasattr(transport, "write32")):
            raise TypeError("transport must have read32(address) and write32(address, value)")
        register_map = TILE_REGISTERS if register_map is None else register_map
        if not isinstance(register_map, RegisterMap):
            raise TypeError(f"register_map must be a RegisterMap, got {register_map!r}")
        self._transport = transport
        self._map = register_map
        self._base = base
        self._handles = {}
        for entry in register_map.entries:
            cls = _RegisterHandle if isinstance(entry, Register) else _RegionHandle
            self._handles[entry.name.lower()] = cls(self, entry)

    register_map = property(lambda self: self._map)
    base = property(lambda self: self._base)
    transport = property(lambda self: self._transport)

    def _run(self, ops):
        raise NotImplementedError

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name):
        try:
            return self._handles[name.lower()]
        except (KeyError, AttributeError):
            raise UnknownNameError(f"{self._map.name} has no register or region {name!r} (known: "
                                   f"{', '.join(self._handles)})") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._handles))

    def _region(self, region):
        handle = region if isinstance(region, _RegionHandle) else self[region]
        if not isinstance(handle, _RegionHandle):
            raise RegisterError(f"{handle.name} is a register, not a region")
        return handle.region

    def read32(self, offset):
        """The raw word at byte ``offset`` from the block's base."""
        return self._run(self._read_op(offset))

    def write32(self, offset, value):
        """Write the raw word ``value`` at byte ``offset`` from the block's base."""
        return self._run(self._write_op(offset, _check_word(f"word at 0x{offset:x}", value)))

    def read_words(self, region, offset, count):
        """``count`` words of ``region`` (a name or ``regs.<region>``) from word ``offset``, as a list."""
        region = self._region(region)
        self._check_span(region, offset, count)
        return self._run(self._read_words_op(region, offset, count))

    def write_words(self, region, offset, words):
        """Write ``words`` (integers 0..2**32-1) into ``region`` from word ``offset``."""
        region = self._region(region)
        words = [_check_word(f"{region.name} word {offset + i}", w) for i, w in enumerate(words)]
        self._check_span(region, offset, len(words))
        return self._run(self._write_words_op(region, offset, words))

    @staticmethod
    def _check_span(region, offset, count):
        for what, value in (("offset", offset), ("count", count)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RegisterError(f"{region.name}: {what} must be a non-negative integer, got {value!r}")
        if offset + count > region.words:
            raise RegisterError(f"{region.name}: words {offset}..{offset + count - 1} are beyond its "
                                f"{region.words} words")

    def _read_op(self, offset):
        return (yield ("read", self._base + offset))

    def _write_op(self, offset, value):
        yield ("write", self._base + offset, value)

    def _read_words_op(self, region, offset, count):
        out = []
        for i in range(count):
            out.append((yield ("read", self._base + region.offset + 4 * (offset + i))))
        return out

    def _write_words_op(self, region, offset, words):
        for i, word in enumerate(words):
            yield ("write", self._base + region.offset + 4 * (offset + i), word)


class Registers(_Driver):
    """The driver over a synchronous transport: every method returns its result.

    Parameters
    ----------
    transport
        An object with ``read32(address) -> int`` and ``write32(address, value)`` (a
        :class:`Transport` of two functions will do, or a :class:`RegisterBlockModel`); it raises
        :class:`BusError` for an error response.
    register_map : RegisterMap, optional
        Default: the compute tile's map with its default build parameters
        (:data:`rtl.tile.register_map.TILE_REGISTERS`).
    base : int
        The block's base address on the transport's bus.
    """

    def _run(self, ops):
        return _run_sync(self._transport, ops)


class AsyncRegisters(_Driver):
    """The driver over an asynchronous transport: every method returns a coroutine to ``await``.

    Same parameters as :class:`Registers`; ``read32``/``write32`` of the transport are coroutine
    functions (plain functions work too).
    """

    def _run(self, ops):
        return _run_async(self._transport, ops)


class _RegisterHandle:
    """``regs.<register>``: read, write and the fields of one register."""

    def __init__(self, driver, register):
        self._driver = driver
        self.register = register
        self.name = register.name
        self.offset = register.offset
        self.access = register.access
        self._fields = {f.name: _FieldHandle(self, f) for f in register.fields}

    def __repr__(self):
        return f"<{self.name} at 0x{self.offset:03x}, {self.access}>"

    @property
    def address(self):
        return self._driver._base + self.offset

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.field(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._fields))

    def field(self, name):
        """The accessor of field ``name`` (also reachable as an attribute)."""
        try:
            return self._fields[name]
        except KeyError:
            known = ", ".join(self._fields) or "none"
            raise UnknownNameError(f"register {self.name} has no field {name!r} (fields: {known})") \
                from None

    def read(self):
        """The register's value (bits no field covers are 0)."""
        self._check_readable()
        return self._driver._run(self._read_op())

    def read_fields(self):
        """``{field: value}`` (``{"value": word}`` for a register without fields)."""
        self._check_readable()
        return self._driver._run(self._read_fields_op())

    def write(self, value=None, **fields):
        """Write the whole register (``value``) or fields by name (the others are written as 0)."""
        return self._driver._run(self._write_op(self._word(value, fields)))

    def modify(self, **fields):
        """Read-modify-write of an ``rw`` register: set the named fields, keep the others."""
        if self.access != RW:
            raise RegisterError(f"{self.name} is {self.access}: modify is for rw registers")
        if not fields:
            raise RegisterError(f"{self.name}: nothing to modify (name the fields to set)")
        mask = 0
        for name in fields:
            mask |= self.field(name).field.mask
        return self._driver._run(self._modify_op(mask, self._word(None, fields)))

    def _check_readable(self):
        if not self.register.readable:
            raise RegisterError(f"{self.name} is write-only (a {self.access} register reads as 0)")

    def _word(self, value, fields):
        if not self.register.writable:
            raise RegisterError(f"{self.name} is read-only ({self.access})")
        if value is not None and fields:
            raise RegisterError(f"{self.name}: give a whole value or fields, not both")
        if fields:
            for name in fields:
                self.field(name)
            try:
                return self.register.pack(**fields)
            except ValueError as exc:
                raise RegisterError(str(exc)) from None
        if value is None:
            raise RegisterError(f"{self.name}: nothing to write (give a value or fields)")
        value = _check_word(self.name, value)
        if value & ~self.register.mask:
            raise RegisterError(f"{self.name} = {value:#x} sets bits outside the register "
                                f"(mask {self.register.mask:#x})")
        return value

    def _read_op(self):
        return (yield ("read", self.address)) & self.register.mask

    def _read_fields_op(self):
        return self.register.unpack((yield from self._read_op()))

    def _write_op(self, word):
        yield ("write", self.address, word)

    def _modify_op(self, mask, word):
        old = yield from self._read_op()
        yield ("write", self.address, (old & ~mask) | word)


class _FieldHandle:
    """``regs.<register>.<field>``: read one field; write it (read-modify-write for ``rw``)."""

    def __init__(self, register_handle, field):
        self._reg = register_handle
        self.field = field
        self.name = field.name

    def __repr__(self):
        return f"<{self._reg.name}.{self.name} [{self.field.bits_text}]>"

    def read(self):
        """The field's value."""
        self._reg._check_readable()
        return self._reg._driver._run(self._read_op())

    def write(self, value):
        """Set the field: a read-modify-write for an ``rw`` register, a write of just this field
        (the others 0) for ``w1c`` and ``strobe`` registers."""
        if self._reg.access == RW:
            return self._reg.modify(**{self.name: value})
        return self._reg.write(**{self.name: value})

    def value_name(self, value):
        """The table's name for ``value`` of this field, or ``None``."""
        return self.field.value_name(value)

    def _read_op(self):
        word = yield from self._reg._read_op()
        return (word >> self.field.lsb) & ((1 << self.field.width) - 1)


class _RegionHandle:
    """``regs.<region>``: bulk access to one region."""

    def __init__(self, driver, region):
        self._driver = driver
        self.region = region
        self.name = region.name
        self.offset = region.offset
        self.words = region.words

    def __repr__(self):
        return f"<{self.name} region at 0x{self.offset:06x}, {self.words} words>"

    def read(self, offset, count):
        return self._driver.read_words(self, offset, count)

    def write(self, offset, words):
        return self._driver.write_words(self, offset, words)


class AxiLiteTransport:
    """A transport over cocotbext-axi's ``AxiLiteMaster`` (coroutines, for :class:`AsyncRegisters`).

    ``read32``/``write32`` issue one 4-byte transfer at ``address`` (full ``WSTRB``) and raise
    :class:`BusError` when the response is not ``OKAY``. Nothing here imports cocotb: any object
    with the master's ``read(address, length)`` and ``write(address, data)`` coroutines works.
    """

    def __init__(self, master):
        self.master = master

    async def read32(self, address):
        result = await self.master.read(address, 4)
        if int(result.resp):
            raise BusError("read", address, int(result.resp))
        return int.from_bytes(bytes(result.data), "little")

    async def write32(self, address, value):
        result = await self.master.write(address, int(value).to_bytes(4, "little"))
        if int(result.resp):
            raise BusError("write", address, int(result.resp))


class RegisterBlockModel:
    """The register block's behaviour in Python: a transport plus the core side of every port.

    As :class:`rtl.tile.axil_registers.AxilRegisters` does: ``const`` reads the table's value,
    ``ro`` reads :attr:`inputs` (set them as the core would drive the port), ``rw`` reads and writes
    :attr:`values` (reset values from the table), ``w1c`` reads its state (:meth:`pulse` sets bits
    as the core's set pulses do, a write of 1 clears), ``strobe`` reads 0 and appends each write to
    :attr:`strobes`; regions read and write :attr:`regions` (lists of words). Bits outside the
    register read 0. An unmapped address, or a write with a partial byte strobe, raises
    :class:`BusError` (``SLVERR``) from :meth:`read32`/:meth:`write32`; :meth:`access` returns the
    response code instead.
    """

    def __init__(self, register_map=None):
        self.register_map = TILE_REGISTERS if register_map is None else register_map
        regs = self.register_map.registers
        self.inputs = {r.name: 0 for r in regs if r.access == RO}
        self.values = {r.name: r.init for r in regs if r.access in (RW, W1C)}
        self.strobes = []
        self.regions = {r.name: [0] * r.words for r in self.register_map.regions}

    def pulse(self, name, bits):
        """The core sets ``bits`` of the ``w1c`` register ``name``."""
        reg = self.register_map[name]
        if reg.access != W1C:
            raise RegisterError(f"{reg.name} is not a w1c register")
        self.values[reg.name] |= bits & reg.mask

    @property
    def irq(self):
        """The interrupt line: some ``w1c`` bit set and enabled."""
        for reg in self.register_map.registers:
            if reg.access == W1C:
                enable = self.values[self.register_map[reg.irq_enable].name] if reg.irq_enable \
                    else reg.mask
                if self.values[reg.name] & enable:
                    return True
        return False

    def access(self, op, address, value=0, strobe=0b1111):
        """One AXI access: ``(read data, resp)``; ``op`` is ``"read"`` or ``"write"``."""
        found = self.register_map.find(address)
        if found is None or (op == "write" and strobe != 0b1111):
            return 0, 2
        entry, word = found
        if isinstance(entry, Region):
            if op == "read":
                return self.regions[entry.name][word], 0
            self.regions[entry.name][word] = value & _WORD
            return 0, 0
        if op == "read":
            if entry.access == CONST:
                return entry.init, 0
            if entry.access == RO:
                return self.inputs[entry.name] & entry.mask, 0
            if entry.access == STROBE:
                return 0, 0
            return self.values[entry.name], 0
        value &= entry.mask
        if entry.access == RW:
            self.values[entry.name] = value
        elif entry.access == W1C:
            self.values[entry.name] &= ~value
        elif entry.access == STROBE:
            self.strobes.append((entry.name, value))
        return 0, 0

    def read32(self, address):
        data, resp = self.access("read", address)
        if resp:
            raise BusError("read", address, resp)
        return data

    def write32(self, address, value):
        _, resp = self.access("write", address, value)
        if resp:
            raise BusError("write", address, resp)


def words_from_bytes(data):
    """32-bit little-endian words of ``data`` (a multiple of 4 bytes)."""
    data = bytes(data)
    if len(data) % 4:
        raise RegisterError(f"a word image is a multiple of 4 bytes, got {len(data)}")
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def bytes_from_words(words):
    """The little-endian bytes of 32-bit ``words``."""
    return b"".join(_check_word("word", w).to_bytes(4, "little") for w in words)


def program_words(program):
    """The ``PROGRAM`` region words of a program: a list of ``sim_models.tile_isa.Instruction`` or
    its encoded image (``encode_program``), 8 words per instruction."""
    if not isinstance(program, (bytes, bytearray)):
        from sim_models.tile_isa import encode_program
        program = encode_program(program)
    words = words_from_bytes(program)
    if len(words) % PROGRAM_WORDS_PER_INSTRUCTION:
        raise RegisterError(f"a program image is a multiple of {4 * PROGRAM_WORDS_PER_INSTRUCTION} "
                            f"bytes, got {len(program)}")
    return words
