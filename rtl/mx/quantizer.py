"""Hardware MX quantizer: 32 FP32 or BF16 values in, one MXFP4 block (32 E2M1 codes + E8M0 scale) out."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.mx.layouts import BLOCK_SIZE, MXBlock

__all__ = ["MXQuantizer", "QuantizeMode", "INPUT_FORMATS", "LATENCY", "quantizer_input_layout",
           "ELEMENT", "AMAX_KEY", "ALIGNED", "predecode", "amax_key", "larger_key", "scale_from_key",
           "SCALE_WINDOW", "scale_window", "align_element", "encode_aligned", "round_element"]

LATENCY = 6
"""Cycles from the input transfer to the output becoming valid (with no backpressure)."""

INPUT_FORMATS = {"fp32": 32, "bf16": 16}
"""Input element formats (an elaboration parameter) and their widths in bits."""

# Rounding to E2M1 compares 4 * |x| / 2**shared with the midpoints between neighbouring E2M1
# magnitudes, which are integers in quarters: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5. Crossing midpoint i
# moves from magnitude code i to i + 1; on a tie the even code wins, so ties go up exactly when i is odd.
_MIDPOINT_QUARTERS = (1, 3, 5, 7, 10, 14, 20)


class QuantizeMode(enum.Enum, shape=1):
    """Shared-exponent rule, chosen per block (the ``mode`` field of the input payload).

    ``FLOOR``: ``shared = floor(log2(amax)) - 2`` (OCP MX v1.0 section 6.3). ``RCEIL``: the smallest
    ``shared`` with ``amax / 2**shared <= 6``. Both are clamped to ``[-127, 127]``.
    """
    FLOOR = 0
    RCEIL = 1


def quantizer_input_layout(input_format="fp32"):
    """Payload layout of the quantizer's input stream for ``input_format`` (``"fp32"``/``"bf16"``).

    ``values`` (first field, least significant bits) holds the 32 elements as raw IEEE bit patterns,
    element 0 in the lowest bits; ``mode`` (a :class:`QuantizeMode`) sits above them.
    """
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
    return data.StructLayout({
        "values": data.ArrayLayout(INPUT_FORMATS[input_format], BLOCK_SIZE),
        "mode": QuantizeMode,
    })


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
    """One node of the amax tree: the larger of two :data:`AMAX_KEY` values."""
    larger = Signal(AMAX_KEY, name=name)
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


class MXQuantizer(wiring.Component):
    """Quantizes blocks of 32 FP32 (or BF16) values to MXFP4, one block per cycle.

    Bit-exact to :func:`sim_models.mx.quantize`: the E8M0 scale is ``clamp(floor(log2(amax)) - 2,
    -127, 127) + 127`` (FLOOR) or the smallest exponent with ``amax / 2**shared <= 6``, clamped the
    same way (RCEIL), computed from the float bits; each element ``x / 2**shared`` is rounded to the
    nearest E2M1 value, ties to even, saturating at ±6, keeping its sign (``-0`` and negatives that
    round to zero give ``0x8``); subnormal inputs are exact. A block holding a NaN or ±Inf gives scale
    ``0xFF`` and all codes 0; an all-zero block gives scale ``0x00``. See ``docs/mx_tensor_core.md``.

    Parameters
    ----------
    input_format : {"fp32", "bf16"}
        Element format of the input, fixed per instance. BF16 values are binary32 values with 16 zero
        fraction bits, so a BF16 instance is the FP32 datapath with those bits tied off (and half the
        input wires).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(quantizer_input_layout(input_format)))``
        Input blocks: ``values`` (32 raw bit patterns, element 0 in the least significant bits) and
        ``mode`` (:class:`QuantizeMode`, per block). ``i.ready`` depends combinationally on
        ``o.ready`` (through six stage-occupancy gates), never on ``i.valid``.
    o : ``Out(stream.Signature(rtl.mx.layouts.MXBlock))``
        Output blocks: 32 E2M1 codes and the E8M0 scale. ``o.valid`` and ``o.payload`` are register
        outputs.

    Latency and throughput
    ----------------------
    Six stages (element pre-decode; amax tree levels 1-2; levels 3-4; level 5 and the scale;
    per-element alignment to the scale; per-element rounding), so a block accepted on one clock edge
    is valid on ``o`` after the sixth edge (:data:`LATENCY` = 6). One block per cycle sustained. Each
    stage holds its block while the stage after it is occupied and stalled, and an empty stage fills
    even then, so bubbles are squeezed out under backpressure; up to six blocks are in flight. Order
    is preserved and nothing is lost or duplicated; while ``o`` is stalled its payload is stable.
    """

    def __init__(self, input_format="fp32"):
        if not isinstance(input_format, str) or input_format not in INPUT_FORMATS:
            raise parameter_error(self, ValueError, f"input_format must be one of "
                                  f"{', '.join(INPUT_FORMATS)}, got {input_format!r}")
        self._input_format = input_format
        self._stage_valid = [Signal(name=f"s{k + 1}_valid") for k in range(LATENCY)]
        super().__init__({
            "i": In(stream.Signature(quantizer_input_layout(input_format))),
            "o": Out(stream.Signature(MXBlock)),
        })

    @property
    def input_format(self):
        return self._input_format

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

        # ---- Stage 1: pre-decode each element to sign, exponent, top significand bits, sticky. ----
        pad = 32 - INPUT_FORMATS[self._input_format]
        s1 = Signal(data.ArrayLayout(ELEMENT, n), name="s1_elements")
        s1_mode = Signal(QuantizeMode, name="s1_mode")
        with m.If(load[0]):
            m.d.sync += s1_mode.eq(self.i.payload.mode)
            for j in range(n):
                raw = self.i.payload.values[j]
                bits = Cat(Const(0, pad), raw) if pad else raw
                m.d.sync += s1[j].eq(predecode(m, bits, name=f"s0_element{j}"))

        # ---- Stages 2-4: amax tree, two levels per stage (32 -> 8 -> 2), then the last level and
        # the E8M0 scale. The elements ride along unchanged. ----
        def tree(keys, levels, stage):
            for level in range(levels):
                keys = [larger_key(m, a, b, name=f"s{stage}_max{level}_{j}")
                        for j, (a, b) in enumerate(zip(keys[0::2], keys[1::2], strict=True))]
            return keys

        keys = [amax_key(m, s1[j], name=f"s1_key{j}") for j in range(n)]
        elements, mode = s1, s1_mode
        for stage, levels in ((2, 2), (3, 2)):
            reduced = tree(keys, levels, stage - 1)
            keys = [Signal(AMAX_KEY, name=f"s{stage}_key{j}") for j in range(len(reduced))]
            staged = Signal.like(s1, name=f"s{stage}_elements")
            staged_mode = Signal(QuantizeMode, name=f"s{stage}_mode")
            with m.If(load[stage - 1]):
                m.d.sync += [staged.eq(elements), staged_mode.eq(mode)]
                m.d.sync += [reg.eq(key) for reg, key in zip(keys, reduced, strict=True)]
            elements, mode = staged, staged_mode

        # The last level compares the two keys while the scale and window of each are formed, then
        # picks one: the scale is monotone in the key, so the larger key's scale is the block's.
        rceil = mode == QuantizeMode.RCEIL
        candidates = []
        for j, key in enumerate(keys):
            scale = scale_from_key(m, key, rceil, name=f"s3_scale{j}")
            candidates.append((scale, scale_window(m, scale, name=f"s3_window{j}")))
        first = keys[0].as_value() >= keys[1].as_value()
        s4 = Signal.like(s1, name="s4_elements")
        s4_scale = Signal(8, name="s4_scale")
        s4_window = Signal(SCALE_WINDOW, name="s4_window")
        with m.If(load[3]):
            m.d.sync += [
                s4.eq(elements),
                s4_scale.eq(Mux(first, candidates[0][0], candidates[1][0])),
                s4_window.eq(Mux(first, candidates[0][1].as_value(), candidates[1][1].as_value())),
            ]

        # ---- Stage 5: align each element to the block scale. ----
        s5 = Signal(data.ArrayLayout(ALIGNED, n), name="s5_elements")
        s5_scale = Signal(8, name="s5_scale")
        with m.If(load[4]):
            m.d.sync += s5_scale.eq(s4_scale)
            for j in range(n):
                m.d.sync += s5[j].eq(align_element(m, s4[j], s4_window, name=f"s4_aligned{j}"))

        # ---- Stage 6: round each aligned element to its E2M1 code. ----
        with m.If(load[5]):
            m.d.sync += self.o.payload.scale.eq(s5_scale)
            for j in range(n):
                m.d.sync += self.o.payload.codes[j].eq(encode_aligned(m, s5[j], name=f"s5_code{j}"))
        return m
