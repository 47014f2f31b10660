"""Assembler and disassembler of the tile's instruction set (:mod:`sim_models.tile_isa`).

Source syntax, one instruction per line::

    [label:] [NAME key=value ...] [; comment]

Keys are the field names of :data:`sim_models.tile_isa.INSTRUCTIONS`; a missing field is 0. Values:

* registers ``r0`` .. ``r15``; integers (decimal, ``0x`` hex, negative for signed fields);
* ``fmt`` fields an element format (``e2m1`` ...), ``op`` of VOP an operation (``rmsnorm`` ...);
* ``bits`` fields an integer or a float literal (rounded once to binary32: ``1e-05``, ``0.5``);
* ``pc`` fields a label or an instruction index; ``bcast`` the letters of the broadcast operands
  (``ac``) or an integer;
* an address (``spad`` field) a sum of terms ``int``, ``s:NAME`` (a scratchpad symbol) and at most
  one register, which goes to the companion ``<field>_r``: ``dst=s:y+64+r7``;
* a weight address (``wmem`` field) a sum of ``int``, ``w:NAME`` (a weight-image symbol) and at most
  one ``rN*STRIDE``, which goes to ``<field>_r`` and ``<field>_stride``: ``w=w:experts.0.w1+r8*6528``.

:func:`disassemble` prints the same syntax (zero fields omitted, addresses merged with their
registers, optionally symbolic), so text -> binary -> text -> binary is the identity on binaries.
Errors raise :class:`AsmError` with the line number.
"""

import re
from dataclasses import dataclass, field

import numpy as np

from sim_models.tile_isa import FORMATS, INSTRUCTIONS, VOPS, Instruction, IsaError, encode, encode_program

__all__ = ["AsmError", "Program", "assemble", "disassemble", "listing"]

_REG = re.compile(r"r(\d+)$")
_LABEL = re.compile(r"[A-Za-z_][\w.]*$")


class AsmError(ValueError):
    """Bad assembly source; the message names the line."""


@dataclass
class Program:
    """An assembled program: instructions, their source lines and the labels (name -> index)."""
    instructions: list
    source: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)
    name: str = ""

    @property
    def binary(self) -> bytes:
        """The program memory image (:func:`sim_models.tile_isa.encode_program`)."""
        return encode_program(self.instructions)

    def __len__(self):
        return len(self.instructions)


def _fields(name):
    return {f.name: f for f in INSTRUCTIONS[name][1]}


def _reg(text):
    m = _REG.match(text)
    if not m or int(m.group(1)) > 15:
        raise ValueError(f"{text!r} is not a register r0..r15")
    return int(m.group(1))


def _int(text, symbols):
    if text.startswith(("s:", "w:")):
        if text not in symbols:
            raise ValueError(f"unknown symbol {text!r}")
        return symbols[text][0]
    return int(text, 0)


def _bits(text):
    try:
        return int(text, 0)
    except ValueError:
        value = np.float32(float(text))
        return int(np.array(value, dtype=np.float32).view(np.uint32))


def _parse_address(key, text, kind, symbols, out):
    total = 0
    for term in text.split("+"):
        if kind == "spad" and _REG.match(term):
            out[key + "_r"] = _reg(term)
        elif kind == "wmem" and "*" in term:
            reg, stride = term.split("*", 1)
            out[key + "_r"] = _reg(reg)
            out[key + "_stride"] = _int(stride, symbols)
        else:
            total += _int(term, symbols)
    out[key] = total


def _parse_line(name, operands, symbols, labels):
    fields = _fields(name)
    out = {}
    for operand in operands:
        key, sep, text = operand.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"{name} has no field {key!r}" if sep
                             else f"expected key=value, got {operand!r}")
        kind = fields[key].kind
        if kind in ("spad", "wmem"):
            _parse_address(key, text, kind, symbols, out)
        elif kind == "reg":
            out[key] = _reg(text)
        elif kind == "fmt":
            if text not in FORMATS:
                raise ValueError(f"unknown element format {text!r}")
            out[key] = FORMATS.index(text)
        elif kind == "vop":
            if text not in VOPS:
                raise ValueError(f"unknown vector operation {text!r}")
            out[key] = VOPS.index(text)
        elif kind == "bits":
            out[key] = _bits(text)
        elif kind == "pc":
            out[key] = labels[text] if text in labels else int(text, 0)
        elif key == "bcast" and text and set(text) <= set("abc"):
            out[key] = sum(1 << "abc".index(ch) for ch in set(text))
        else:
            out[key] = _int(text, symbols)
    return Instruction(name, out)


def assemble(text: str, symbols: dict | None = None, name: str = "") -> Program:
    """Assemble ``text``. ``symbols`` maps ``"s:NAME"``/``"w:NAME"`` to ``(address, size)``."""
    symbols = symbols or {}
    lines = []
    labels = {}
    for number, raw in enumerate(text.splitlines(), 1):
        code = raw.split(";", 1)[0].strip()
        while ":" in code.split(" ", 1)[0] and code.split(" ", 1)[0].endswith(":"):
            label, _, code = code.partition(":")
            if not _LABEL.match(label) or label in labels:
                raise AsmError(f"line {number}: bad or repeated label {label!r}")
            labels[label] = len(lines)
            code = code.strip()
        if code:
            comment = raw.split(";", 1)[1].strip() if ";" in raw else ""
            lines.append((number, code, f"{code}  ; {comment}" if comment else code))
    instructions = []
    for number, code, _ in lines:
        mnemonic, *operands = code.split()
        if mnemonic not in INSTRUCTIONS:
            raise AsmError(f"line {number}: unknown instruction {mnemonic!r}")
        try:
            instr = _parse_line(mnemonic, operands, symbols, labels)
            encode(instr)
        except (ValueError, KeyError, IsaError) as exc:
            raise AsmError(f"line {number}: {exc}") from None
        instructions.append(instr)
    return Program(instructions, [raw for _, _, raw in lines], labels, name)


def _symbolic(value, prefix, symbols):
    best = None
    for sym, (base, size) in (symbols or {}).items():
        if sym.startswith(prefix) and base <= value < base + max(size, 1):
            if best is None or base > best[1] or (base == best[1] and size < best[2]):
                best = (sym, base, size)
    if best is None:
        return str(value)
    return best[0] if value == best[1] else f"{best[0]}+{value - best[1]}"


def _float_text(bits):
    value = np.array(bits, dtype=np.uint32).view(np.float32)
    if not np.isfinite(value):
        return hex(bits)
    text = str(value)                     # the shortest decimal that rounds back to this binary32
    return text if any(ch in text for ch in ".e") else text + ".0"


def disassemble(instr: Instruction, symbols: dict | None = None, labels: dict | None = None) -> str:
    """One line of source for ``instr`` (addresses as symbols when ``symbols`` names them)."""
    fields = INSTRUCTIONS[instr.name][1]
    merged = {f.name + suffix for f in fields if f.kind in ("spad", "wmem")
              for suffix in (("_r",) if f.kind == "spad" else ("_r", "_stride"))}
    by_index = {v: k for k, v in (labels or {}).items()}
    parts = [instr.name]
    for f in fields:
        value = instr[f.name]
        if f.name in merged:
            continue                                                   # printed with its address
        if f.kind == "spad":
            reg = instr[f.name + "_r"]
            if value or reg:
                text = _symbolic(value, "s:", symbols) if value else ""
                text = "+".join(t for t in (text, f"r{reg}" if reg else "") if t)
                parts.append(f"{f.name}={text}")
        elif f.kind == "wmem":
            reg, stride = instr[f.name + "_r"], instr[f.name + "_stride"]
            if value or reg or stride:
                text = _symbolic(value, "w:", symbols)
                if reg or stride:
                    text += f"+r{reg}*{stride}"
                parts.append(f"{f.name}={text}")
        elif f.kind in ("vop", "fmt"):
            parts.append(f"{f.name}={(VOPS if f.kind == 'vop' else FORMATS)[value]}"
                         if value < len(VOPS if f.kind == "vop" else FORMATS) else f"{f.name}={value}")
        elif not value:
            continue
        elif f.kind == "reg":
            parts.append(f"{f.name}=r{value}")
        elif f.kind == "bits":
            integer = instr.name == "VOP" and instr["op"] < len(VOPS) and VOPS[instr["op"]] == "topk"
            parts.append(f"{f.name}={value if integer else _float_text(value)}")
        elif f.kind == "pc":
            parts.append(f"{f.name}={by_index.get(value, value)}")
        elif f.name == "bcast":
            parts.append("bcast=" + "".join(ch for i, ch in enumerate("abc") if value >> i & 1)
                         if value < 8 else f"bcast={value}")
        else:
            parts.append(f"{f.name}={value}")
    return " ".join(parts)


def listing(program: Program, symbols: dict | None = None, source: bool = True) -> str:
    """A readable listing: labels, instruction index, and the source line (or its disassembly)."""
    by_index = {}
    for label, index in program.labels.items():
        by_index.setdefault(index, []).append(label)
    out = []
    for i, instr in enumerate(program.instructions):
        for label in by_index.get(i, []):
            out.append(f"{label}:")
        text = program.source[i] if source and i < len(program.source) else \
            disassemble(instr, symbols, program.labels)
        out.append(f"{i:5d}  {text}")
    return "\n".join(out) + "\n"
