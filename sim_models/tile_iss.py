"""Instruction-level model (ISS) of the compute tile: executes a program of :mod:`sim_models.tile_isa`.

State: the scratchpad (``spad_words`` 32-bit words), sixteen 32-bit registers (``r0`` reads 0), the
weight memory (a read-only byte image) and the KV-cache controller slice (a
:class:`sim_models.kv_cache.KvCacheModel`, one sequence per (request, layer, KV head), a record =
one position's K then V as bfloat16). Every instruction is executed as a whole, NumPy-vectorized,
with the numerics of :mod:`sim_models.mx` (GEMMs) and :mod:`sim_models.vpu` (everything else), so a
program the compiler lowers from a model reproduces :mod:`sim_models.transformer` bit for bit.

Semantics of each instruction, its error conditions and status codes: ``docs/tile_isa.md``. A fault
stops the machine: :meth:`TileIss.run` raises :class:`TileFault` (one line naming the instruction
index, its name and the cause; ``status`` is the :data:`sim_models.tile_isa.STATUS` code).

The ISS also counts what the hardware moves (:meth:`TileIss.counters`): instructions per opcode,
weight bytes read (each GEMM streams its weights once per M-tile of ``rows`` rows), KV bytes read
and written, MAC block pairs (useful ``M * N * K / 32``) and MAC-array B beats (with the padding of
partial tiles: the array's busy cycles at one beat per cycle), vector-unit elements (row elements
times the passes of the operation), quantizer blocks.
"""

from collections import Counter

import numpy as np

from sim_models import mx, tile_weights, vpu
from sim_models.kv_cache import KvCacheModel
from sim_models.tile_isa import (
    FORMATS,
    INSTRUCTION_BYTES,
    INSTRUCTIONS,
    NUM_REGS,
    STATUS,
    VOP_OPERANDS,
    VOP_PASSES,
    VOPS,
    IsaError,
    TileConfig,
    decode,
)

__all__ = ["TileFault", "TileIss", "vop_result"]

_MASK32 = 0xFFFF_FFFF
_STATUS_CODE = {name: code for code, name in STATUS.items()}


class TileFault(RuntimeError):
    """The machine stopped on an error; ``status`` (a ``STATUS`` code) and ``pc`` say where and why."""

    def __init__(self, status: str, pc: int, name: str, message: str):
        super().__init__(f"instruction {pc} ({name}): {message} [status {_STATUS_CODE[status]} {status}]")
        self.status = _STATUS_CODE[status]
        self.status_name = status
        self.pc = pc


class _Fault(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _LazyProgram:
    """A program image whose instructions are decoded when executed: a bad word faults where it is
    reached (as in the hardware), not when the image is loaded."""

    def __init__(self, image: bytes):
        if len(image) % INSTRUCTION_BYTES:
            raise TileFault("bad_opcode", 0, "?", f"a program image is a multiple of {INSTRUCTION_BYTES} "
                                                  f"bytes, got {len(image)}")
        self._image = image

    def __len__(self):
        return len(self._image) // INSTRUCTION_BYTES

    def __getitem__(self, pc):
        return decode(int.from_bytes(self._image[pc * INSTRUCTION_BYTES:(pc + 1) * INSTRUCTION_BYTES],
                                     "little"))


def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


class TileIss:
    """The tile's state and an executor for its programs.

    Parameters
    ----------
    config : TileConfig
        Build parameters (scratchpad size, MAC array, lanes, KV controller).
    weights : bytes or uint8 array
        The weight-memory image (``poblano.compiler`` writes it); at most ``config.weight_bytes``.
    head_dim : int
        Head dimension of the model, which fixes the KV record width (``2 * head_dim * 16`` bits).
    """

    def __init__(self, config: TileConfig, weights, head_dim: int):
        self.config = config
        self.weights = np.frombuffer(bytes(weights), dtype=np.uint8)
        if self.weights.size > config.weight_bytes:
            raise ValueError(f"weight image of {self.weights.size} bytes exceeds the weight memory "
                             f"({config.weight_bytes} bytes)")
        self.head_dim = head_dim
        self.kv = KvCacheModel(config.kv_config(head_dim))
        self.spad = np.zeros(config.spad_words, dtype=np.uint32)
        self.regs = [0] * NUM_REGS
        self._counts = Counter()
        self._mx_cache = {}

    # -- host access --------------------------------------------------------------------------------
    def write_words(self, addr: int, values) -> None:
        """Host write into the scratchpad (integers or float32 values as their bit patterns)."""
        arr = np.asarray(values)
        words = arr.view(np.uint32) if arr.dtype == np.float32 else arr.astype(np.uint32)
        self.spad[addr:addr + words.size] = words.ravel()

    def read_floats(self, addr: int, count: int) -> np.ndarray:
        """``count`` scratchpad words from ``addr`` as float32."""
        return self.spad[addr:addr + count].view(np.float32).copy()

    def counters(self) -> dict:
        """Everything counted so far, as a plain dict (``instructions`` holds the per-opcode counts)."""
        by_op = {k.split(".", 1)[1]: v for k, v in self._counts.items() if k.startswith("op.")}
        out = {k: v for k, v in self._counts.items() if not k.startswith("op.")}
        out["instructions"] = sum(by_op.values())
        out["by_opcode"] = dict(sorted(by_op.items()))
        for key in ("weight_bytes", "kv_bytes_read", "kv_bytes_written", "mac_block_pairs",
                    "mac_beats", "quantizer_blocks", "vpu_elements"):
            out.setdefault(key, 0)
        return out

    def reset_counters(self) -> None:
        self._counts = Counter()

    def kv_records(self, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """K and V of a sequence as bfloat16 patterns ``(length, head_dim)`` uint16 (for tests)."""
        reply = self.kv.read(seq, 0, self.kv.length[seq])
        if reply["status"] != "ok":
            raise ValueError(f"KV sequence {seq}: {reply['status']}")
        return self._records(reply["data"], self.head_dim)

    # -- execution ----------------------------------------------------------------------------------
    def run(self, program, regs: dict | None = None, max_steps: int = 10_000_000) -> int:
        """Run ``program`` (instructions or a program image) from index 0 until HALT.

        ``regs`` sets registers first (``{1: position}``). Returns the instructions executed;
        raises :class:`TileFault` when the machine stops on an error.
        """
        if isinstance(program, bytes | bytearray):
            program = _LazyProgram(bytes(program))
        for r, value in (regs or {}).items():
            self._set(r, value)
        pc = steps = 0
        while True:
            if pc >= len(program):
                raise TileFault("pc_range", pc, "-", f"ran past the end of the program "
                                                     f"({len(program)} instructions) without HALT")
            if steps >= max_steps:
                raise TileFault("step_limit", pc, "-", f"more than {max_steps} steps")
            try:
                instr = program[pc]
            except IsaError as exc:          # decoded when reached, as the sequencer does
                raise TileFault("bad_opcode", pc, "?", str(exc)) from None
            steps += 1
            self._counts["op." + instr.name] += 1
            if instr.name == "HALT":
                return steps
            try:
                target = getattr(self, "_x_" + instr.name)(instr.fields)
            except _Fault as exc:
                raise TileFault(exc.status, pc, instr.name, str(exc)) from None
            if target is not None:
                if not 0 <= target < len(program):
                    raise TileFault("pc_range", pc, instr.name, f"branch target {target} is outside "
                                                                f"the program (0..{len(program) - 1})")
                pc = target
            else:
                pc += 1

    # -- helpers ------------------------------------------------------------------------------------
    def _reg(self, r):
        return self.regs[r] if r else 0

    def _set(self, r, value):
        if r:
            self.regs[r] = int(value) & _MASK32

    def _addr(self, f, name):
        return f[name] + self._reg(f[name + "_r"])

    def _check_spad(self, lo, hi, what):
        if lo < 0 or hi > self.config.spad_words:
            raise _Fault("spad_range", f"{what} words {lo}..{hi - 1} outside the scratchpad "
                                       f"(0..{self.config.spad_words - 1})")

    def _wread(self, addr, nbytes, what):
        if addr % 4 or addr + nbytes > self.weights.size:
            raise _Fault("weight_range", f"{what}: bytes {addr}..{addr + nbytes - 1} outside the weight "
                                         f"image ({self.weights.size} bytes) or not word aligned")
        self._counts["weight_bytes"] += nbytes
        return self.weights[addr:addr + nbytes]

    def _waddr(self, f):
        return f["w"] + self._reg(f["w_r"]) * f["w_stride"]

    @staticmethod
    def _records(data, hd):
        raw = b"".join(int(d).to_bytes(4 * hd, "little") for d in data)
        bits = np.frombuffer(raw, dtype="<u2").reshape(-1, 2, hd)
        return bits[:, 0].astype(np.uint16), bits[:, 1].astype(np.uint16)

    def _kv(self, reply, what):
        if reply["status"] != "ok":
            raise _Fault("kv_error", f"{what}: KV controller answered {reply['status']}")
        return reply

    # -- scalar and control -------------------------------------------------------------------------
    def _x_LI(self, f):
        self._set(f["rd"], f["imm"])

    def _x_ADD(self, f):
        self._set(f["rd"], self._reg(f["rs"]) + self._reg(f["rt"]))

    def _x_ADDI(self, f):
        self._set(f["rd"], self._reg(f["rs"]) + f["imm"])

    def _x_LDW(self, f):
        addr = self._addr(f, "addr")
        self._check_spad(addr, addr + 1, "LDW")
        self._set(f["rd"], self.spad[addr])

    def _x_STW(self, f):
        addr = self._addr(f, "addr")
        self._check_spad(addr, addr + 1, "STW")
        self.spad[addr] = self._reg(f["rs"])

    def _x_BLT(self, f):
        return f["target"] if self._reg(f["rs"]) < self._reg(f["rt"]) else None

    def _x_BNE(self, f):
        return f["target"] if self._reg(f["rs"]) != self._reg(f["rt"]) else None

    # -- weight memory ------------------------------------------------------------------------------
    def _x_LOAD(self, f):
        words = f["words"]
        if words == 0:
            raise _Fault("bad_field", "words is 0")
        dst = self._addr(f, "dst")
        self._check_spad(dst, dst + words, "destination")
        data = self._wread(self._waddr(f), 4 * words, "LOAD")
        self.spad[dst:dst + words] = data.view("<u4")

    def _x_EMBED(self, f):
        count, row = f["count"], f["row"]
        if count == 0 or row == 0:
            raise _Fault("bad_field", "count and row must be at least 1")
        ids_at, dst = self._addr(f, "ids"), self._addr(f, "dst")
        self._check_spad(ids_at, ids_at + count, "token ids")
        self._check_spad(dst, dst + count * row, "destination")
        ids = self.spad[ids_at:ids_at + count].astype(np.int64)
        bad = np.nonzero(ids >= f["vocab"])[0]
        if bad.size:
            raise _Fault("token_range", f"token id {ids[bad[0]]} at word {ids_at + bad[0]} is not below "
                                        f"vocab {f['vocab']}")
        base = self._waddr(f)
        for t, token in enumerate(ids):
            data = self._wread(base + int(token) * 4 * row, 4 * row, "embedding row")
            self.spad[dst + t * row:dst + (t + 1) * row] = data.view("<u4")

    # -- MAC array ----------------------------------------------------------------------------------
    def _weights(self, addr, k, n, fmt):
        key = (addr, k, n, fmt)
        if key not in self._mx_cache:
            data = self.weights[addr:addr + tile_weights.mx_bytes(k, n, fmt)]
            self._mx_cache[key] = tile_weights.unpack_mx(data, k, n, fmt, self.config.tile_cols)
        return self._mx_cache[key]

    def _x_GEMM(self, f):
        m, k, n = f["m"], f["k"], f["n"]
        if m == 0 or n == 0 or k == 0 or k % tile_weights.BLOCK:
            raise _Fault("bad_field", f"M={m}, K={k}, N={n}: M, N >= 1 and K a positive multiple of 32")
        if f["af"] >= len(FORMATS) or f["wf"] >= len(FORMATS):
            raise _Fault("bad_field", f"element format codes {f['af']}, {f['wf']} (0..{len(FORMATS) - 1})")
        afmt, wfmt = FORMATS[f["af"]], FORMATS[f["wf"]]
        if afmt not in self.config.mac_formats or wfmt not in self.config.mac_formats:
            raise _Fault("bad_field", f"formats {afmt} x {wfmt}: the MAC array runs "
                                      f"{', '.join(self.config.mac_formats)} only")
        src, dst = self._addr(f, "src"), self._addr(f, "dst")
        self._check_spad(src, src + m * k, "activations")
        self._check_spad(dst, dst + m * n, "destination")
        addr, nbytes = self._waddr(f), tile_weights.mx_bytes(k, n, wfmt)
        m_tiles = -(-m // self.config.rows)
        self._wread(addr, nbytes, "weights")
        blocks = k // tile_weights.BLOCK
        if blocks * self.config.interleave > self.config.weight_buffer_beats:
            self._counts["weight_bytes"] += (m_tiles - 1) * nbytes   # re-streamed per M-tile
        b_codes, b_scales = self._weights(addr, k, n, wfmt)
        x = _f32(self.spad[src:src + m * k]).reshape(m, k)
        a_codes, a_scales = mx.quantize(x, "floor", format=afmt)
        y = mx.matmul(a_codes, a_scales, b_codes, b_scales, a_format=afmt, b_format=wfmt)
        self.spad[dst:dst + m * n] = y.view(np.uint32).ravel()
        self._counts["mac_block_pairs"] += m * n * blocks
        self._counts["mac_beats"] += m_tiles * (-(-n // self.config.tile_cols)) * blocks * \
            self.config.interleave
        self._counts["quantizer_blocks"] += m * blocks

    # -- vector unit --------------------------------------------------------------------------------
    def _operand(self, f, name, rows, length):
        base, stride = self._addr(f, name), f[name + "_s"]
        bcast = (f["bcast"] >> "abc".index(name)) & 1
        width = 1 if bcast else length
        last = base + (rows - 1) * stride + width
        self._check_spad(base, last, f"operand {name}")
        idx = base + np.arange(rows)[:, None] * stride + np.arange(width)[None, :]
        words = self.spad[idx]
        return np.broadcast_to(words, (rows, length)) if bcast else words

    def _check_overlap(self, f, op, rows, length, width):
        """The destination may be an operand's very rows, or apart from it: the hardware streams the
        operands while it writes, so a partial overlap would depend on its timing (``bad_field``)."""
        dst, dst_s = self._addr(f, "dst"), f["dst_s"]
        dst_end = dst + (rows - 1) * dst_s + width
        for name in VOP_OPERANDS[op]:
            base, stride = self._addr(f, name), f[name + "_s"]
            bcast = (f["bcast"] >> "abc".index(name)) & 1
            end = base + (rows - 1) * stride + (1 if bcast else length)
            if base < dst_end and dst < end:
                same = base == dst and stride == dst_s and not bcast and \
                    (rows == 1 or stride >= max(length, width))
                if not same:
                    raise _Fault("bad_field", f"the destination {dst}..{dst_end - 1} overlaps operand "
                                              f"{name} ({base}..{end - 1}) without being its rows")

    def _x_VOP(self, f):
        if f["op"] >= len(VOPS):
            raise _Fault("bad_field", f"vector operation {f['op']} (0..{len(VOPS) - 1})")
        op, length, rows = VOPS[f["op"]], f["len"], f["rows"]
        if not 1 <= length <= vpu.MAX_LENGTH or rows == 0:
            raise _Fault("bad_field", f"len={length}, rows={rows}: len 1..{vpu.MAX_LENGTH}, rows >= 1")
        ops = {name: self._operand(f, name, rows, length) for name in VOP_OPERANDS[op]}
        scalar = self._reg(f["imm_r"]) if f["imm_r"] else f["imm"]
        width = 1 if op in ("sum", "sum_squares", "max_reduce") else 2 * scalar if op == "topk" else length
        dst, stride = self._addr(f, "dst"), f["dst_s"]
        self._check_spad(dst, dst + (rows - 1) * stride + width, "destination")
        self._check_overlap(f, op, rows, length, width)
        if op == "topk" and scalar > self.config.vpu_max_k:
            raise _Fault("vpu_refused", f"topk: k = {scalar} is above the vector unit's max_k "
                                        f"{self.config.vpu_max_k}")
        if op == "rope" and length > self.config.vpu_rope_length:
            raise _Fault("vpu_refused", f"rope: a row of {length} is longer than the vector unit's "
                                        f"rope_length {self.config.vpu_rope_length}")
        try:
            words = vop_result(op, ops, scalar, self._reg(f["imm1_r"]), self.config.lanes)
        except vpu.VpuError as exc:
            raise _Fault("vpu_refused", f"{op}: {exc}") from None
        assert words.shape[1] == width
        self.spad[dst + np.arange(rows)[:, None] * stride + np.arange(width)[None, :]] = words
        self._counts["vpu_elements"] += rows * length * VOP_PASSES.get(op, 1)

    # -- KV cache and attention ---------------------------------------------------------------------
    def _check_head(self, f):
        if f["hd"] != self.head_dim:
            raise _Fault("bad_field", f"hd={f['hd']}, but the KV records hold head_dim {self.head_dim}")
        if f["kvh"] == 0 or f["count"] == 0:
            raise _Fault("bad_field", "kvh and count must be at least 1")

    def _x_KVOPEN(self, f):
        first = f["seq"] + self._reg(f["seq_r"])
        for seq in range(first, first + f["count"]):
            self._kv(self.kv.open(seq), f"open sequence {seq}")

    def _x_KVAPPEND(self, f):
        self._check_head(f)
        hd, kvh, count = f["hd"], f["kvh"], f["count"]
        width = kvh * hd
        k_at, v_at = self._addr(f, "k"), self._addr(f, "v")
        self._check_spad(k_at, k_at + count * width, "K rows")
        self._check_spad(v_at, v_at + count * width, "V rows")
        k = vpu.to_bfloat16(_f32(self.spad[k_at:k_at + count * width])).reshape(count, kvh, hd)
        v = vpu.to_bfloat16(_f32(self.spad[v_at:v_at + count * width])).reshape(count, kvh, hd)
        pos = self._reg(f["pos_r"])
        base = self._reg(f["seq_r"]) + f["layer"] * kvh
        for g in range(kvh):
            seq = base + g
            if 0 <= seq < len(self.kv.length) and self.kv.live[seq] and self.kv.length[seq] != pos:
                raise _Fault("kv_error", f"sequence {seq} holds {self.kv.length[seq]} positions, "
                                         f"KVAPPEND writes position {pos}")
            for t in range(count):
                record = np.stack([k[t, g], v[t, g]]).astype("<u2").tobytes()
                self._kv(self.kv.append(seq, int.from_bytes(record, "little")), f"append to sequence {seq}")
        self._counts["kv_bytes_written"] += count * kvh * 4 * hd

    def _x_ATTN(self, f):
        self._check_head(f)
        hd, kvh, heads, count = f["hd"], f["kvh"], f["heads"], f["count"]
        if heads == 0 or heads % kvh:
            raise _Fault("bad_field", f"heads={heads} is not a positive multiple of kvh={kvh}")
        q_at, dst = self._addr(f, "q"), self._addr(f, "dst")
        self._check_spad(q_at, q_at + count * heads * hd, "queries")
        self._check_spad(dst, dst + count * heads * hd, "destination")
        if dst != q_at and abs(dst - q_at) < count * heads * hd:
            raise _Fault("bad_field", f"the destination {dst} partly overlaps the queries at {q_at}: "
                                      f"it must be the queries' very words or apart from them")
        pos = self._reg(f["pos_r"])
        length = pos + count
        base = self._reg(f["seq_r"]) + f["layer"] * kvh
        replies = [self._kv(self.kv.read(base + g, 0, length), f"read sequence {base + g} positions "
                                                                f"0..{length - 1}") for g in range(kvh)]
        keys = np.empty((kvh, length, hd), dtype=np.float32)
        values = np.empty((kvh, length, hd), dtype=np.float32)
        for g, reply in enumerate(replies):
            k_bits, v_bits = self._records(reply["data"], hd)
            keys[g], values[g] = vpu.from_bfloat16(k_bits), vpu.from_bfloat16(v_bits)
        q = _f32(self.spad[q_at:q_at + count * heads * hd]).reshape(count, heads, hd)
        kv_of = np.arange(heads) // (heads // kvh)
        scale = _f32(f["scale"])
        out = np.empty_like(q)
        for i in range(count):
            n = pos + i + 1
            k, v = keys[kv_of, :n], values[kv_of, :n]                       # (heads, n, hd)
            scores = vpu.sum(vpu.mul(np.broadcast_to(q[i][:, None, :], k.shape), k), lanes=self.config.lanes)
            p = vpu.softmax(vpu.scale(scores, scale))
            acc = np.zeros((heads, hd), dtype=np.float32)
            for t in range(n):
                acc = vpu.fma(np.broadcast_to(p[:, t, None], acc.shape), v[:, t], acc)
            out[i] = acc
            self._counts["kv_bytes_read"] += n * kvh * 4 * hd
            self._counts["vpu_elements"] += heads * n * (2 * hd + VOP_PASSES["softmax"])
        self.spad[dst:dst + count * heads * hd] = out.view(np.uint32).ravel()


assert {"_x_" + n for n in INSTRUCTIONS if n != "HALT"} <= set(dir(TileIss))


def vop_result(op: str, operands: dict, scalar0: int, scalar1: int, lanes: int) -> np.ndarray:
    """The result words ``(rows, width)`` of vector operation ``op`` (a name of ``VOPS``) on operand
    words ``operands`` (``{"a": (rows, len) uint32, ...}``) with the scalar patterns of a ``VOP``;
    raises :class:`sim_models.vpu.VpuError` where the unit refuses. Shared by the ISS and the
    tile's testbenches (which stand a model of the vector unit behind the VOP engine)."""
    x = {name: _f32(w) for name, w in operands.items()}
    if op in ("add", "sub", "mul", "max", "min", "swiglu"):
        out = getattr(vpu, op)(x["a"], x["b"])
    elif op == "fma":
        out = vpu.fma(x["a"], x["b"], x["c"])
    elif op == "scale":
        out = vpu.scale(x["a"], _f32(scalar0))
    elif op == "clamp":
        out = vpu.clamp(x["a"], _f32(scalar0), _f32(scalar1))
    elif op in vpu.UNARY:
        out = vpu.UNARY[op](x["a"])
    elif op == "to_bf16":
        out = vpu.to_bfloat16(x["a"]).astype(np.uint32)
    elif op == "from_bf16":
        out = vpu.from_bfloat16((operands["a"] & 0xFFFF).astype(np.uint16))
    elif op in ("sum", "sum_squares"):
        out = getattr(vpu, op)(x["a"], lanes=lanes)[:, None]
    elif op == "max_reduce":
        out = vpu.max_reduce(x["a"])[:, None]
    elif op == "rmsnorm":
        out = vpu.rmsnorm(x["a"], x["b"], _f32(scalar0), lanes=lanes)
    elif op == "softmax":
        out = vpu.softmax(x["a"])
    elif op == "rope":
        out = vpu.rope(x["a"], x["b"], x["c"])
    else:                                                        # topk
        values, index = vpu.topk(x["a"], int(scalar0))
        out = np.concatenate([values.view(np.uint32), index.astype(np.uint32)], axis=1)
    out = np.asarray(out)
    return out.view(np.uint32) if out.dtype == np.float32 else out.astype(np.uint32)
