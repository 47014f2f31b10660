"""Layouts of the compute tile: its instructions, decoded from the one table of ``sim_models.tile_isa``.

Every instruction is a :class:`amaranth.lib.data.StructLayout` of :data:`~sim_models.tile_isa.WIDTH`
bits built from :data:`sim_models.tile_isa.INSTRUCTIONS`: ``opcode`` in bits 7..0, the fields in
order from bit 8 (``s`` fields signed), and ``stray``, the unused high bits that a valid instruction
keeps at zero. :data:`INSTRUCTION` is the union of all of them, so a 256-bit instruction register
``ir = Signal(INSTRUCTION)`` reads as ``ir.GEMM.m``, ``ir.VOP.a_r`` and so on: nothing restates an
encoding by hand.
"""

from amaranth.hdl import signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from sim_models.tile_isa import INSTRUCTIONS, OPCODE_BITS, STATUS, WIDTH

__all__ = ["INSTRUCTION", "instruction_layout", "Opcode", "Status", "WEIGHT_ADDR_BITS",
           "host_region_signature", "scratchpad_port_signature", "wide_port_signature",
           "weight_request_layout", "weight_data_layout", "VopCommand", "vop_signature",
           "SPAD_EA_BITS", "GemmCommand", "gemm_signature", "WEIGHT_EA_BITS", "KvCommand",
           "kv_signature", "AttnCommand", "attn_signature"]

WEIGHT_ADDR_BITS = 40
"""Byte-address width of the weight memory (the ``wmem`` fields)."""

Opcode = enum.Enum("Opcode", {name: code for name, (code, _) in INSTRUCTIONS.items()})
Opcode.__doc__ = "Instruction opcodes (``sim_models.tile_isa.INSTRUCTIONS``)."

Status = enum.Enum("Status", {name.upper(): code for code, name in STATUS.items()})
Status.__doc__ = "Stop status of the sequencer (``sim_models.tile_isa.STATUS``)."


def instruction_layout(name: str) -> data.StructLayout:
    """The 256-bit layout of instruction ``name``: ``opcode``, its fields, then ``stray``."""
    members = {"opcode": unsigned(OPCODE_BITS)}
    used = OPCODE_BITS
    for field in INSTRUCTIONS[name][1]:
        members[field.name] = signed(field.bits) if field.kind == "s" else unsigned(field.bits)
        used += field.bits
    members["stray"] = unsigned(WIDTH - used)
    return data.StructLayout(members)


INSTRUCTION = data.UnionLayout({name: instruction_layout(name) for name in INSTRUCTIONS})
"""Every instruction's view of one 256-bit word."""


def host_region_signature(words: int) -> wiring.Signature:
    """Host access to a window of ``words`` 32-bit words, from the host's side (the requester).

    ``req`` carries ``addr`` (word index), ``write`` and ``data``; every request gets exactly one
    ``resp`` (its ``data`` is the word read, or anything for a write), in order. The server may
    take any number of cycles.
    """
    return wiring.Signature({
        "req": Out(stream.Signature(data.StructLayout({
            "addr": unsigned(max(1, (words - 1).bit_length())), "write": 1, "data": 32}))),
        "resp": In(stream.Signature(data.StructLayout({"data": 32}))),
    })


def scratchpad_port_signature(words: int) -> wiring.Signature:
    """One read and one write port of the scratchpad (``words`` 32-bit words), from the user's side.

    ``rd_data`` is the word at ``rd_addr`` one cycle after ``rd_en`` and holds while ``rd_en`` is low;
    ``wr_en`` writes ``wr_data`` at ``wr_addr``. Reading an address in the cycle it is written gives
    an undefined word: users never do.
    """
    addr = unsigned(max(1, (words - 1).bit_length()))
    return wiring.Signature({
        "rd_addr": Out(addr), "rd_en": Out(1), "rd_data": In(32),
        "wr_addr": Out(addr), "wr_en": Out(1), "wr_data": Out(32),
    })


def wide_port_signature(words: int, lanes: int) -> wiring.Signature:
    """The scratchpad's row port (``lanes`` consecutive words from any word address), user's side.

    ``rd_data[j]`` is word ``rd_addr + j`` one cycle after ``rd_en``, held while ``rd_en`` is low;
    ``wr_en`` writes ``wr_data[j]`` to word ``wr_addr + j`` for each ``j`` with ``wr_mask[j]`` set.
    """
    addr = unsigned(max(1, (words - 1).bit_length()))
    row = data.ArrayLayout(32, lanes)
    return wiring.Signature({
        "rd_addr": Out(addr), "rd_en": Out(1), "rd_data": In(row),
        "wr_addr": Out(addr), "wr_en": Out(1), "wr_mask": Out(lanes), "wr_data": Out(row),
    })


def weight_request_layout(addr_bits: int = WEIGHT_ADDR_BITS, length_bits: int = 32) -> data.StructLayout:
    """A weight-port request: ``length`` bytes from byte address ``addr`` (both multiples of 4)."""
    return data.StructLayout({"addr": unsigned(addr_bits), "length": unsigned(length_bits)})


def weight_data_layout(data_bytes: int) -> data.StructLayout:
    """A weight-port data beat: ``data_bytes`` bytes little-endian, ``last`` on a range's last beat."""
    return data.StructLayout({"data": unsigned(8 * data_bytes), "last": 1})


SPAD_EA_BITS = 34
"""Width of an effective scratchpad address (a 20-bit field plus a 32-bit register): wide enough
that no sum wraps, so a range check sees every address beyond the scratchpad."""

VopCommand = data.StructLayout({
    "op": 5, "len": 14, "rows": 12,
    "dst": SPAD_EA_BITS, "dst_s": 16,
    "a": SPAD_EA_BITS, "a_s": 16,
    "b": SPAD_EA_BITS, "b_s": 16,
    "c": SPAD_EA_BITS, "c_s": 16,
    "bcast": 3, "scalar0": 32, "scalar1": 32,
    "internal": 1, "chain": 1,
    "group": 8, "dst_si": 16, "a_si": 16, "b_si": 16, "c_si": 16,
})
"""A ``VOP`` instruction with its registers applied: effective base addresses (field + register),
strides, the broadcast bits and the two scalars (``sim_models.tile_isa`` for their meaning).

The sequencer leaves ``internal`` and ``chain`` at 0. The attention engine's own commands set
``internal`` (their addresses may reach the engine's private buffer beyond the scratchpad, and the
overlap rule does not apply) and, for its accumulation, ``chain``: operand ``c`` of row ``r``
is read only once result row ``r - group`` is written (``acc = fma(p_t, V_t, acc)`` row after row).

``group`` (0 or 1: plain rows) makes the rows two-dimensional, for the attention engine's commands
over several heads at once: row ``r`` is member ``j = r % group`` of group ``o = r // group``, and
operand ``X`` of it starts at ``X + o * X_s + j * X_si`` (the destination likewise with ``dst_s``
and ``dst_si``). The sequencer leaves ``group`` and the ``_si`` strides at 0."""


def vop_signature() -> wiring.Signature:
    """The sequencer's side of the VOP engine: a command, then exactly one status."""
    return wiring.Signature({
        "cmd": Out(stream.Signature(VopCommand)),
        "resp": In(stream.Signature(data.StructLayout({"status": Status}))),
    })


WEIGHT_EA_BITS = 67
"""Width of an effective weight address (a 40-bit field plus a 32 x 32-bit register product): wide
enough that no sum wraps, so a range check sees every address beyond the image."""

GemmCommand = data.StructLayout({
    "dst": SPAD_EA_BITS, "src": SPAD_EA_BITS,
    "m": 12, "k": 16, "n": 20,
    "w": WEIGHT_EA_BITS,
    "af": 3, "wf": 3,
})
"""A ``GEMM`` instruction with its registers applied: effective scratchpad addresses of the
destination and the activations, the shape, the weight's byte offset in the weight image
(``w + r[w_r] * w_stride``, not yet checked) and the two element-format codes."""


def gemm_signature() -> wiring.Signature:
    """The sequencer's side of the GEMM engine: a command, then exactly one status."""
    return wiring.Signature({
        "cmd": Out(stream.Signature(GemmCommand)),
        "resp": In(stream.Signature(data.StructLayout({"status": Status}))),
    })


KvCommand = data.StructLayout({
    "append": 1,
    "seq": 33, "count": 16,
    "layer": 12, "kvh": 8, "hd": 12,
    "k": SPAD_EA_BITS, "v": SPAD_EA_BITS,
    "pos": 32,
})
"""A ``KVOPEN`` (``append`` 0) or ``KVAPPEND`` (``append`` 1) with its registers applied.

``KVOPEN``: ``seq`` is ``seq + r[seq_r]`` (the first sequence), ``count`` the number to open.
``KVAPPEND``: ``seq`` is ``r[seq_r]`` (the engine adds ``layer * kvh + g``), ``k`` and ``v`` the
effective scratchpad addresses of the K and V rows, ``pos`` is ``r[pos_r]``; ``layer``, ``kvh``,
``hd`` and ``count`` are the instruction's fields."""


def kv_signature() -> wiring.Signature:
    """The sequencer's side of the KV engine: a command, then exactly one status."""
    return wiring.Signature({
        "cmd": Out(stream.Signature(KvCommand)),
        "resp": In(stream.Signature(data.StructLayout({"status": Status}))),
    })


AttnCommand = data.StructLayout({
    "layer": 12, "heads": 8, "kvh": 8, "hd": 12, "count": 12,
    "dst": SPAD_EA_BITS, "q": SPAD_EA_BITS,
    "pos": 32, "seq": 32, "scale": 32,
})
"""An ``ATTN`` with its registers applied: effective scratchpad addresses of the destination and
the queries, ``pos`` = ``r[pos_r]``, ``seq`` = ``r[seq_r]``, the score scale's binary32 bits and
the instruction's other fields."""


def attn_signature() -> wiring.Signature:
    """The sequencer's side of the attention engine: a command, then exactly one status."""
    return wiring.Signature({
        "cmd": Out(stream.Signature(AttnCommand)),
        "resp": In(stream.Signature(data.StructLayout({"status": Status}))),
    })
