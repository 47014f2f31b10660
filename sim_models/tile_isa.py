"""The compute tile's instruction set: the one table of opcodes and fields, and its binary encoding.

Every instruction is :data:`WIDTH` (256) bits. Bits 7..0 hold the opcode; the fields of
:data:`INSTRUCTIONS` follow in order from bit 8 upwards, the first field in the least significant
bits (as ``amaranth.lib.data.StructLayout`` packs), and the unused high bits are zero. A program in
memory is a sequence of 32-byte little-endian words, instruction ``i`` at byte ``32 i``.

The assembler (``poblano.compiler.assembler``), the instruction-level model
(:mod:`sim_models.tile_iss`), the documentation (``docs/tile_isa.md``, checked by a test) and the RTL
decoder read this table; nothing else defines an encoding. The semantics of every instruction are
in ``docs/tile_isa.md`` and executed by :mod:`sim_models.tile_iss`.

Field kinds
-----------
``reg``     a register number 0..15 (``r0`` reads 0, writes to it are dropped);
``u``       an unsigned integer;
``s``       a two's-complement signed integer;
``spad``    a scratchpad word address (always paired with a ``reg`` field named ``<field>_r`` whose
            value is added: effective address ``field + r[field_r]``);
``wmem``    a weight-memory byte address (paired with ``<field>_r`` and ``<field>_stride``:
            effective address ``field + r[field_r] * field_stride``);
``pc``      an instruction index (branch target);
``fmt``     an MX element format, index into :data:`FORMATS`;
``vop``     a vector-unit operation, index into :data:`VOPS`;
``bits``    32 raw bits (a binary32 constant or an integer, by the operation).
"""

from dataclasses import dataclass, field

__all__ = ["WIDTH", "OPCODE_BITS", "NUM_REGS", "FORMATS", "VOPS", "VOP_OPERANDS", "VOP_PASSES",
           "STATUS", "Field", "INSTRUCTIONS", "OPCODES", "Instruction", "IsaError",
           "encode", "decode", "encode_program", "decode_program", "encoding_table", "TileConfig"]

WIDTH = 256
"""Bits per instruction."""
OPCODE_BITS = 8
NUM_REGS = 16
INSTRUCTION_BYTES = WIDTH // 8

FORMATS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2")
"""MX element formats by their ``fmt`` code (the order of ``sim_models.mx.FORMATS``)."""

VOPS = ("add", "sub", "mul", "fma", "max", "min", "scale", "clamp", "exp", "reciprocal", "rsqrt",
        "sigmoid", "silu", "swiglu", "to_bf16", "from_bf16", "sum", "sum_squares", "max_reduce",
        "rmsnorm", "softmax", "rope", "topk")
"""Vector-unit operations by their ``vop`` code: the numbering of ``rtl.vpu.layouts.Op``."""

VOP_OPERANDS = {
    "add": "ab", "sub": "ab", "mul": "ab", "fma": "abc", "max": "ab", "min": "ab", "scale": "a",
    "clamp": "a", "exp": "a", "reciprocal": "a", "rsqrt": "a", "sigmoid": "a", "silu": "a",
    "swiglu": "ab", "to_bf16": "a", "from_bf16": "a", "sum": "a", "sum_squares": "a",
    "max_reduce": "a", "rmsnorm": "ab", "softmax": "a", "rope": "abc", "topk": "a",
}
"""Operand streams each operation reads (``rtl.vpu.layouts.OPERANDS``)."""

VOP_PASSES = {"rmsnorm": 2, "softmax": 3, "rope": 2}
"""Times each row of a composite streams on operand ``a`` (``rtl.vpu.layouts.PASSES``); others 1."""

STATUS = {
    0: "ok",             # HALT reached
    1: "bad_opcode",     # an opcode not in INSTRUCTIONS
    2: "bad_field",      # a field out of its legal range (a length of 0, K not a multiple of 32, ...)
    3: "spad_range",     # a scratchpad access beyond spad_words
    4: "weight_range",   # a weight-memory read beyond the image, or misaligned
    5: "kv_error",       # the KV-cache controller refused (no_space, seq_full, ...) or a position
                         # mismatch between KVAPPEND and the sequence's length
    6: "token_range",    # EMBED of a token id >= vocab
    7: "pc_range",       # a branch target or the next instruction beyond the program
    8: "step_limit",     # the watchdog: more instructions executed than allowed
    9: "vpu_refused",    # the vector unit refused the command (e.g. topk k > length)
    10: "bus_error",     # the weight memory answered a read with an error response (AXI SLVERR or
                         # DECERR): a fault of the memory system, never of the program, so the ISS,
                         # whose weight memory is an image, never stops with it
    11: "aborted",       # the host's abort stopped the run between two instructions
}
"""Status codes the sequencer reports when it stops (the host reads them; 0 means HALT)."""


@dataclass(frozen=True)
class Field:
    """One field: ``bits`` wide, of ``kind`` (see the module docstring)."""
    name: str
    bits: int
    kind: str


def _f(spec: str) -> tuple[Field, ...]:
    out = []
    for item in spec.split():
        name, kind, bits = item.split(":")
        out.append(Field(name, int(bits), kind))
    return tuple(out)


_A = 20        # scratchpad address bits (up to 1 Mi words)
_W = 40        # weight-memory address bits (1 TiB)

INSTRUCTIONS = {
    # name: (opcode, fields)
    "HALT": (0, _f("")),
    "LI": (1, _f("rd:reg:4 imm:u:32")),
    "ADD": (2, _f("rd:reg:4 rs:reg:4 rt:reg:4")),
    "ADDI": (3, _f("rd:reg:4 rs:reg:4 imm:s:32")),
    "LDW": (4, _f(f"rd:reg:4 addr:spad:{_A} addr_r:reg:4")),
    "STW": (5, _f(f"rs:reg:4 addr:spad:{_A} addr_r:reg:4")),
    "BLT": (6, _f("rs:reg:4 rt:reg:4 target:pc:16")),
    "BNE": (7, _f("rs:reg:4 rt:reg:4 target:pc:16")),
    "LOAD": (8, _f(f"dst:spad:{_A} dst_r:reg:4 words:u:20 "
                   f"w:wmem:{_W} w_r:reg:4 w_stride:u:32")),
    "EMBED": (9, _f(f"dst:spad:{_A} dst_r:reg:4 ids:spad:{_A} ids_r:reg:4 count:u:12 "
                    f"w:wmem:{_W} w_r:reg:4 w_stride:u:32 row:u:16 vocab:u:20")),
    "GEMM": (10, _f(f"dst:spad:{_A} dst_r:reg:4 src:spad:{_A} src_r:reg:4 m:u:12 k:u:16 n:u:20 "
                    f"w:wmem:{_W} w_r:reg:4 w_stride:u:32 af:fmt:3 wf:fmt:3")),
    "VOP": (11, _f(f"op:vop:5 len:u:14 rows:u:12 "
                   f"dst:spad:{_A} dst_r:reg:4 dst_s:u:16 a:spad:{_A} a_r:reg:4 a_s:u:16 "
                   f"b:spad:{_A} b_r:reg:4 b_s:u:16 c:spad:{_A} c_r:reg:4 c_s:u:16 "
                   "bcast:u:3 imm:bits:32 imm_r:reg:4 imm1_r:reg:4")),
    "KVOPEN": (12, _f("seq:u:16 seq_r:reg:4 count:u:16")),
    "KVAPPEND": (13, _f(f"layer:u:12 kvh:u:8 hd:u:12 count:u:12 k:spad:{_A} k_r:reg:4 "
                        f"v:spad:{_A} v_r:reg:4 pos_r:reg:4 seq_r:reg:4")),
    "ATTN": (14, _f(f"layer:u:12 heads:u:8 kvh:u:8 hd:u:12 count:u:12 dst:spad:{_A} dst_r:reg:4 "
                    f"q:spad:{_A} q_r:reg:4 pos_r:reg:4 seq_r:reg:4 scale:bits:32")),
}
"""Every instruction: opcode and fields, first field in the least significant bits after the opcode."""

OPCODES = {code: name for name, (code, _) in INSTRUCTIONS.items()}
"""Instruction name by opcode."""

for _name, (_code, _fields) in INSTRUCTIONS.items():
    assert OPCODE_BITS + sum(f.bits for f in _fields) <= WIDTH, _name
del _name, _code, _fields


class IsaError(ValueError):
    """An instruction that cannot be encoded or decoded (unknown name or opcode, field too wide)."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: its name and every field's value (missing fields are 0).

    Values are unsigned integers as encoded, except ``s`` fields (signed) and ``bits`` fields
    (the raw 32-bit pattern, unsigned).
    """
    name: str
    fields: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in INSTRUCTIONS:
            raise IsaError(f"unknown instruction {self.name!r}")
        known = {f.name for f in INSTRUCTIONS[self.name][1]}
        extra = set(self.fields) - known
        if extra:
            raise IsaError(f"{self.name} has no field {sorted(extra)[0]!r}")
        full = {f.name: int(self.fields.get(f.name, 0)) for f in INSTRUCTIONS[self.name][1]}
        object.__setattr__(self, "fields", full)

    def __getitem__(self, name):
        return self.fields[name]

    def __hash__(self):
        return hash((self.name, tuple(self.fields.items())))


def encode(instr: Instruction) -> int:
    """The 256-bit word of ``instr``; :class:`IsaError` if a value does not fit its field."""
    code, fields = INSTRUCTIONS[instr.name]
    word, shift = code, OPCODE_BITS
    for f in fields:
        value = instr.fields[f.name]
        if f.kind == "s":
            if not -(1 << (f.bits - 1)) <= value < (1 << (f.bits - 1)):
                raise IsaError(f"{instr.name} field {f.name} = {value} does not fit {f.bits} signed bits")
            value &= (1 << f.bits) - 1
        elif not 0 <= value < (1 << f.bits):
            raise IsaError(f"{instr.name} field {f.name} = {value} does not fit {f.bits} bits")
        word |= value << shift
        shift += f.bits
    return word


def decode(word: int) -> Instruction:
    """The instruction of a 256-bit word; :class:`IsaError` for an unknown opcode or stray bits."""
    code = word & ((1 << OPCODE_BITS) - 1)
    if code not in OPCODES:
        raise IsaError(f"unknown opcode {code}")
    name = OPCODES[code]
    values, shift = {}, OPCODE_BITS
    for f in INSTRUCTIONS[name][1]:
        value = (word >> shift) & ((1 << f.bits) - 1)
        if f.kind == "s" and value >> (f.bits - 1):
            value -= 1 << f.bits
        values[f.name] = value
        shift += f.bits
    if word >> shift:
        raise IsaError(f"{name}: bits above {shift} are not zero")
    return Instruction(name, values)


def encode_program(program) -> bytes:
    """Instructions -> program memory image (32 little-endian bytes each)."""
    return b"".join(encode(i).to_bytes(INSTRUCTION_BYTES, "little") for i in program)


def decode_program(data: bytes) -> list[Instruction]:
    """Program memory image -> instructions."""
    if len(data) % INSTRUCTION_BYTES:
        raise IsaError(f"a program image is a multiple of {INSTRUCTION_BYTES} bytes, got {len(data)}")
    return [decode(int.from_bytes(data[i:i + INSTRUCTION_BYTES], "little"))
            for i in range(0, len(data), INSTRUCTION_BYTES)]


@dataclass(frozen=True)
class TileConfig:
    """Build parameters of one compute tile (shared by the compiler, the ISS and the RTL).

    ``rows``, ``cols``, ``interleave``: the MAC array (``rtl.mx.mac_array.MacArray`` defaults), whose
    tile is ``rows x (cols * interleave)`` outputs; ``lanes``: the vector unit
    (``rtl.vpu.vector_unit.VectorUnit`` default, and the golden model's ``lanes``); ``spad_words``:
    the activation scratchpad; ``kv_*``: the KV-cache controller slice (``sim_models.kv_cache.
    KvConfig`` defaults, ``kv_banks`` its ``banks``: a timing parameter, no result depends on it;
    its ``token_bits`` follow the model's head dimension);
    ``weight_bytes``: the weight memory behind the AXI4 read port; ``vpu_max_k`` and
    ``vpu_rope_length``: the vector unit's largest ``topk`` k and longest ``rope`` row (its
    ``max_k`` and ``rope_length``), beyond which a ``VOP`` stops with ``vpu_refused``;
    ``weight_buffer_beats``: the GEMM engine's B buffer, in MAC-array B beats (``cols`` blocks): a
    ``GEMM`` whose N-tile fits it (``k / 32 * interleave`` beats at most) streams its weight once,
    M-tiles inner; a larger one (or 0: no buffer) re-streams the weight for every M-tile;
    ``mac_formats``: the element formats (names of :data:`FORMATS`) the MAC array and its quantizer
    run (E2M1 alone today, ``rtl.mx.mac_array.MacArray``): a ``GEMM`` whose ``af`` or ``wf`` is not
    among them stops with ``bad_field``.
    """
    spad_words: int = 65536
    rows: int = 4
    cols: int = 4
    interleave: int = 8
    lanes: int = 8
    kv_pages: int = 64
    kv_page_tokens: int = 16
    kv_seqs: int = 16
    kv_max_pages_per_seq: int = 16
    kv_banks: int = 4
    weight_buffer_beats: int = 1024
    weight_bytes: int = 1 << 32
    vpu_max_k: int = 8
    vpu_rope_length: int = 256
    mac_formats: tuple = ("e2m1",)

    def __post_init__(self):
        for name in ("spad_words", "rows", "cols", "interleave", "lanes", "kv_pages",
                     "kv_page_tokens", "kv_seqs", "kv_max_pages_per_seq", "kv_banks", "weight_bytes",
                     "vpu_max_k", "vpu_rope_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.weight_buffer_beats, int) or isinstance(self.weight_buffer_beats, bool) \
                or self.weight_buffer_beats < 0:
            raise ValueError(f"weight_buffer_beats must be a non-negative integer, "
                             f"got {self.weight_buffer_beats!r}")
        if self.spad_words > 1 << 20:
            raise ValueError(f"spad_words must be at most {1 << 20} (20-bit addresses), "
                             f"got {self.spad_words}")
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes must be a power of two, got {self.lanes}")
        if self.spad_words % self.lanes:
            raise ValueError(f"spad_words must be a multiple of lanes ({self.lanes}): the scratchpad is "
                             f"{self.lanes} banks of words, got {self.spad_words}")
        if not isinstance(self.mac_formats, tuple) or not self.mac_formats \
                or not all(f in FORMATS for f in self.mac_formats) \
                or len(set(self.mac_formats)) != len(self.mac_formats):
            raise ValueError(f"mac_formats must be a non-empty tuple of distinct names from "
                             f"{', '.join(FORMATS)}, got {self.mac_formats!r}")
        self.kv_config(32)                      # the KV controller's own checks

    @property
    def tile_cols(self) -> int:
        """Output columns of one MAC-array tile (``cols * interleave``): the weight image's N-tile."""
        return self.cols * self.interleave

    def kv_config(self, head_dim: int):
        """The KV-cache controller configuration for records of one position's K and V (bfloat16)."""
        from sim_models.kv_cache import KvConfig
        return KvConfig(pages=self.kv_pages, page_tokens=self.kv_page_tokens,
                        token_bits=2 * head_dim * 16, seqs=self.kv_seqs,
                        max_pages_per_seq=self.kv_max_pages_per_seq, banks=self.kv_banks)


def encoding_table() -> str:
    """The encoding of every instruction as a Markdown table (``docs/tile_isa.md`` holds a copy,
    checked by a test): fields with their bit ranges, in order from the least significant bit."""
    rows = ["| opcode | instruction | fields (bit range, kind) |", "|---|---|---|"]
    for name, (code, fields) in INSTRUCTIONS.items():
        shift, parts = OPCODE_BITS, []
        for f in fields:
            parts.append(f"`{f.name}` {shift + f.bits - 1}:{shift} {f.kind}")
            shift += f.bits
        rows.append(f"| {code} | `{name}` | {', '.join(parts) or '-'} |")
    return "\n".join(rows) + "\n"
