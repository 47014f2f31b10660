"""Synchronous block-RAM read ports with no read/write collision logic."""

from amaranth.hdl import Signal
from amaranth.lib.memory import ReadPort

__all__ = ["NO_RW_CHECK", "unchecked_read_port"]

#: Attributes for a :class:`~amaranth.lib.memory.Memory` read through :func:`unchecked_read_port`.
NO_RW_CHECK = {"no_rw_check": 1}


def unchecked_read_port(m, memory, *, name):
    """A synchronous, non-transparent read port of ``memory`` whose collisions are undefined.

    A non-transparent read port promises the old data when it reads the address another port
    writes in the same cycle. ECP5 block RAM does not, so Yosys emulates it: a comparator, a
    register and a multiplexer per data bit, on the path from the RAM output. A design that
    never reads an address in the cycle it is written can drop that promise with the
    ``no_rw_check`` attribute (:data:`NO_RW_CHECK`, given to ``memory``'s ``attrs``). Yosys honours
    it only when it merges an output register into an *asynchronous* read port, so the port is
    built that way: an asynchronous read into a register enabled by ``en``. The simulators see a
    read with the old data on a collision, as before; only synthesis may differ, so the caller
    must make collisions impossible (and say why beside the call).

    Returns an interface of ``ReadPort.Signature(addr_width=..., shape=memory.shape)``, to be
    connected like the port ``memory.read_port()`` returns: ``data`` is the word at ``addr`` one
    cycle after ``en``, held while ``en`` is low.
    """
    if memory.attrs.get("no_rw_check") != 1:
        raise ValueError(f"unchecked_read_port: memory {name!r} needs attrs={NO_RW_CHECK!r}")
    read = memory.read_port(domain="comb")
    signature = ReadPort.Signature(addr_width=len(read.addr), shape=memory.shape)
    port = signature.create(path=(name,))
    data = Signal(memory.shape, name=f"{name}_data", reset_less=True)
    m.d.comb += [read.addr.eq(port.addr), port.data.eq(data)]
    with m.If(port.en):
        m.d.sync += data.eq(read.data)
    return port
