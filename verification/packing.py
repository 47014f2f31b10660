"""Pack and unpack ``amaranth.lib.data`` layouts to and from plain integers.

``StructLayout`` puts its first field in the least significant bits; ``ArrayLayout`` puts element 0
there. Testbenches, golden-model adapters and the CLI all go through these two functions, so the
bit layout is written down once: in the RTL's own layout object.
"""

from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["pack", "unpack", "width"]


def width(layout):
    """Width in bits of a layout or shape."""
    if isinstance(layout, data.Layout):
        return layout.size
    return Shape.cast(layout).width


def pack(layout, value):
    """Pack ``value`` into an integer laid out as ``layout``.

    ``value`` is an ``int`` (taken as already packed, range-checked), a ``dict`` for struct layouts, or a
    sequence for array layouts; nested layouts nest the same way. Signed fields accept negative ints.
    Missing struct fields are zero.
    """
    if isinstance(layout, data.ArrayLayout) and not isinstance(value, int):
        if len(value) != layout.length:
            raise ValueError(f"array layout wants {layout.length} elements, got {len(value)}")
        elem_width = width(layout.elem_shape)
        out = 0
        for index, elem in enumerate(value):
            out |= pack(layout.elem_shape, elem) << (index * elem_width)
        return out
    if isinstance(layout, data.Layout) and not isinstance(layout, data.ArrayLayout) \
            and isinstance(value, dict):
        names = {name for name, _ in layout}
        unknown = set(value) - names
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}; layout has {sorted(names)}")
        out = 0
        for name, field in layout:
            if name in value:
                out |= pack(field.shape, value[name]) << field.offset
        return out
    bits = width(layout)
    value = int(value)
    if value < 0:
        if isinstance(layout, data.Layout) or not Shape.cast(layout).signed:
            raise ValueError(f"negative value {value} for an unsigned {bits}-bit field")
        if value < -(1 << (bits - 1)):
            raise ValueError(f"value {value} does not fit a signed {bits}-bit field")
        value += 1 << bits
    elif value >> bits:
        raise ValueError(f"value {value:#x} does not fit {bits} bits")
    return value


def unpack(layout, value):
    """Inverse of :func:`pack`: an ``int`` becomes a dict (struct), list (array) or int (shape)."""
    value = int(value)
    if isinstance(layout, data.ArrayLayout):
        elem_width = width(layout.elem_shape)
        mask = (1 << elem_width) - 1
        return [unpack(layout.elem_shape, (value >> (i * elem_width)) & mask)
                for i in range(layout.length)]
    if isinstance(layout, data.Layout):
        out = {}
        for name, field in layout:
            out[name] = unpack(field.shape, (value >> field.offset) & ((1 << field.width) - 1))
        return out
    shape = Shape.cast(layout)
    value &= (1 << shape.width) - 1
    if shape.signed and value >> (shape.width - 1):
        value -= 1 << shape.width
    return value
