"""A block-RAM ring buffer for a writer that reserves room with credits."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.common.unchecked_read import NO_RW_CHECK, unchecked_read_port

__all__ = ["CreditedBuffer"]

RAM_STYLES = ("block", "distributed")


class CreditedBuffer(wiring.Component):
    """A ``depth``-entry FIFO whose write side has no ``ready``: the writer holds one credit per entry.

    A producer that already counts its free entries (a pipeline that reserves a result slot before
    it issues work) does not need the full/ready logic of a general FIFO, and on an FPGA that logic
    is what limits a wide FIFO: ``ready`` gates the write enable of every RAM cell. Here the write
    enable is ``w_en`` itself, so when the producer drives it from a register it fans out from that
    register alone. The storage is an :class:`amaranth.lib.memory.Memory`, mapped to block RAM by
    default, read synchronously: an asynchronous read port into an enabled register, ``o.payload``.

    The writer must start with ``depth`` credits, spend one for every ``w_en`` and regain one for
    every transfer on ``o``. Writing while all ``depth`` entries are occupied breaks that contract;
    ``overflow`` then rises and stays high (the data written is lost), so a test or an assertion can
    catch a producer that does not keep its count.

    Parameters
    ----------
    shape : shape-like or :class:`amaranth.lib.data.Layout`
        Entry shape.
    depth : int
        Entries (at least 1).
    ram_style : ``"block"`` or ``"distributed"``
        The synthesis hint for the storage (default ``"block"``).

    Interface attributes
    --------------------
    w_en : ``In(1)``
        Write ``w_data`` this cycle.
    w_data : ``In(shape)``
        Entry to write.
    o : ``Out(stream.Signature(shape))``
        Entries in write order. ``o.valid`` and ``o.payload`` are register outputs.
    overflow : ``Out(1)``
        Sticky: an entry was written while the buffer was full.

    Latency and throughput
    ----------------------
    An entry written in cycle ``t`` is valid on ``o`` in cycle ``t + 2`` at the earliest. One write
    and one read per cycle sustained: the credit of an entry written in cycle ``t`` is back for a
    write in ``t + 3`` at the earliest, so ``depth >= 3`` keeps a writer at full rate while ``o``
    is always ready (more if the writer's own credit loop is longer).
    """

    def __init__(self, shape, depth, *, ram_style="block"):
        check_positive_int(self, "depth", depth)
        if ram_style not in RAM_STYLES:
            raise parameter_error(self, ValueError, f"ram_style must be one of {', '.join(RAM_STYLES)}, "
                                  f"got {ram_style!r}")
        self._shape = shape
        self._depth = depth
        self._ram_style = ram_style
        super().__init__({
            "w_en": In(1),
            "w_data": In(shape),
            "o": Out(stream.Signature(shape)),
            "overflow": Out(1),
        })

    shape = property(lambda self: self._shape)
    depth = property(lambda self: self._depth)

    def elaborate(self, platform):
        m = Module()
        depth = self._depth

        # The read port never reads the entry being written (see `stored`): no collision logic.
        m.submodules.storage = storage = Memory(shape=self._shape, depth=depth, init=[],
                                                attrs={"ram_style": self._ram_style, **NO_RW_CHECK})
        write = storage.write_port()
        read = unchecked_read_port(m, storage, name="read")

        w_ptr = Signal(range(depth))
        r_ptr = Signal(range(depth))
        # Entries written in earlier cycles and not yet moved to the output register: an entry
        # being written now is not counted, so the read port never reads the address being written.
        stored = Signal(range(depth + 1))
        # `stored != 0`, kept as a register: `o.ready` (a consumer's signal, possibly from far away)
        # then passes one LUT to `fetch` and one multiplexer to every register it updates.
        nonempty = Signal()

        fetch = Signal()
        m.d.comb += [
            write.en.eq(self.w_en),
            write.addr.eq(w_ptr),
            write.data.eq(self.w_data),
            fetch.eq(nonempty & (~self.o.valid | self.o.ready)),
            read.addr.eq(r_ptr),
            read.en.eq(fetch),
            self.o.payload.eq(read.data),
        ]
        # Both outcomes of `fetch` are computed from registers and `w_en` alone, then selected.
        kept = stored + self.w_en
        m.d.sync += [
            stored.eq(Mux(fetch, kept - 1, kept)),
            nonempty.eq(Mux(fetch, kept >= 2, kept >= 1)),
        ]
        with m.If(self.w_en):
            m.d.sync += w_ptr.eq(_wrap_increment(w_ptr, depth))
        with m.If(fetch):
            m.d.sync += [r_ptr.eq(_wrap_increment(r_ptr, depth)), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        # Full when every entry is stored or in the output register (the one being fetched now
        # moves from one to the other, so it counts either way).
        with m.If(self.w_en & (stored + self.o.valid >= depth) & ~(self.o.valid & self.o.ready)):
            m.d.sync += self.overflow.eq(1)
        return m


def _wrap_increment(value, modulus):
    """``(value + 1) % modulus`` for a ``Signal(range(modulus))``."""
    return Mux(value == modulus - 1, 0, value + 1)
