"""Survivors argued equivalent: mutants no test can kill because the circuit does not change.

Each entry is keyed by the file, the enclosing function and the mutation as the report shows it
(``before``, ``after``: the enclosing expression, whitespace collapsed), so it survives edits that
only move lines. The reason is printed beside the survivor in ``benchmarks/results/mutation.md``
and the mutant is left out of the kill rate. Add an entry only with an argument a reviewer can
check; a survivor that is not equivalent needs a test instead.
"""

__all__ = ["EQUIVALENT", "reason"]

#: path -> {(function, before, after): reason}
EQUIVALENT = {
    "rtl/common/stream_register.py": {
        ("StreamRegister.elaborate", "self.o.valid.eq(1)", "(dropped)"):
            "o.valid is already 1 whenever skid_valid is: the skid register is loaded only while o holds a "
            "stalled word (o.valid & ~o.ready, a cycle that leaves o.valid alone), and o.valid is assigned "
            "otherwise only on the branch taken when skid_valid is 0; so holding o.valid instead of setting "
            "it to 1 changes nothing",
    },
    "rtl/common/credited_buffer.py": {
        ("CreditedBuffer.elaborate", "depth + 1", "depth + 2"):
            "a wider stored-entry counter: it holds 0 .. depth in either width while the writer keeps "
            "the credit contract; it could count past depth only after a write into a full buffer, which "
            "breaks the contract (overflow rises and stays, the contents are lost) in either width",
    },
    "rtl/common/xorshift.py": {
        ("xorshift64_next", "(b ^ (b << 17))[:64]", "(b ^ (b << 17))[:65]"):
            "bit 64 of the wider result is dropped where it is used: both users assign it to a 64-bit "
            "signal (the generator's and the checker's r)",
        ("start_state", "Const(key, 64)", "Const(key, 65)"):
            "key is masked to 64 bits before, so the wider constant has the same value and a zero bit 64",
        ("start_state", "(mixed_seed ^ Const(key, 64))[:64]", "(mixed_seed ^ Const(key, 64))[:65]"):
            "mixed_seed is 64 bits and the key below 2**64: bit 64 of the XOR is 0, so s, s == 0 and the "
            "result are unchanged (the result is assigned to a 64-bit state)",
        ("start_state", "s | Const(key, 64) & (s == 0).replicate(64)",
         "s ^ Const(key, 64) & (s == 0).replicate(64)"):
            "the masked key is non-zero only where s is zero, and then s | k = s ^ k = k; elsewhere it is "
            "zero and s | 0 = s ^ 0 = s",
    },
    "rtl/vpu/grid_sum.py": {
        ("GridSum.elaborate", "lanes + 1", "lanes + 2"):
            "a wider lane counter: it counts 0 .. lanes-1 in either width",
    },
    "rtl/vpu/topk.py": {
        ("order_key", "x[:31]", "x[:32]"):
            "only taken for a negative x, whose bit 31 is 1: ~x[31] is the 0 that zero-extending ~x[:31] "
            "gives",
        ("order_key", "Const(1 << 32, 33)", "Const(1 << 32, 34)"):
            "a wider constant in a key that is truncated to its 33 bits where it is stored and read",
        ("order_key", "Const(0, 1)", "Const(0, 2)"):
            "a wider zero at the top of a key that is truncated to its 33 bits where it is stored and read",
        ("order_key", "Const(0, 1)", "Const(0, 0)"):
            "the key is zero-extended to its 33 bits where it is stored: the missing top zero comes back",
        ("order_key", "Const(1, 1)", "Const(1, 2)"):
            "a wider constant above bit 31 of the positive branch, of which only bits 0..31 are read",
        ("entry_layout", '{"valid": 1, "key": 33, "index": _INDEX_BITS, "value": 32}',
         '{"valid": 1, "key": 34, "index": _INDEX_BITS, "value": 32}'):
            "a wider stored key holding the same 33-bit keys: every comparison is unchanged",
        ("TopK.elaborate", "2 * depth", "3 * depth"):
            "a wider output counter: it counts to 2*max_k - 1 in either width",
        ("TopK.elaborate", "2 * depth + 1", "2 * depth + 2"):
            "a wider beat count: it holds at most 2*max_k in either width",
        ("TopK.elaborate", '(beat["valid"] & beat["last"]) | row_end',
         '(beat["valid"] & beat["last"]) ^ row_end'):
            "both are set only if a row's last beat came the cycle after the previous row's last beat, "
            "which the caller may not do (it waits for busy to fall in between): xor is or",
        ("_better", "Cat(~a.index, a.key) > Cat(~b.index, b.key)",
         "Cat(~a.index, a.key) >= Cat(~b.index, b.key)"):
            "equality needs the same key and the same index, and two entries of a row never share an index "
            "(each element arrives once): > and >= agree",
        ("entry_layout", '{"valid": 1, "key": 33, "index": _INDEX_BITS, "value": 32}',
         '{"valid": 1, "key": 33, "index": _INDEX_BITS, "value": 33}'):
            "a wider stored value holding the same zero-extended 32-bit values; only 32 bits are output",
        ("TopK.elaborate", "Const(0, 1)", "Const(0, 0)"):
            "the merged list's clear input: a zero of no width is still a constant 0",
        ("systolic_list", "e + 1", "e + 0"):
            "e < depth always holds, so the last cell also gets a passed-down register, which nothing "
            "reads: the entry it would hand down falls off the list either way",
        ("systolic_list", "e + 1", "e - 1"):
            "e - 1 < depth always holds, so the last cell also gets a passed-down register, which nothing "
            "reads: the entry it would hand down falls off the list either way",
    },
    "rtl/vpu/rms_output.py": {
        ("RmsOutput.elaborate", "Signal(4)", "Signal(5)"): "a wider flag register: the top bit is never read",
        ("RmsOutput.elaborate", "Signal(24)", "Signal(25)"):
            "a wider significand register holding a 24-bit value; the multiplier reads its 24 bits",
        ("RmsOutput.elaborate", "x_nan | g_nan | (g_inf & x_zero)", "x_nan | g_nan ^ (g_inf & x_zero)"):
            "g_nan and g_inf are never both set, so xor and or agree",
        ("RmsOutput.elaborate", "x_nan | g_nan | (g_inf & x_zero) | (x_inf & g_zero)",
         "x_nan | g_nan | (g_inf & x_zero) ^ (x_inf & g_zero)"):
            "x cannot be both zero and infinite: the two terms never hold together, so xor is or",
        ("RmsOutput.elaborate", "first.p[:48]", "first.p[:49]"):
            "the product of two 24-bit significands has 48 bits and is stored in a 48-bit register",
        ("RmsOutput.elaborate", "Signal(48)", "Signal(49)"):
            "the normalized product's top bit is bit 47; bit 48 is always 0 and only widens the kept part "
            "by a zero",
    },
    "rtl/vpu/rms_scale.py": {
        ("round_to_24", 'Signal(25, name=f"{name}_total")', 'Signal(26, name=f"{name}_total")'):
            "kept + up is at most 2**24: 25 bits hold it",
        ("RmsScale._reciprocal_step", "rem >= divisor", "rem > divisor"):
            "rem equals the divisor only when the division is exact, i.e. d = 2**33 (V a power of four); "
            "the mutant then gives q = 2**26 - 1 with a non-zero remainder, and 2q + 1 = 2**27 - 1 rounds "
            "to the same 24-bit scale as the exact 2q = 2**27",
        ("RmsScale.elaborate", "Signal(15)", "Signal(14)"):
            "the division step's remainder is below n <= 8192: 14 bits hold it",
        ("RmsScale.elaborate", "Signal(34)", "Signal(35)"):
            "the divisor is the root shifted so its top bit is bit 33; bit 34 is always 0",
        ("RmsScale.elaborate", "a_top >= b_top", "a_top > b_top"):
            "on a tie both tops are equal: the same top is chosen",
        ("RmsScale.elaborate", 'Signal(6, name=f"{name}_shift")', 'Signal(7, name=f"{name}_shift")'):
            "the shift amount is clamped to 63 before it is stored",
        ("RmsScale.elaborate", "recip.eq(0)", "recip.eq(1)"):
            "the 27 reciprocal steps shift every initial bit of the 27-bit quotient out",
        ("RmsScale._sqrt_step", 'Signal(32, name=f"{name}_root")', 'Signal(33, name=f"{name}_root")'):
            "the grown root is stored in the 32-bit root register: the extra top bit is dropped there",
        ("RmsScale.elaborate", "range(39)", "range(40)"):
            "a wider leading-zero count: the same values fit",
        ("RmsScale.elaborate", "_WINDOW + 1", "_WINDOW + 2"):
            "a wider leading-zero count: the same values fit",
        ("RmsScale.elaborate", "distance > 63", "distance >= 63"):
            "a distance of 63 is clamped to 63 either way",
        ("RmsScale.elaborate", "34 - len(root)", "33 - len(root)"):
            "the divisor then has its top bit at 32 and its exponent one higher, the same value: the "
            "quotient gains a bit (floor(2**60 / d), still 27 bits but for d = 2**33, where the restoring "
            "steps give 2**27 - 1 with a remainder), and 2q + sticky rounds to the same 24-bit scale",
        ("RmsScale.elaborate", "r_rem != 0", "r_rem != 1"):
            "2**59 mod d is never 1 for d in [2**33, 2**34) (2**59 - 1 = 179951 * 3203431780337 has no "
            "divisor there); it is 0 only for d = 2**33, where 2q + 1 = 2**27 + 1 rounds like 2q = 2**27",
    },
}


def reason(path, function, before, after):
    """The argument that this mutant is equivalent, or ``None``."""
    return EQUIVALENT.get(path, {}).get((function, before, after))
