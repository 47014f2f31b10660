"""Formal properties of the KV-cache SECDED codec (:mod:`rtl.kv.secded_encoder`, ``secded_decoder``).

The claim: for every data word and every error pattern of at most two bits (data or check bits),
the decoder fed with the encoder's codeword XOR the errors returns the data with neither flag (no
error), the data with ``corrected`` (one error), or ``uncorrectable`` and not ``corrected`` (two
errors: detected, never miscorrected). The encoder and decoder are combinational, so one solver
step (``bmc`` at depth one) covers every input: each task is a complete proof, not a bounded one.

Proved end to end (the solver picks the word and the errors) for the (13,8) code. For the wider
codes the XOR algebra of a free 64-bit word is slow for the SMT solver, so the same claim is proved
in three parts, each for every input, whose conjunction implies it:

* ``*_spec``: the encoder's check bits are ``H_D · data``, and for *every* codeword (any number of
  errors) the decoder's outputs are the function of the syndrome ``s = H · codeword`` that
  :meth:`sim_models.ecc.SecdedCode.decode` defines (``s = 0``: data as stored; ``s`` = column ``i``:
  bit ``i`` flipped back, ``corrected``; ``s`` = a check column: ``corrected``, data as stored;
  otherwise ``uncorrectable``);
* ``*_errors``: the RTL pair with the all-zero word corrects every single and detects every double
  error, i.e. ``H · e`` is the column of the flipped bit for every single ``e`` and no column for
  every double ``e``;
* linearity of ``H`` (an identity of XOR, not of the design): ``H · (c ^ e) = H · c ^ H · e`` and
  ``H · encode(d) = 0``, so the syndrome, hence the decoder's action, depends on the errors only.

Proved for the default (72,64) code and the (22,16) and (13,8) codes of the small test
configurations. The cover task shows a corrected check-bit error and a detected double error.
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Module, Mux, Signal

from rtl.kv.secded_decoder import SecdedDecoder
from rtl.kv.secded_encoder import SecdedEncoder

from .proof import Proof, free


def _spec(k):
    """Encoder and decoder against the syndrome function, for every input."""
    m = Module()
    m.submodules.enc = enc = SecdedEncoder(k)
    m.submodules.dec = dec = SecdedDecoder(k)
    code = enc.code
    data = Signal(k)
    codeword = Signal(code.width)
    free(m, data, codeword)
    m.d.comb += [enc.data.eq(data), dec.codeword.eq(codeword)]
    m.d.comb += Assert(enc.codeword == Cat(data, *[(data & mask).xor() for mask in code.row_masks]))
    stored = codeword[:k]
    syndrome = Signal(code.check_bits)
    m.d.comb += syndrome.eq(Cat(*[(stored & mask).xor() for mask in code.row_masks]) ^ codeword[k:])
    with m.If(syndrome == 0):
        m.d.comb += Assert((dec.data == stored) & ~dec.corrected & ~dec.uncorrectable)
    for i, column in enumerate(code.columns):
        with m.If(syndrome == column):
            m.d.comb += Assert((dec.data == (stored ^ (1 << i))) & dec.corrected & ~dec.uncorrectable)
    check_columns = [1 << j for j in range(code.check_bits)]
    for column in check_columns:
        with m.If(syndrome == column):
            m.d.comb += Assert((dec.data == stored) & dec.corrected & ~dec.uncorrectable)
    known = [0, *code.columns, *check_columns]
    with m.If(Cat(*[syndrome == c for c in known]) == 0):
        m.d.comb += Assert(dec.uncorrectable & ~dec.corrected & (dec.data == stored))
    return m


def _harness(k, zero_data=False):
    m = Module()
    m.submodules.enc = enc = SecdedEncoder(k)
    m.submodules.dec = dec = SecdedDecoder(k)
    width = enc.code.width
    data = Signal(k)
    errors = Signal(2)
    first = Signal(width)                  # one-hot error positions (no barrel shifter to solve)
    second = Signal(width)
    free(m, errors, first, second)
    if not zero_data:
        free(m, data)

    def one_hot(v):
        return (v != 0) & ((v & (v - 1)) == 0)

    m.d.comb += Assume((errors <= 2) & one_hot(first) & one_hot(second) & (first != second))
    mask = Mux(errors == 0, 0, Mux(errors == 1, first, first | second))
    m.d.comb += [enc.data.eq(data), dec.codeword.eq(enc.codeword ^ mask)]
    check_bit = first[k:].any()
    data_bit = second[:k].any()

    with m.If(errors == 0):
        m.d.comb += Assert((dec.data == data) & ~dec.corrected & ~dec.uncorrectable)
    with m.If(errors == 1):
        m.d.comb += Assert((dec.data == data) & dec.corrected & ~dec.uncorrectable)
    with m.If(errors == 2):
        m.d.comb += Assert(dec.uncorrectable & ~dec.corrected)
    m.d.comb += [
        Cover((errors == 1) & check_bit & dec.corrected),
        Cover((errors == 2) & check_bit & data_bit & dec.uncorrectable),
    ]
    return m


PROOFS = [
    Proof("kv_ecc_13_8", lambda: _harness(8), mode="bmc", depth=1,
          description="(13,8) Hsiao code end to end: every single error corrected, every double detected"),
] + [
    proof
    for k, r in ((64, 8), (16, 6))
    for proof in (
        Proof(f"kv_ecc_{k + r}_{k}_spec", lambda k=k: _spec(k), mode="bmc", depth=1,
              description=f"({k + r},{k}): encoder = H_D, decoder = syndrome function, every input"),
        Proof(f"kv_ecc_{k + r}_{k}_errors", lambda k=k: _harness(k, zero_data=True), mode="bmc", depth=1,
              description=f"({k + r},{k}): every single error corrected, every double detected"),
    )
] + [
    Proof("kv_ecc_cover", lambda: _harness(64), mode="cover", depth=1,
          description="reachability: a corrected check-bit error and a detected double error"),
]
