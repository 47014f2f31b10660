"""Hardware MX quantizer: 32 FP32 or BF16 values in, one MX block (32 element codes + E8M0 scale) out.

Two datapaths share the pipeline and its flow control. An instance built for E2M1 alone uses the
E2M1 window datapath (:func:`predecode` .. :func:`encode_aligned`): elements are compared with the
five exponents around the scale, so no per-element subtraction or normalisation is needed. An
instance built for any other format set uses the general datapath (:func:`normalize` ..
:func:`encode_general`): binary32 subnormals are normalised on entry, each element's exponent is
subtracted from the block's, and the element is rounded on the format's grid chosen per block.
"""

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.layouts import BLOCK_SIZE, MXBlock, MXFormat
from sim_models import mx

__all__ = ["MXQuantizer", "QuantizeMode", "INPUT_FORMATS", "FORMATS", "LATENCY", "quantizer_input_layout",
           "quantizer_output_layout",
           "ELEMENT", "AMAX_KEY", "ALIGNED", "predecode", "amax_key", "larger_key", "scale_from_key",
           "SCALE_WINDOW", "scale_window", "align_element", "encode_aligned", "round_element",
           "FormatConstants", "format_constants", "RCEIL_THRESHOLDS", "NORMALIZED", "NORMALIZED_KEY", "GRID",
           "GENERAL_ALIGNED", "normalize", "general_key", "general_scale", "general_grid",
           "general_grid_from_key", "align_general", "encode_general", "round_general"]

LATENCY = 6
"""Cycles from the input transfer to the output becoming valid (with no backpressure)."""

INPUT_FORMATS = {"fp32": 32, "bf16": 16}
"""Input element formats (an elaboration parameter) and their widths in bits."""

FORMATS = mx.FORMATS
"""Output element formats an instance can support (the ``formats`` parameter chooses a subset)."""

# Rounding to E2M1 compares 4 * |x| / 2**shared with the midpoints between neighbouring E2M1
# magnitudes, which are integers in quarters: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5. Crossing midpoint i
# moves from magnitude code i to i + 1; on a tie the even code wins, so ties go up exactly when i is odd.
_MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)


class QuantizeMode(enum.Enum, shape=1):
    """Shared-exponent rule, chosen per block (the ``mode`` field of the input payload).

    ``FLOOR``: ``shared = floor(log2(amax)) - emax`` (OCP MX v1.0 section 6.3; ``emax`` is 2 for
    E2M1). ``RCEIL``: the smallest ``shared`` with ``amax / 2**shared <= max_normal`` (6 for E2M1).
    Both are clamped to ``[-127, 127]``.
    """
    FLOOR = 0
    RCEIL = 1


def _check_formats(formats):
    """``formats`` as a tuple of distinct names from :data:`FORMATS`, in :data:`FORMATS` order."""
    if isinstance(formats, str) or not isinstance(formats, tuple | list) or not formats \
            or not all(isinstance(f, str) for f in formats) or not set(formats) <= set(FORMATS) \
            or len(set(formats)) != len(formats):
        raise ValueError(f"formats must be a non-empty sequence of distinct names from "
                         f"{', '.join(FORMATS)}, got {formats!r}")
    return tuple(f for f in FORMATS if f in formats)


def quantizer_input_layout(input_format="fp32", formats=("e2m1",)):
    """Payload layout of the quantizer's input stream.

    ``values`` (first field, least significant bits) holds the 32 elements as raw IEEE bit patterns
    of ``input_format`` (``"fp32"``/``"bf16"``), element 0 in the lowest bits; ``mode`` (a
    :class:`QuantizeMode`) sits above them; an instance supporting more than one of ``formats`` has
    a ``format`` field (an :class:`rtl.mx.layouts.MXFormat`) above ``mode``. The default
    ``formats=("e2m1",)`` is the E2M1-only layout.
    """
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
    formats = _check_formats(formats)
    fields = {"values": data.ArrayLayout(INPUT_FORMATS[input_format], BLOCK_SIZE), "mode": QuantizeMode}
    if len(formats) > 1:
        fields["format"] = MXFormat
    return data.StructLayout(fields)


def quantizer_output_layout(formats=("e2m1",)):
    """Payload layout of the quantizer's output stream for the supported ``formats``.

    E2M1 alone: :data:`rtl.mx.layouts.MXBlock` (32 four-bit codes, then the scale), what the MAC
    array takes. Otherwise ``codes`` holds one code per byte (element 0 in bits 7..0, the format's
    sign bit at its own position: bit 3, 5 or 7; unused high bits zero), then ``scale``, then, when
    more than one format is supported, ``format``: the :class:`rtl.mx.layouts.MXFormat` the block was
    quantized to.
    """
    formats = _check_formats(formats)
    if formats == ("e2m1",):
        return MXBlock
    fields = {"codes": data.ArrayLayout(8, BLOCK_SIZE), "scale": 8}
    if len(formats) > 1:
        fields["format"] = MXFormat
    return data.StructLayout(fields)


# One element after the first stage: everything the rounding needs, 16 bits instead of 32.
ELEMENT = data.StructLayout({
    "sign": 1,
    "exp": 8,       # biased binary32 exponent field
    "top": 5,       # significand bits 23..19: the implicit bit (exp != 0) and fraction bits 22..19
    "sticky": 1,    # fraction bits 18..0 not all zero
    "gt15": 1,      # significand above 1.5 (fraction > 0x400000): RCEIL needs one more exponent
})
"""Pre-decoded element (:func:`predecode`), as held in the pipeline registers."""

AMAX_KEY = data.StructLayout({"gt15": 1, "exp": 8})
"""Key of the amax tree: the exponent field, then ``gt15`` (:func:`amax_key`).

Ordered as unsigned integers, the maximum key over a block is the key of amax itself: amax has the
largest exponent, and the largest fraction among the elements with that exponent, so it exceeds 1.5
exactly when any of them does. That is all the scale depends on (:func:`scale_from_key`).
"""


def predecode(m, bits, *, name="element"):
    """Stage 1 for one element: a :data:`ELEMENT` signal from a 32-bit binary32 pattern ``bits``."""
    element = Signal(ELEMENT, name=name)
    exp, frac = bits[23:31], bits[0:23]
    m.d.comb += [
        element.sign.eq(bits[31]),
        element.exp.eq(exp),
        element.top.eq(Cat(frac[19:23], exp.any())),
        element.sticky.eq(frac[0:19].any()),
        element.gt15.eq(frac[22] & frac[0:22].any()),
    ]
    return element


def amax_key(m, element, *, name="key"):
    """The :data:`AMAX_KEY` of a pre-decoded element."""
    key = Signal(AMAX_KEY, name=name)
    m.d.comb += [key.exp.eq(element.exp), key.gt15.eq(element.gt15)]
    return key


def larger_key(m, a, b, *, name=None):
    """One node of the amax tree: the larger of two keys (:data:`AMAX_KEY` or the general key)."""
    larger = Signal(a.shape(), name=name)
    m.d.comb += larger.eq(Mux(a.as_value() >= b.as_value(), a.as_value(), b.as_value()))
    return larger


def scale_from_key(m, key, rceil, *, name="scale"):
    """E8M0 code of a block from the :data:`AMAX_KEY` of its amax and the mode (``rceil`` a 1-bit value).

    A normal amax with exponent field ``e`` has ``floor(log2(amax)) = e - 127``, so ``shared = e - 129``
    (plus one for RCEIL when the significand exceeds 1.5) and the code is ``e - 2`` (``+ 1``), clamped at
    0. A subnormal or zero amax (``e = 0``) gives 0 after clamping too; the upper clamp never acts (at
    most 253). ``e = 255`` means a NaN or an infinity in the block: 0xFF.
    """
    biased = Signal(range(-2, 256), name=f"{name}_unclamped")
    m.d.comb += biased.eq(key.exp + (rceil & key.gt15) - 2)
    scale = Signal(8, name=name)
    with m.If(key.exp == 0xFF):
        m.d.comb += scale.eq(0xFF)
    with m.Elif(biased < 0):
        m.d.comb += scale.eq(0)
    with m.Else():
        m.d.comb += scale.eq(biased)
    return scale


ALIGNED = data.StructLayout({
    "whole": 5,     # floor(4 * |x| / 2**shared) when d is in [-2, 2]
    "inexact": 1,   # 4 * |x| / 2**shared is not an integer
    "small": 1,     # below the first midpoint (d <= -3) or a NaN scale: magnitude 0
    "large": 1,     # saturates (d >= 3): magnitude 7
    "sign": 1,      # the code's sign bit (cleared for a NaN scale)
})
"""An element aligned to its block scale (:func:`align_element`), as held between the rounding stages."""


SCALE_WINDOW = data.StructLayout({
    "exps": data.ArrayLayout(signed(10), 5),   # scale - 2 .. scale + 2
    "nan": 1,                                   # scale == 0xFF
})
"""The exponents a block's elements are compared with (:func:`scale_window`), computed once per
block and registered, so the per-element alignment needs no subtraction."""


def scale_window(m, scale, *, name="window"):
    """The :data:`SCALE_WINDOW` of E8M0 code ``scale``."""
    window = Signal(SCALE_WINDOW, name=name)
    m.d.comb += [window.exps[i].eq(scale + (i - 2)) for i in range(5)]
    m.d.comb += window.nan.eq(scale == 0xFF)
    return window


def align_element(m, element, window, *, name="aligned"):
    """Stage 5 for one element: an :data:`ALIGNED` signal against a block's :data:`SCALE_WINDOW`.

    With ``e' = max(exp, 1)`` and the 24-bit significand ``sig`` (implicit bit included, so subnormals
    need no normalisation), ``4 * |x| / 2**shared = sig * 2**(d - 21)`` with ``d = e' - scale``. Only
    ``d`` in ``[-2, 2]`` needs rounding: ``d >= 3`` always saturates (``4y >= 32 > 20``) and ``d <= -3``
    is below the first midpoint (``4y < 1``). Otherwise ``floor(4y) = top >> (2 - d)``, and the bits
    shifted out, with the sticky bit, say whether ``4y`` is an integer. ``d`` is never formed: ``e'``
    is compared with the window's five exponents ``scale - 2 .. scale + 2`` (equalities select the
    shift, the two ends decide ``small`` and ``large``).
    """
    exp = Signal(8, name=f"{name}_exp")
    m.d.comb += exp.eq(Cat(element.exp[0] | ~element.exp[1:].any(), element.exp[1:]))
    aligned = Signal(ALIGNED, name=name)
    whole, inexact = [], []
    for dd in range(-2, 3):
        shift = 2 - dd
        hit = exp == window.exps[dd + 2]
        whole.append(Mux(hit, element.top >> shift, 0))
        inexact.append(hit & (element.sticky | (element.top[:shift].any() if shift else 0)))
    nan = window.nan
    m.d.comb += [
        # At most one equality holds, so OR-ing the selected values is the multiplexer.
        aligned.whole.eq(whole[0] | whole[1] | whole[2] | whole[3] | whole[4]),
        aligned.inexact.eq(inexact[0] | inexact[1] | inexact[2] | inexact[3] | inexact[4]),
        aligned.small.eq(nan | (exp < window.exps[0])),
        aligned.large.eq(~nan & (exp > window.exps[4])),
        aligned.sign.eq(element.sign & ~nan),
    ]
    return aligned


def encode_aligned(m, aligned, *, name="code"):
    """Stage 6 for one element: the E2M1 code (4-bit signal) of an :data:`ALIGNED` element.

    ``whole`` and ``inexact`` are compared with the midpoints between neighbouring E2M1 magnitudes;
    ties go to the even code.
    """
    magnitude = Signal(3, name=f"{name}_magnitude")
    whole, inexact = aligned.whole, aligned.inexact
    with m.If(aligned.small):
        m.d.comb += magnitude.eq(0)
    with m.Elif(aligned.large):
        m.d.comb += magnitude.eq(7)
    with m.Else():
        above = []
        for index, t in enumerate(_MIDPOINT_QUARTERS):
            if index % 2:
                above.append(whole >= t)
            else:
                above.append((whole > t) | ((whole == t) & inexact))
        # The flags form a thermometer code (each implies the ones before it).
        with m.If(above[6]):
            m.d.comb += magnitude.eq(7)
        for index in reversed(range(6)):
            with m.Elif(above[index]):
                m.d.comb += magnitude.eq(index + 1)
    code = Signal(4, name=name)
    m.d.comb += code.eq(Cat(magnitude, aligned.sign))
    return code


def round_element(m, element, scale, *, name="code"):
    """Stages 5 and 6 together for one element: its E2M1 code at E8M0 code ``scale`` (combinational).

    Scale 0xFF gives code 0. See :func:`align_element` and :func:`encode_aligned`.
    """
    window = scale_window(m, scale, name=f"{name}_window")
    return encode_aligned(m, align_element(m, element, window, name=f"{name}_aligned"), name=name)


# ==================================================================================================
# General datapath (any set of formats): normalise, subtract, round on the format's grid
# ==================================================================================================

class FormatConstants:
    """The integers the general datapath needs about one element format (from :mod:`sim_models.mx`).

    ``mantissa_bits``; ``emin`` and ``emax`` (exponents of the smallest and largest normal);
    ``max_code``, the magnitude code of the largest normal (7, 0x1F, 0x1F, 0x7E, 0x7B); ``sign_bit``,
    the position of the code's sign bit; ``rceil_threshold``, the binary32 fraction field (23 bits)
    above which an amax significand exceeds the largest normal's (1.5, 1.875 or 1.75).
    """

    def __init__(self, name):
        fmt = mx.element_format(name)
        self.name = name
        self.mantissa_bits = fmt.mantissa_bits
        self.emin, self.emax = fmt.emin, fmt.emax
        self.max_code = int(np.argmax(fmt.units))
        self.sign_bit = fmt.bits - 1
        low = (fmt.max_units & -fmt.max_units).bit_length() - 1
        top = fmt.max_units >> low                        # largest normal's significand, odd integer
        self.rceil_threshold = (top << (23 - (top.bit_length() - 1))) - (1 << 23)


def format_constants(name):
    """:class:`FormatConstants` of the format ``name``."""
    return FormatConstants(name)


RCEIL_THRESHOLDS = tuple(sorted({format_constants(f).rceil_threshold for f in FORMATS}))
"""The distinct RCEIL thresholds (binary32 fraction fields of 1.5, 1.75 and 1.875), ascending."""

NORMALIZED = data.StructLayout({
    "sign": 1,
    "exp": signed(10),     # exponent of the leading one, biased as binary32 (below 1 for subnormals)
    "top": 5,              # the leading one and the four bits after it
    "sticky": 1,           # any bit below those
    "over": len(RCEIL_THRESHOLDS),   # fraction above each RCEIL threshold (a thermometer code)
})
"""An element of the general datapath (:func:`normalize`), as held in the pipeline registers."""


NORMALIZED_KEY = data.StructLayout({"over": len(RCEIL_THRESHOLDS), "exp": 8})
"""Key of the general amax tree (:func:`general_key`): ``over``, then the exponent (0 for subnormals
and zeros). As unsigned integers, keys order like the magnitudes as far as the scale can tell: the
exponent first, then the thermometer code ``over`` of the RCEIL thresholds the fraction exceeds."""


GRID = data.StructLayout({
    "base": signed(11),    # scale + emin(format): the exponent of the format's lowest normal
    "ceiling": signed(11), # scale + emax(format): the exponent of its largest normal
    "nan": 1,              # scale == 0xFF
})
"""What the general datapath's elements are aligned against, per block (:func:`general_grid`, or
:func:`general_grid_from_key` in the pipeline), so that each element needs one subtraction and one
comparison."""

GENERAL_ALIGNED = data.StructLayout({
    "kept": 4,             # the rounded-off value's integer part on the grid (implicit bit included)
    "guard": 1,            # the first bit below it
    "sticky": 1,           # any bit below that
    "exp": 5,              # max(0, element exponent - base): the code's exponent field minus one
    "large": 1,            # above the format's range: saturates
    "sign": 1,             # the code's sign (cleared for a NaN scale)
})
"""An element aligned to its block's grid (:func:`align_general`), between the rounding stages."""


def normalize(m, bits, max_shift, *, name="element"):
    """Stage 1 of the general datapath: a :data:`NORMALIZED` element from a binary32 pattern ``bits``.

    A normal value keeps its exponent field and significand. A subnormal one is shifted left until its
    leading one reaches the implicit position, by at most ``max_shift`` places (``1 - min(emin)`` of
    the supported formats, 15 with E5M2), its exponent counting down from 1: a subnormal whose leading
    one lies lower is below every format's normal range at every scale (``exp - scale < emin``), where
    the grid is absolute and the position of the leading one does not matter.
    """
    exp, frac = bits[23:31], bits[0:23]
    normal = exp.any()
    shift = Signal(range(max_shift + 1), name=f"{name}_shift")
    with m.If(normal):
        m.d.comb += shift.eq(0)
    with m.Else():
        m.d.comb += shift.eq(max_shift)
        for lz in reversed(range(max_shift)):          # the highest set bit wins (assigned last)
            with m.If(frac[22 - lz]):
                m.d.comb += shift.eq(lz + 1)
    shifted = Signal(24, name=f"{name}_shifted")
    m.d.comb += shifted.eq(Cat(frac, normal) << shift)
    element = Signal(NORMALIZED, name=name)
    m.d.comb += [
        element.sign.eq(bits[31]),
        element.exp.eq(Mux(normal, exp, 1 - shift)),
        element.top.eq(shifted[19:24]),
        element.sticky.eq(shifted[0:19].any()),
    ]
    for index, threshold in enumerate(RCEIL_THRESHOLDS):
        high = threshold >> 19                          # the thresholds' low 19 bits are zero
        m.d.comb += element.over[index].eq((frac[19:23] > high) | ((frac[19:23] == high) & frac[0:19].any()))
    return element


def general_key(m, element, *, name="key"):
    """The amax-tree key (:data:`NORMALIZED_KEY`) of a :data:`NORMALIZED` element."""
    key = Signal(NORMALIZED_KEY, name=name)
    m.d.comb += [key.exp.eq(Mux(element.exp > 0, element.exp[0:8], 0)), key.over.eq(element.over)]
    return key


def _format_switch(m, fmt, formats):
    """``m.Switch`` over the supported ``formats`` of the :class:`MXFormat` value ``fmt``.

    Yields each format's name inside its ``m.Case``; the first format takes ``m.Default()`` (the
    quantizer maps unsupported codes to it on entry, so no other code reaches here).
    """
    with m.Switch(fmt):
        for name in formats[1:]:
            with m.Case(MXFormat[name.upper()]):
                yield name
        with m.Default():
            yield formats[0]


def general_scale(m, key, rceil, fmt, formats, *, name="scale"):
    """E8M0 code of a block from the key of its amax, the mode and the block's format.

    As :func:`scale_from_key` with the format's ``emax`` for 2 and its RCEIL threshold for 1.5: the
    code is ``exp - emax`` (plus one for RCEIL above the threshold), clamped at 0; 0xFF for NaN/Inf.
    """
    scale = Signal(8, name=name)
    for fname in _format_switch(m, fmt, formats):
        const = format_constants(fname)
        over = key.over[RCEIL_THRESHOLDS.index(const.rceil_threshold)]
        biased = Signal(range(-16, 256), name=f"{name}_{fname}_unclamped")
        m.d.comb += biased.eq(key.exp + (rceil & over) - const.emax)
        m.d.comb += scale.eq(Mux(key.exp == 0xFF, 0xFF, Mux(biased < 0, 0, biased)))
    return scale


def general_grid(m, scale, fmt, formats, *, name="grid"):
    """The :data:`GRID` of E8M0 code ``scale`` (any code) for the block's format."""
    grid = Signal(GRID, name=name)
    for fname in _format_switch(m, fmt, formats):
        const = format_constants(fname)
        m.d.comb += [grid.base.eq(scale + const.emin), grid.ceiling.eq(scale + const.emax)]
    m.d.comb += grid.nan.eq(scale == 0xFF)
    return grid


def general_grid_from_key(m, key, rceil, fmt, formats, *, name="grid"):
    """The :data:`GRID` of the scale :func:`general_scale` gives for ``key``, formed beside it.

    ``scale + emin`` and ``scale + emax`` come from the key's exponent by additions of constants in
    parallel with the scale's own (the clamp at 0 selects ``emin`` and ``emax``), not after it.
    """
    grid = Signal(GRID, name=name)
    for fname in _format_switch(m, fmt, formats):
        const = format_constants(fname)
        over = key.over[RCEIL_THRESHOLDS.index(const.rceil_threshold)]
        step = rceil & over
        clamped = key.exp + step < const.emax                  # the scale clamps at 0
        m.d.comb += [
            grid.base.eq(Mux(clamped, const.emin, key.exp + step + (const.emin - const.emax))),
            grid.ceiling.eq(Mux(clamped, const.emax, key.exp + step)),
        ]
    m.d.comb += grid.nan.eq(key.exp == 0xFF)
    return grid


def align_general(m, element, grid, fmt, formats, *, name="aligned"):
    """Stage 5 of the general datapath: a :data:`GENERAL_ALIGNED` element against its block's grid.

    With ``t = exp - base`` (``base = scale + emin``), the element is ``top * 2**(t + emin - 4)`` in
    units of ``2**shared`` (``shared = scale - 127``): a code exponent field of ``t + 1`` when
    ``0 <= t <= emax - emin``, above the range (``large``) when ``t`` exceeds that, and on the
    subnormal grid when ``t < 0``, where ``top`` is shifted right by ``-t`` places first (six or more
    leave only the sticky bit). The grid's unit is then bit ``4 - mantissa_bits`` of the (shifted)
    ``top``.
    """
    t = Signal(signed(11), name=f"{name}_t")
    m.d.comb += t.eq(element.exp - grid.base)
    right = Signal(range(7), name=f"{name}_right")
    m.d.comb += right.eq(Mux(t >= 0, 0, Mux(t < -6, 6, -t)))
    wide = Signal(11, name=f"{name}_wide")
    m.d.comb += wide.eq(Cat(Const(0, 6), element.top) >> right)
    shifted, lost = wide[6:11], wide[0:6].any() | element.sticky
    aligned = Signal(GENERAL_ALIGNED, name=name)
    nan = grid.nan
    for fname in _format_switch(m, fmt, formats):
        const = format_constants(fname)
        unit = 4 - const.mantissa_bits
        m.d.comb += [
            aligned.kept.eq(Mux(nan, 0, shifted[unit:])),
            aligned.guard.eq(~nan & shifted[unit - 1]),
            aligned.sticky.eq(~nan & (lost | (shifted[:unit - 1].any() if unit > 1 else 0))),
        ]
    m.d.comb += [
        aligned.large.eq(~nan & (element.exp > grid.ceiling)),    # t > emax - emin
        aligned.exp.eq(Mux(nan | (t < 0), 0, t[0:5])),
        aligned.sign.eq(element.sign & ~nan),
    ]
    return aligned


def encode_general(m, aligned, fmt, formats, *, name="code"):
    """Stage 6 of the general datapath: the 8-bit code of a :data:`GENERAL_ALIGNED` element.

    ``kept`` is rounded to nearest, ties to even; the magnitude code is ``(exp << mantissa_bits) +
    rounded`` (a carry out of the mantissa moves to the next exponent, as codes order like values),
    saturated at the largest normal's code; the sign goes to the format's sign bit.
    """
    rounded = Signal(5, name=f"{name}_rounded")
    m.d.comb += rounded.eq(aligned.kept + (aligned.guard & (aligned.sticky | aligned.kept[0])))
    code = Signal(8, name=name)
    for fname in _format_switch(m, fmt, formats):
        const = format_constants(fname)
        magnitude = Signal(8, name=f"{name}_{fname}_magnitude")
        m.d.comb += magnitude.eq((aligned.exp << const.mantissa_bits) + rounded)
        saturate = aligned.large | (magnitude > const.max_code)
        m.d.comb += code.eq(Cat(Mux(saturate, const.max_code, magnitude)[:const.sign_bit], aligned.sign))
    return code


def round_general(m, element, scale, fmt, formats, *, name="code"):
    """Stages 5 and 6 of the general datapath for one element (combinational): its 8-bit code.

    See :func:`general_grid`, :func:`align_general` and :func:`encode_general`; scale 0xFF gives 0.
    """
    grid = general_grid(m, scale, fmt, formats, name=f"{name}_grid")
    aligned = align_general(m, element, grid, fmt, formats, name=f"{name}_aligned")
    return encode_general(m, aligned, fmt, formats, name=name)


class MXQuantizer(wiring.Component):
    """Quantizes blocks of 32 FP32 (or BF16) values to MX, one block per cycle, in a per-block format.

    Bit-exact to :func:`sim_models.mx.quantize` with the block's ``mode`` and ``format``: the E8M0
    scale is ``clamp(floor(log2(amax)) - emax, -127, 127) + 127`` (FLOOR) or the smallest exponent
    with ``amax / 2**shared <= max_normal``, clamped the same way (RCEIL), computed from the float
    bits, with ``emax`` and ``max_normal`` those of the format (2 and 6 for E2M1); each element
    ``x / 2**shared`` is rounded to the nearest value of the format, ties to even, saturating at the
    largest normal (never a NaN or Inf code), keeping its sign (``-0`` and negatives that round to
    zero give the negative-zero code); subnormal inputs are exact. A block holding a NaN or ±Inf
    gives scale ``0xFF`` and all codes 0; an all-zero block gives scale ``0x00``. See
    ``docs/mx_tensor_core.md``.

    Parameters
    ----------
    input_format : {"fp32", "bf16"}
        Element format of the input, fixed per instance. BF16 values are binary32 values with 16 zero
        fraction bits, so a BF16 instance is the FP32 datapath with those bits tied off (and half the
        input wires).
    formats : sequence of str
        Output element formats the instance supports, from :data:`FORMATS` (default: all five). An
        instance for ``("e2m1",)`` alone is the MXFP4 quantizer with the E2M1 window datapath,
        4-bit codes (:data:`rtl.mx.layouts.MXBlock`) and no ``format`` field.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(quantizer_input_layout(input_format, formats)))``
        Input blocks: ``values`` (32 raw bit patterns, element 0 in the least significant bits),
        ``mode`` (:class:`QuantizeMode`, per block) and, with more than one format, ``format``
        (:class:`rtl.mx.layouts.MXFormat`, per block; a code the instance does not support is taken
        as ``formats[0]``). ``i.ready`` depends combinationally on ``o.ready`` (through six
        stage-occupancy gates), never on ``i.valid``.
    o : ``Out(stream.Signature(quantizer_output_layout(formats)))``
        Output blocks: 32 element codes (four bits each for E2M1 alone, else one per byte), the E8M0
        scale and, with more than one format, the block's format. ``o.valid`` and ``o.payload`` are
        register outputs.

    Latency and throughput
    ----------------------
    Six stages (element pre-decode, or normalisation in the general datapath; amax tree levels 1-2;
    levels 3-4; level 5 and the scale; per-element alignment to the scale; per-element rounding), so
    a block accepted on one clock edge is valid on ``o`` after the sixth edge (:data:`LATENCY` = 6),
    whatever its format; consecutive blocks may have different formats and modes. One block per
    cycle sustained. Each stage holds its block while the stage after it is occupied and stalled,
    and an empty stage fills even then, so bubbles are squeezed out under backpressure; up to six
    blocks are in flight. Order is preserved and nothing is lost or duplicated; while ``o`` is
    stalled its payload is stable.
    """

    def __init__(self, input_format="fp32", formats=FORMATS):
        if not isinstance(input_format, str) or input_format not in INPUT_FORMATS:
            raise parameter_error(self, ValueError, f"input_format must be one of "
                                  f"{', '.join(INPUT_FORMATS)}, got {input_format!r}")
        try:
            formats = _check_formats(formats)
        except (TypeError, ValueError) as exc:
            raise parameter_error(self, ValueError, str(exc)) from None
        self._input_format = input_format
        self._formats = formats
        self._stage_valid = [Signal(name=f"s{k + 1}_valid") for k in range(LATENCY)]
        super().__init__({
            "i": In(stream.Signature(quantizer_input_layout(input_format, formats))),
            "o": Out(stream.Signature(quantizer_output_layout(formats))),
        })

    @property
    def input_format(self):
        return self._input_format

    @property
    def formats(self):
        """The supported output element formats, in :data:`FORMATS` order."""
        return self._formats

    @property
    def latency(self):
        return LATENCY

    @property
    def stage_valid(self):
        """The occupancy flag of each pipeline stage, first to last (for formal properties)."""
        return tuple(self._stage_valid)

    def elaborate(self, platform):
        m = Module()
        n = BLOCK_SIZE
        formats = self._formats
        e2m1_only = formats == ("e2m1",)
        multi = len(formats) > 1

        def element_logic(enable, build):
            """``build(j)`` for every element. The general datapath's logic is built outside the
            stage's load enable: built under it, its ``Switch`` and ``If`` statements would make the
            enable (the end of the ``o.ready`` chain) an input of every element's logic cone. The
            E2M1 window datapath is built under it, as it always was, so its netlist is unchanged."""
            if not e2m1_only:
                return [build(j) for j in range(n)]
            with m.If(enable):
                return [build(j) for j in range(n)]

        def carry(fmt, stage):
            """The block's format in stage ``stage``: a register loaded with ``load[stage - 1]``, or
            the constant format of a single-format instance (no register at all)."""
            if not multi:
                return fmt
            staged = Signal(MXFormat, name=f"s{stage}_format")
            with m.If(load[stage - 1]):
                m.d.sync += staged.eq(fmt)
            return staged

        # ---- Flow control: stage k loads when it is empty or its block moves on this cycle. ----
        valid = self._stage_valid
        load = [Signal(name=f"s{k + 1}_load") for k in range(LATENCY)]
        m.d.comb += load[-1].eq(~valid[-1] | self.o.ready)
        for k in reversed(range(LATENCY - 1)):
            m.d.comb += load[k].eq(~valid[k] | load[k + 1])
        m.d.comb += [self.i.ready.eq(load[0]), self.o.valid.eq(valid[-1])]
        with m.If(load[0]):
            m.d.sync += valid[0].eq(self.i.valid)
        for k in range(1, LATENCY):
            with m.If(load[k]):
                m.d.sync += valid[k].eq(valid[k - 1])

        # ---- Stage 1: pre-decode (E2M1 only) or normalise each element; take the block's format
        # (unsupported codes become formats[0]). ----
        if e2m1_only:
            element_layout, decode, key_of = ELEMENT, predecode, amax_key
            key_layout = AMAX_KEY
        else:
            max_shift = 1 - min(format_constants(f).emin for f in formats)
            element_layout, key_layout = NORMALIZED, NORMALIZED_KEY
            key_of = general_key

            def decode(m, bits, *, name):
                return normalize(m, bits, max_shift, name=name)
        pad = 32 - INPUT_FORMATS[self._input_format]
        s1 = Signal(data.ArrayLayout(element_layout, n), name="s1_elements")
        s1_mode = Signal(QuantizeMode, name="s1_mode")
        if multi:
            in_format = Signal(MXFormat, name="s0_format")
            for fname in _format_switch(m, self.i.payload.format, formats):
                m.d.comb += in_format.eq(MXFormat[fname.upper()])
            s1_format = carry(in_format, 1)
        else:
            s1_format = Const(MXFormat[formats[0].upper()].value, MXFormat.as_shape())

        def stage1(j):
            raw = self.i.payload.values[j]
            return decode(m, Cat(Const(0, pad), raw) if pad else raw, name=f"s0_element{j}")
        decoded = element_logic(load[0], stage1)
        with m.If(load[0]):
            m.d.sync += s1_mode.eq(self.i.payload.mode)
            m.d.sync += [s1[j].eq(decoded[j]) for j in range(n)]

        # ---- Stages 2-4: amax tree, two levels per stage (32 -> 8 -> 2), then the last level and
        # the E8M0 scale. The elements ride along unchanged. ----
        def tree(keys, levels, stage):
            for level in range(levels):
                keys = [larger_key(m, a, b, name=f"s{stage}_max{level}_{j}")
                        for j, (a, b) in enumerate(zip(keys[0::2], keys[1::2], strict=True))]
            return keys

        keys = [key_of(m, s1[j], name=f"s1_key{j}") for j in range(n)]
        elements, mode, fmt = s1, s1_mode, s1_format
        for stage, levels in ((2, 2), (3, 2)):
            reduced = tree(keys, levels, stage - 1)
            keys = [Signal(key_layout, name=f"s{stage}_key{j}") for j in range(len(reduced))]
            staged = Signal.like(s1, name=f"s{stage}_elements")
            staged_mode = Signal(QuantizeMode, name=f"s{stage}_mode")
            with m.If(load[stage - 1]):
                m.d.sync += [staged.eq(elements), staged_mode.eq(mode)]
                m.d.sync += [reg.eq(key) for reg, key in zip(keys, reduced, strict=True)]
            elements, mode, fmt = staged, staged_mode, carry(fmt, stage)

        # The last level compares the two keys while the scale and window of each are formed, then
        # picks one: the scale is monotone in the key, so the larger key's scale is the block's.
        rceil = mode == QuantizeMode.RCEIL
        candidates = []
        for j, key in enumerate(keys):
            if e2m1_only:
                scale = scale_from_key(m, key, rceil, name=f"s3_scale{j}")
                candidates.append((scale, scale_window(m, scale, name=f"s3_window{j}")))
            else:
                scale = general_scale(m, key, rceil, fmt, formats, name=f"s3_scale{j}")
                grid = general_grid_from_key(m, key, rceil, fmt, formats, name=f"s3_grid{j}")
                candidates.append((scale, grid))
        first = keys[0].as_value() >= keys[1].as_value()
        s4 = Signal.like(s1, name="s4_elements")
        s4_scale = Signal(8, name="s4_scale")
        s4_window = Signal(SCALE_WINDOW if e2m1_only else GRID, name="s4_window")
        s4_format = carry(fmt, 4)
        with m.If(load[3]):
            m.d.sync += [
                s4.eq(elements),
                s4_scale.eq(Mux(first, candidates[0][0], candidates[1][0])),
                s4_window.eq(Mux(first, candidates[0][1].as_value(), candidates[1][1].as_value())),
            ]

        # ---- Stage 5: align each element to the block scale. ----
        s5 = Signal(data.ArrayLayout(ALIGNED if e2m1_only else GENERAL_ALIGNED, n), name="s5_elements")
        s5_scale = Signal(8, name="s5_scale")
        s5_format = carry(s4_format, 5)

        def stage5(j):
            if e2m1_only:
                return align_element(m, s4[j], s4_window, name=f"s4_aligned{j}")
            return align_general(m, s4[j], s4_window, s4_format, formats, name=f"s4_aligned{j}")
        aligned = element_logic(load[4], stage5)
        with m.If(load[4]):
            m.d.sync += s5_scale.eq(s4_scale)
            m.d.sync += [s5[j].eq(aligned[j]) for j in range(n)]

        # ---- Stage 6: round each aligned element to its code. ----
        def stage6(j):
            if e2m1_only:
                return encode_aligned(m, s5[j], name=f"s5_code{j}")
            return encode_general(m, s5[j], s5_format, formats, name=f"s5_code{j}")
        codes = element_logic(load[5], stage6)
        with m.If(load[5]):
            m.d.sync += self.o.payload.scale.eq(s5_scale)
            if multi:
                m.d.sync += self.o.payload.format.eq(s5_format)
            m.d.sync += [self.o.payload.codes[j].eq(codes[j]) for j in range(n)]
        return m
