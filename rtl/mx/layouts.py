"""Layouts of the MXFP4 tensor core: the one definition of every MX payload.

``lib.data.StructLayout`` puts its first field in the least significant bits and ``ArrayLayout`` puts
element 0 there; testbenches, golden-model adapters and the CLI pack and unpack these layouts with
:mod:`verification.packing`, never by hand.
"""

from amaranth.hdl import signed
from amaranth.lib import data, enum

__all__ = ["BLOCK_SIZE", "E2M1", "E8M0", "FP32", "MXBlock", "MXFormat", "ScaledDot", "BlockDotRequest",
           "TileCommand", "a_beat", "b_beat", "c_beat", "result_beat", "row_lane"]

BLOCK_SIZE = 32
"""Elements per MX block (one shared E8M0 scale each)."""

E2M1 = 4
"""Width of one E2M1 element code (``S E1 E0 M``)."""

E8M0 = 8
"""Width of one E8M0 scale code (``2**(c - 127)``, ``0xFF`` is NaN)."""

FP32 = 32
"""Width of one IEEE 754 binary32 bit pattern."""


class MXFormat(enum.Enum, shape=3):
    """Element format of MX codes, as a hardware field (payloads, commands).

    The members are the OCP MX v1.0 element formats of :data:`sim_models.mx.FORMATS`, in that order;
    ``MXFormat[name.upper()]`` maps a format name to its field value. Codes 5..7 are not formats.
    """
    E2M1 = 0
    E2M3 = 1
    E3M2 = 2
    E4M3 = 3
    E5M2 = 4

MXBlock = data.StructLayout({
    "codes": data.ArrayLayout(E2M1, BLOCK_SIZE),
    "scale": E8M0,
})
"""One MX block: 32 E2M1 codes (element 0 in bits 3..0) then the E8M0 scale (bits 135..128)."""

ScaledDot = data.StructLayout({
    "dot": signed(14),
    "exp": signed(9),
    "nan": 1,
})
"""One block's term for the accumulator: ``dot * 2**(exp - 2)``.

``dot`` is the exact block dot product in quarters (``|dot| <= 4608``), ``exp`` the block exponent
``(sa - 127) + (sb - 127)`` (``-254..254``) and ``nan`` is set when either scale is 0xFF (``dot`` and
``exp`` are then meaningless).
"""

BlockDotRequest = data.StructLayout({
    "a": MXBlock,
    "b": MXBlock,
    "acc": FP32,
})
"""One request to :class:`rtl.mx.block_dot.BlockDot`: two blocks and the accumulator to add to."""

TileCommand = data.StructLayout({
    "blocks": 16,
    "has_c": 1,
})
"""One tile of :class:`rtl.mx.mac_array.MacArray`: ``blocks`` = K / 32 (at least 1; 0 acts as 1), and
whether the accumulators start from a supplied C tile (``has_c``) or from +0."""


def a_beat(rows):
    """A operand beat of a ``rows``-row array: one MX block per row (element ``r`` is row ``r``)."""
    return data.ArrayLayout(MXBlock, rows)


def b_beat(cols):
    """B operand beat of a ``cols``-column array: one MX block per column."""
    return data.ArrayLayout(MXBlock, cols)


def c_beat(rows, cols):
    """One binary32 value per processing element, ``[row][col]``: C tile and result beats."""
    return data.ArrayLayout(data.ArrayLayout(FP32, cols), rows)


def result_beat(rows, cols):
    """Result beat of the array: a ``[row][col]`` slice of the tile and the tile's last-beat flag."""
    return data.StructLayout({"data": c_beat(rows, cols), "last": 1})


def row_lane(cols, operand=MXBlock):
    """What travels along a row of the array, one processing element per cycle.

    ``a`` is the row's A block (in the ``operand`` layout of the product mapping); ``fields[c]``
    carries processing element ``c``'s initial accumulator in from the left and its result out to
    the right. ``valid``/``first``/``zero_init`` describe the beat (``first``: first block of a
    tile; ``zero_init``: start from +0, not from ``fields``); ``result``/``result_last`` mark a
    beat whose fields leave the row holding a tile's results.
    """
    return data.StructLayout({
        "valid": 1,
        "first": 1,
        "zero_init": 1,
        "result": 1,
        "result_last": 1,
        "a": operand,
        "fields": data.ArrayLayout(FP32, cols),
    })
