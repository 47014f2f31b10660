"""Formal properties of :class:`rtl.mx.quantizer.MXQuantizer`.

* ``o`` obeys the stream rules: once valid, it stays valid with a stable payload until accepted
  (proved by induction, for the FP32 instance and any input).
* Nothing is lost or duplicated: blocks accepted minus blocks delivered always equals the number of
  occupied pipeline stages (so at most LATENCY are in flight, and nothing is delivered that was not
  accepted), and the input is never stalled while the output is ready (full throughput).
* The datapath, stage function by stage function, against a reference written here straight from
  the contract of :func:`sim_models.mx.quantize` (full 31-bit magnitude maximum, exact leading-one
  position of subnormals, full-width alignment shift of each significand), for *every* input: the
  amax tree's keys are monotone in the magnitude, the scale from amax's key is the contract's scale,
  and the element rounding is the contract's element code for every binary32 value and scale. This
  checks the RTL's shortcuts (an amax tree over exponents only, a 5-bit rounding window) beyond the
  sampled inputs of the simulations, which check the composition of the stages.
* The same three lemmas for the general (any-format) datapath, for each element format: the
  normalised key is monotone in the magnitude, its scale is ``scale_code(amax, mode, format)`` and
  the normalise-subtract-round path gives ``encode_element(x, scale, format)`` for every binary32
  ``x`` and scale code, against references transcribed from those two contract functions.
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, Signal, signed

from rtl.mx.layouts import MXFormat
from rtl.mx.quantizer import (
    FORMATS,
    LATENCY,
    MXQuantizer,
    amax_key,
    format_constants,
    general_grid,
    general_grid_from_key,
    general_key,
    general_scale,
    larger_key,
    normalize,
    predecode,
    round_element,
    round_general,
    scale_from_key,
)
from sim_models import mx

from .proof import Proof, free, reset_at_start

_MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)


def _scale_code(m, amax_sig, shared):
    """The E8M0 code of ``scale_code``'s last step: 0xFF for NaN/Inf, 0 for zero, else the shared
    exponent clamped to ``[-127, 127]`` and biased by 127."""
    code = Signal(8, name="ref_scale")
    with m.If(amax_sig >= 0x7F80_0000):
        m.d.comb += code.eq(0xFF)
    with m.Elif(amax_sig == 0):
        m.d.comb += code.eq(0)
    with m.Elif(shared < -127):
        m.d.comb += code.eq(0)
    with m.Elif(shared > 127):
        m.d.comb += code.eq(254)
    with m.Else():
        m.d.comb += code.eq(shared + 127)
    return code


def reference_scale(m, amax, rceil):
    """E8M0 code for a block whose largest magnitude is the 31-bit ``amax``, from ``scale_code``."""
    amax_sig = Signal(31, name="ref_amax")
    m.d.comb += amax_sig.eq(amax)
    biased, frac = amax_sig[23:31], amax_sig[:23]
    # floor(log2(amax)): biased - 127 for normals, -149 + (leading-one position) for subnormals.
    lead = Signal(range(-1, 23), name="ref_subnormal_lead")
    m.d.comb += lead.eq(-1)
    for bit in range(23):
        with m.If(frac[bit]):
            m.d.comb += lead.eq(bit)
    log2 = Signal(range(-160, 160), name="ref_floor_log2")
    m.d.comb += log2.eq(Mux(biased == 0, lead - 149, biased - 127))
    # RCEIL: one more when the significand (normalised to [1, 2)) exceeds 1.5.
    lead_sig = Signal(24, name="ref_normalised")
    m.d.comb += lead_sig.eq(Mux(biased == 0, frac << (23 - lead)[:5], Cat(frac, 1)))
    above_1_5 = lead_sig > 0xC0_0000
    shared = Signal(range(-160, 160), name="ref_shared")
    m.d.comb += shared.eq(log2 - 2 + (rceil & above_1_5))
    return _scale_code(m, amax_sig, shared)


def reference_code(m, value, scale):
    """E2M1 code of one binary32 pattern at E8M0 ``scale``, transcribed from ``encode_element``."""
    biased, frac, sign = value[23:31], value[:23], value[31]
    sig = Cat(frac, biased != 0)                                   # 24 bits
    lsb = Mux(biased == 0, -149, biased - 150)
    # 4 * |x| / 2**shared = sig * 2**k, k = lsb - (scale - 127) + 2.
    k = Signal(range(-300, 300), name="ref_k")
    m.d.comb += k.eq(lsb - (scale - 127) + 2)
    whole = Signal(32, name="ref_whole")       # floor(4y), saturated (only comparisons up to 20 matter)
    exact = Signal(name="ref_exact")
    with m.If(k >= 5):
        m.d.comb += [whole.eq(Mux(sig != 0, 0xFFFF_FFFF, 0)), exact.eq(1)]
    with m.Elif(k >= 0):
        m.d.comb += [whole.eq(sig << k[:3]), exact.eq(1)]
    with m.Elif(k >= -31):
        right = Signal(5, name="ref_right")
        m.d.comb += right.eq(-k)
        m.d.comb += [whole.eq(sig >> right),
                     exact.eq((sig & ((Const(1, 32) << right) - 1)[:24]) == 0)]
    with m.Else():
        m.d.comb += [whole.eq(0), exact.eq(sig == 0)]
    magnitude = 0
    for index, t in enumerate(_MIDPOINT_QUARTERS):
        above = (whole > t) | ((whole == t) & (~exact | (index % 2 == 1)))
        magnitude = magnitude + above
    mag = Signal(3, name="ref_magnitude")
    m.d.comb += mag.eq(magnitude)
    code = Signal(4, name="ref_code")
    m.d.comb += code.eq(Mux(scale == 0xFF, 0, Cat(mag, sign)))
    return code


def _bit_length(m, value, width, name):
    """Position of the leading one of ``value`` plus one (0 for zero), by a priority chain."""
    length = Signal(range(width + 1), name=name)
    m.d.comb += length.eq(0)
    for bit in range(width):
        with m.If(value[bit]):
            m.d.comb += length.eq(bit + 1)
    return length


def reference_scale_format(m, amax, rceil, fmt):
    """``scale_code(amax, mode, fmt)`` for the 31-bit magnitude ``amax`` (transcribed from the model).

    ``shared = floor(log2(amax)) - emax``, plus one for RCEIL when the significand (normalised to
    ``[1, 2)``) exceeds the largest normal's; clamped to ``[-127, 127]``.
    """
    f = mx.element_format(fmt)
    low = (f.max_units & -f.max_units).bit_length() - 1
    top = f.max_units >> low
    top_frac = top.bit_length() - 1
    amax_sig = Signal(31, name="ref_amax")
    m.d.comb += amax_sig.eq(amax)
    biased, frac = amax_sig[23:31], amax_sig[:23]
    significand = Signal(24, name="ref_significand")
    m.d.comb += significand.eq(Mux(biased == 0, frac, Cat(frac, 1)))
    width = _bit_length(m, significand, 24, "ref_width")
    lsb = Mux(biased == 0, -149, biased - 150)
    shared = Signal(range(-200, 200), name="ref_shared")
    # RCEIL: significand * 2**top_frac > top * 2**(width - 1), as in scale_code.
    above = Signal(name="ref_above")
    m.d.comb += above.eq((significand << top_frac) > (Const(top, 8) << width)[1:])
    m.d.comb += shared.eq(lsb + width - 1 - f.emax + (rceil & above))
    return _scale_code(m, amax_sig, shared)


def reference_code_format(m, value, scale, fmt):
    """``encode_element(value, scale, fmt)`` (transcribed from the model, on the full significand).

    ``y = sig * 2**k``; ``e_y = k + bit_length(sig) - 1``; above ``emax`` saturate; otherwise round
    ``sig`` to nearest even at ``step = max(e_y, emin) - m`` and convert the units to a code.
    """
    f = mx.element_format(fmt)
    mb = f.mantissa_bits
    biased, frac, sign = value[23:31], value[:23], value[31]
    sig = Signal(24, name="ref_sig")
    m.d.comb += sig.eq(Mux(biased == 0, frac, Cat(frac, 1)))
    width = _bit_length(m, sig, 24, "ref_width")
    k = Signal(signed(12), name="ref_k")
    m.d.comb += k.eq(Mux(biased == 0, -149, biased - 150) - (scale - 127))
    e_y = Signal(signed(12), name="ref_e_y")
    m.d.comb += e_y.eq(k + width - 1)
    step = Signal(signed(12), name="ref_step")
    m.d.comb += step.eq(Mux(e_y > f.emin, e_y, f.emin) - mb)
    drop = Signal(signed(12), name="ref_drop")
    m.d.comb += drop.eq(step - k)
    n = Signal(26, name="ref_n")
    with m.If(drop <= 0):
        m.d.comb += n.eq(sig << (-drop)[:3])                # only when sig has at most m + 1 bits
    with m.Elif(drop > 25):
        m.d.comb += n.eq(0)
    with m.Else():
        d = drop[:5]
        kept = sig >> d
        rest = sig & ((Const(1, 26) << d) - 1)
        half = (Const(1, 27) << d)[1:]
        m.d.comb += n.eq(kept + ((rest > half) | ((rest == half) & kept[0])))
    units = Signal(40, name="ref_units")
    m.d.comb += units.eq(n << (step + mb - f.emin)[:5])
    sat = Signal(40, name="ref_sat")
    m.d.comb += sat.eq(Mux((e_y > f.emax) | (units > f.max_units), f.max_units, units))
    sat_width = _bit_length(m, sat, 40, "ref_sat_width")
    magnitude = Signal(8, name="ref_magnitude")
    with m.If(sat < (1 << (mb + 1))):
        m.d.comb += magnitude.eq(sat)
    with m.Else():
        e_field = Signal(6, name="ref_e_field")        # at least 1 here
        m.d.comb += e_field.eq(sat_width - mb)
        m.d.comb += magnitude.eq((e_field << mb) | ((sat >> (e_field - 1)[:6]) - (1 << mb))[:mb])
    code = Signal(8, name="ref_code_format")
    m.d.comb += code.eq(Mux(scale == 0xFF, 0, Mux(sig == 0, 0, magnitude) | (sign << (f.bits - 1))))
    return code


def _pipeline_harness(cover=False, formats=("e2m1",)):
    m = Module()
    m.submodules.dut = dut = MXQuantizer("fp32", formats)
    started = reset_at_start(m)
    # The cover task leaves the payload at zero (a constant folds the datapath away): it is about
    # the pipeline's occupancy only.
    free(m, dut.i.valid, dut.o.ready)
    if not cover:
        free(m, dut.i.payload.as_value())
    width = len(dut.i.payload.as_value())

    # Environment: the producer keeps valid and payload stable while stalled.
    held_valid = Signal()
    held_payload = Signal(width)
    m.d.sync += [held_valid.eq(dut.i.valid & ~dut.i.ready), held_payload.eq(dut.i.payload.as_value())]
    with m.If(started & held_valid):
        m.d.comb += Assume(dut.i.valid & (dut.i.payload.as_value() == held_payload))

    # The design's promise on o.
    out_width = len(dut.o.payload.as_value())
    stalled = Signal()
    stalled_payload = Signal(out_width)
    m.d.sync += [stalled.eq(dut.o.valid & ~dut.o.ready), stalled_payload.eq(dut.o.payload.as_value())]
    with m.If(started & stalled):
        m.d.comb += Assert(dut.o.valid & (dut.o.payload.as_value() == stalled_payload))

    accepted = Signal(8)
    delivered = Signal(8)
    o_fire = dut.o.valid & dut.o.ready
    with m.If(dut.i.valid & dut.i.ready):
        m.d.sync += accepted.eq(accepted + 1)
    with m.If(o_fire):
        m.d.sync += delivered.eq(delivered + 1)
    held = Signal(range(LATENCY + 1))
    m.d.comb += held.eq(sum(dut.stage_valid))
    with m.If(started):
        m.d.comb += Assert((accepted - delivered)[:8] == held)
        m.d.comb += Assert(dut.o.valid == dut.stage_valid[-1])
        with m.If(dut.o.ready):
            m.d.comb += Assert(dut.i.ready)

    if cover:
        # The pipeline fills completely behind a stalled output, then drains with the input idle.
        full = Signal()
        with m.If(started & (held == LATENCY) & ~dut.o.ready):
            m.d.sync += full.eq(1)
        m.d.comb += Cover(started & full & o_fire & ~dut.i.valid & (delivered == LATENCY - 1))
    return m


def _key_lemma():
    """The amax tree over keys finds the key of amax: keys are monotone in the magnitude."""
    m = Module()
    a, b = AnyConst(32), AnyConst(32)
    key_a = amax_key(m, predecode(m, a, name="a"), name="key_a")
    key_b = amax_key(m, predecode(m, b, name="b"), name="key_b")
    larger = larger_key(m, key_a, key_b, name="larger")
    key_max = amax_key(m, predecode(m, Mux(a[:31] >= b[:31], a, b), name="max"), name="key_max")
    with m.If(a[:31] >= b[:31]):
        m.d.comb += Assert(key_a.as_value() >= key_b.as_value())
    m.d.comb += Assert(larger.as_value() == key_max.as_value())
    return m


def _scale_lemma():
    """The scale from amax's key equals the contract's scale of amax, for every amax and mode."""
    m = Module()
    amax, rceil = AnyConst(31), AnyConst(1)
    got = scale_from_key(m, amax_key(m, predecode(m, Cat(amax, 0))), rceil)
    m.d.comb += Assert(got == reference_scale(m, amax, rceil))
    return m


def _element_lemma():
    """Element rounding equals the contract's, for every binary32 element and every scale code."""
    m = Module()
    x, scale = AnyConst(32), AnyConst(8)
    m.d.comb += Assume((x[23:31] != 0xFF) | (scale == 0xFF))  # a NaN/Inf element means scale 0xFF
    got = round_element(m, predecode(m, x), scale)
    m.d.comb += Assert(got == reference_code(m, x, scale))
    return m


def _general_key_lemma():
    """General datapath: keys are monotone in |x| (all thresholds), so the tree finds amax's key."""
    m = Module()
    a, b = AnyConst(32), AnyConst(32)
    shift = 1 - min(format_constants(f).emin for f in FORMATS)
    key_a = general_key(m, normalize(m, a, shift, name="a"), name="key_a")
    key_b = general_key(m, normalize(m, b, shift, name="b"), name="key_b")
    with m.If(a[:31] >= b[:31]):
        m.d.comb += Assert(key_a.as_value() >= key_b.as_value())
    return m


def _general_scale_lemma(fmt):
    def build():
        m = Module()
        amax, rceil = AnyConst(31), AnyConst(1)
        shift = 1 - min(format_constants(f).emin for f in FORMATS)
        key = general_key(m, normalize(m, Cat(amax, 0), shift))
        code = Const(MXFormat[fmt.upper()].value, 3)
        got = general_scale(m, key, rceil, code, FORMATS)
        m.d.comb += Assert(got == reference_scale_format(m, amax, rceil, fmt))
        # The pipeline forms the block's grid from the key, beside the scale: the same grid (for a
        # NaN scale only the flag matters; the alignment ignores the rest).
        from_key = general_grid_from_key(m, key, rceil, code, FORMATS)
        from_scale = general_grid(m, got, code, FORMATS)
        m.d.comb += Assert(from_key.nan == from_scale.nan)
        with m.If(~from_scale.nan):
            m.d.comb += Assert((from_key.base == from_scale.base) & (from_key.ceiling == from_scale.ceiling))
        return m
    return build


def _general_element_lemma(fmt):
    def build():
        m = Module()
        x, scale = AnyConst(32), AnyConst(8)
        m.d.comb += Assume((x[23:31] != 0xFF) | (scale == 0xFF))
        shift = 1 - min(format_constants(f).emin for f in FORMATS)
        got = round_general(m, normalize(m, x, shift), scale, Const(MXFormat[fmt.upper()].value, 3), FORMATS)
        m.d.comb += Assert(got == reference_code_format(m, x, scale, fmt))
        return m
    return build


PROOFS = [
    Proof("mx_quantizer_protocol", lambda: _pipeline_harness(), mode="prove", depth=LATENCY + 2,
          description="stream rules on o; accepted - delivered == stages held; full throughput"),
    Proof("mx_quantizer_protocol_all_formats", lambda: _pipeline_harness(formats=FORMATS), mode="prove",
          depth=LATENCY + 2,
          description="the same for the all-formats instance (its format field rides the pipeline)"),
    Proof("mx_quantizer_key_lemma", _key_lemma, mode="bmc", depth=1,
          description="amax-tree keys are monotone in |x|: max of keys == key of amax"),
    Proof("mx_quantizer_scale_lemma", _scale_lemma, mode="bmc", depth=1,
          description="E8M0 scale from the amax key == the contract's scale_code, every amax, both modes"),
    Proof("mx_quantizer_element_lemma", _element_lemma, mode="bmc", depth=1,
          description="E2M1 rounding == the contract's encode_element, every binary32 x and scale"),
    Proof("mx_quantizer_general_key_lemma", _general_key_lemma, mode="bmc", depth=1,
          description="general datapath: normalised amax keys are monotone in |x|"),
    *[Proof(f"mx_quantizer_scale_lemma_{fmt}", _general_scale_lemma(fmt), mode="bmc", depth=1,
            description=f"general datapath: scale == the contract's scale_code(..., format={fmt!r}), "
                        f"every amax, both modes; the grid from the key == the grid from that scale")
      for fmt in FORMATS],
    *[Proof(f"mx_quantizer_element_lemma_{fmt}", _general_element_lemma(fmt), mode="bmc", depth=1,
            description=f"general datapath: rounding == the contract's encode_element(..., format={fmt!r}), "
                        f"every binary32 x and scale")
      for fmt in FORMATS],
    Proof("mx_quantizer_cover", lambda: _pipeline_harness(cover=True), mode="cover", depth=2 * LATENCY + 4,
          description="reachability: a full pipeline behind a stalled output drains with the input idle"),
]
