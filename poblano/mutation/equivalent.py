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
    "rtl/mx/layouts.py": {
        ("row_lane", '{ "valid": 1, "first": 1, "zero_init": 1, "result": 1,…',
         '{ "valid": 1, "first": 2, "zero_init": 1, "result": 1,…'):
            "a two-bit first flag: MacArray drives it from the one-bit first_block (top bit 0), the lane "
            "moves only as a whole between signals of the same layout, and MacPe reads it into its "
            "one-bit first_d registers: bit 0 is the flag either way",
        ("row_lane", '…: 1, "first": 1, "zero_init": 1, "result": 1, "result_last": …',
         '…: 1, "first": 1, "zero_init": 2, "result": 1, "result_last": …'):
            "a two-bit zero_init flag: driven from the one-bit ~has_c (top bit 0), moved only as part of "
            "the whole lane, read into MacPe's one-bit zero_init_d registers: bit 0 is the flag either way",
        ("row_lane", '…, "result": 1, "result_last": 1, "a": operand, "fields": data…',
         '…, "result": 1, "result_last": 2, "a": operand, "fields": data…'):
            "a two-bit result_last flag: driven from one-bit flag registers (flags[2] in MacArray and "
            "MacPe); read as the last field of MacPe's Cat(valid, result, result_last), which the 3-bit "
            "flags register cuts after its bit 0, and into the result beat's one-bit last",
    },
    "rtl/mx/fp32_accumulate.py": {
        ("Fp32Accumulate.elaborate", '(a_be - t["p_be"])[:11]', '(a_be - t["p_be"])[:12]'):
            "a_be and p_be are 10-bit signed, so their difference has 11 bits: a slice past the end is cut "
            "at the width (Python slice semantics), [:12] is the same 11 bits",
        ("Fp32Accumulate.elaborate", "d[10]", "d[9]"):
            "d = a_be - p_be with a_be in 1..255 and p_be = exp + 137 - lz in -132..392 (exp is 9-bit "
            "signed, lz 0..13), so -391 <= d <= 387: d fits 10 signed bits and bit 9 equals the sign bit 10",
        ("Fp32Accumulate.elaborate", "d[5:11]", "d[5:10]"):
            "the sampled mutant is the second d[5:11], the arm Mux(d[10], ..., d[5:11] != 0) takes when "
            "d[10] is 0; then d[5:11] != 0 and d[5:10] != 0 agree",
        ("Fp32Accumulate.elaborate", "d[:5]", "d[:6]"):
            "shift gains a sixth bit, but only shift[0] .. shift[4] are read (the five align steps, "
            "range(5)); bits 0..4 of d[:6] ^ swap.replicate(5) are those of d[:5] ^ swap.replicate(5)",
        ("Fp32Accumulate.elaborate", "Const(0, 1)", "Const(0, 2)"):
            "the top zero of x in step 3 (x = Cat(0, x_sig, 0), below 2**27): one more zero bit keeps x's "
            "value; x + y and x - y (|.| < 2**28) are the same integers, and both are cut to their low 29 "
            "(s_xy) and 28 (s_yx) bits, which do not depend on the width they were computed in",
        ("Fp32Accumulate.elaborate", 'Mux(v["sub"], x - y, x + y)[:29]', 'Mux(v["sub"], x - y, x + y)[:30]'):
            "x and y are 28-bit signed, so x - y and x + y have 29 bits: [:30] is cut at the width, the "
            "same 29 bits",
        ("Fp32Accumulate.elaborate", 'v["s_xy"][:28]', 'v["s_xy"][:29]'):
            "the Mux is assigned to sum_mag, a 28-bit wire: bit 28 of s_xy is dropped there either way",
        ("Fp32Accumulate.elaborate", '(v["mag"] << v["sh"])[:28]', '(v["mag"] << v["sh"])[:29]'):
            "assigned to norm, a 28-bit wire: bit 28 is dropped there either way",
        ("Fp32Accumulate.elaborate", "packed[23:35]", "packed[23:34]"):
            "packed = r_be1 * 2**23 + sig + round_up with r_be1 10-bit signed and 0 <= sig + round_up <= "
            "2**24, so packed >> 23 lies in -512..513 and fits 11 signed bits: bit 34 equals bit 33, and "
            "packed[23:34].as_signed() is the same number as packed[23:35].as_signed()",
    },
    "rtl/mx/dot_product.py": {
        ("condition_operand", "2 * mapping.dsp_pairs", "3 * mapping.dsp_pairs"):
            "halves gets dsp_pairs more elements, but only elements 0 .. 2*dsp_pairs-1 are driven and "
            "read (the loops have their own range(2 * mapping.dsp_pairs)); the extra ones are unused",
        ("DotProduct.elaborate", "signed(30)", "signed(31)"):
            "the product of two 15-bit signed operands fits 30 bits; a 31-bit signal holds the same "
            "value and bits 9..19, the only ones read, are the same",
        ("DotProduct.elaborate", "len(leaves) + mapping.lut_elements - 1",
         "len(leaves) + mapping.lut_elements - 2"):
            "spare one lower only makes one more LUT product enter the tree negated outright (Mux(sign, "
            "-magnitude, magnitude), signed 9 bits like the one's-complement leaf) instead of as its one's "
            "complement with a +1 carry: the same integer, so the same exact sum; carries left over are "
            "still added (none are: there are fewer)",
        ("DotProduct.elaborate", "Const(0, 1)", "Const(0, 2)"):
            "the sampled mutant widens the zero extension of a scale in exp (line 205): Cat(sa, 0) and "
            "Cat(sa, 0, 0) are the same non-negative number, so the sum is the same integer and its low "
            "9 bits ([:9]) are the same",
        ("DotProduct.elaborate", "range(1, 6)", "range(0, 6)"):
            "one more adder level at the front: the tree sums the same leaves and carries exactly (every "
            "adder is one bit wider than its operands, leftover carries are added at the root), and the "
            "registers still follow levels 2, 4 and 5, so the value and the latency are the same; 32 leaves "
            "need five levels, the sixth finds one operand and passes it on",
    },
    "rtl/kv/secded_decoder.py": {
        ("SecdedDecoder.elaborate", "flips.any() | check_error", "flips.any() ^ check_error"):
            "flips.any() means the syndrome equals a data column, check_error that it has weight one; every "
            "data column of a Hsiao code has odd weight >= 3 (sim_models.ecc.hsiao_columns), so the two "
            "are never both set and xor is or",
    },
    "rtl/kv/page_allocator.py": {
        ("_lowest_set", "Const(0, 0)", "Const(1, 0)"):
            "a constant of width 0 holds no bit: its value is truncated to 0 (the same zero-width index)",
        ("_lowest_set", "Const(1, 1)", "Const(1, 2)"):
            "the extra zero lands on bit `width` of the high-half index, which index[:width] drops",
        ("PageAllocator.elaborate",
         "~one_request | (port.alloc & ~port.alloc_ready) | (port.incref & (target_zero | target_max))",
         "~one_request | (port.alloc & ~port.alloc_ready) ^ (port.incref & (target_zero | target_max))"):
            "(^ binds tighter than |) the alloc and incref terms can both be 1 only with two requests, "
            "when ~one_request already makes bad 1; otherwise at most one is set and xor is or",
        ("PageAllocator.elaborate", "target_zero | target_max", "target_zero ^ target_max"):
            "both test the one addressed count, against 0 and against 2**count_width - 1 >= 1 "
            "(count_width >= 1): never both true, so xor is or",
    },
    "rtl/kv/layouts.py": {
        ("_bits", "max(1, (n - 1).bit_length())", "max(0, (n - 1).bit_length())"):
            "differs only for n = 1 (0 bits instead of 1): seqs = 1 or max_pages_per_seq = 1 (pages and "
            "bank depths are >= 2; table_depth follows index_width). The dropped bit is always 0: with one "
            "sequence only id 0 passes seq < seqs, and seq[:0] selects live bit and length 0 as seq[:1] "
            "does; "
            "with one page per sequence every block-table index used is 0 (positions below max_len = "
            "page_tokens, loop counters i < n <= 1, held in index_width + 1 >= 1 bits), so the table of half "
            "the depth loses only entries never addressed (the 'tiny' configuration of test_kv_cache.py runs "
            "both cases)",
        ("KvGeometry.bank_of", "Const(0, 1)", "Const(0, 0)"):
            "with one bank every use ignores the bank or shifts by it: bank_data returns ports[0], the "
            "engines use rd_bank/wr_bank and the bank compare only when bank_width != 0, and the copy's "
            "writing >> bank_of(...) shifts by 0 at any width",
        ("KvGeometry.bank_of", "Const(0, 1)", "Const(0, 2)"):
            "with one bank every use ignores the bank or shifts by it: bank_data returns ports[0], the "
            "engines use rd_bank/wr_bank and the bank compare only when bank_width != 0, and the copy's "
            "writing >> bank_of(...) shifts by 0 at any width",
        ("KvGeometry.bank_address", "self.slot_width > self.bank_width",
         "self.slot_width >= self.bank_width"):
            "when slot_width == bank_width, slot[bank_width:slot_width] is empty and Cat(empty, page) is "
            "page",
        ("KvGeometry.table_address", "Const(0, self.index_width)", "Const(1, self.index_width)"):
            "the padding shows only for an index narrower than index_width, and none is: the callers pass "
            "page_index of a position at least slot_width + index_width wide (len_width and length_width "
            "are, since max_len = max_pages_per_seq * page_tokens), or the loop registers (index_width and "
            "index_width + 1 bits)",
        ("KvGeometry.sequence", "live.bit_select(index, 1)", "live.bit_select(index, 2)"):
            "every user stores the live flag in a one-bit register (cur_live, arg_live in the command "
            "engine; a_live = seq_ok & live in the read engine): only bit 0, the sequence's own, is kept",
    },
    "rtl/kv/command_engine.py": {
        ("CommandEngine.elaborate", "max(1, g.slot_width)", "max(2, g.slot_width)"):
            "a wider copy slot register (copy_latch_slot or copy_store_slot): it holds a slot below "
            "page_tokens, the same value in either width, and every use slices its low bits (bank_of: "
            "[:bank_width], bank_address: [bank_width:slot_width])",
        ("CommandEngine.elaborate", "i < n", "i <= n"):
            "the loop then reads one block-table entry more, (c_seq, n), in the cycle after the last "
            "real read, and i ends at n + 1 (it fits index_width + 1 bits); nothing uses that read "
            "(acting, loop_acting and the exit test use their own i < n / i >= n, and every later table "
            "use reads again first), and it cannot collide with the fork's table write, which goes to "
            "dst != src",
    },
    "rtl/kv/read_engine.py": {
        ("ReadEngine.elaborate", "Signal(init=1)", "Signal(init=0)"):
            "has_room is assigned every cycle; its reset value is seen only in the first cycle after "
            "reset, when q_valid is 0 (reset too), so issue = q_valid & has_room is 0 either way",
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
