"""Virtual-channel input buffer: one FIFO per VC in a shared memory, with several read ports."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from rtl.common.parameters import parameter_error

__all__ = ["VcBuffer", "select"]


def select(items, index):
    """``items[index]`` as an OR of multiplexers.

    Unlike ``Array`` indexing (a ``case`` in a combinational ``always`` block, which Icarus does not
    evaluate until one of its inputs changes, so it stays X after reset), this is continuous
    assignments, and it has no incomplete-case lint for non-power-of-two lengths.
    """
    width = max(len(item) if not isinstance(item, int) else 1 for item in items)
    out = Const(0, width)
    for k, item in enumerate(items):
        out = out | Mux(index == k, item, 0)
    return out


class VcBuffer(wiring.Component):
    """``vcs`` first-in first-out queues of ``depth`` entries each, stored in one memory.

    Parameters
    ----------
    vcs, depth : int
        Number of queues and entries per queue.
    shape : shape-like or Layout
        Entry stored in the memory.
    read_ports : int
        Number of independent read ports; each reads and may pop the head of one VC per cycle (two
        ports must not pop the same VC in the same cycle).

    Interface attributes
    --------------------
    w_en, w_vc, w_data : In
        Append an entry to queue ``w_vc``. Appending to a full queue (a credit violation by the
        sender) drops the entry and sets ``overflow``.
    r_vc[k], r_data[k], r_en[k]
        Read port ``k``: ``r_data`` is the head entry of queue ``r_vc`` (combinational); ``r_en`` pops it
        at the clock edge. Popping an empty queue does nothing.
    count : Out(ArrayLayout(range(depth + 1), vcs))
        Entries held per queue (registered).
    overflow : Out(1)
        Sticky: an entry was dropped.

    Latency and throughput
    ----------------------
    An entry written in cycle ``t`` can be read (and popped) in cycle ``t + 1``. One write and
    ``read_ports`` pops per cycle; a full queue that is popped in the cycle it is written keeps both.
    """

    def __init__(self, *, vcs, depth, shape, read_ports=1):
        if vcs < 1 or depth < 1 or read_ports < 1:
            raise parameter_error(self, ValueError, "vcs, depth and read_ports must be at least 1")
        self._vcs, self._depth, self._shape, self._read_ports = vcs, depth, shape, read_ports
        vc_shape = unsigned(max(1, ceil_log2(vcs)))
        super().__init__({
            "w_en": In(1), "w_vc": In(vc_shape), "w_data": In(shape),
            "r_vc": In(vc_shape).array(read_ports),
            "r_data": Out(shape).array(read_ports),
            "r_en": In(1).array(read_ports),
            "count": Out(data.ArrayLayout(range(depth + 1), vcs)),
            "overflow": Out(1),
        })

    @property
    def vcs(self):
        return self._vcs

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        V, D = self._vcs, self._depth

        m.submodules.mem = mem = Memory(shape=self._shape, depth=V * D, init=[])
        wp = mem.write_port()
        rps = [mem.read_port(domain="comb") for _ in range(self._read_ports)]

        rptr = [Signal(range(D), name=f"rptr{v}") for v in range(V)]
        wptr = [Signal(range(D), name=f"wptr{v}") for v in range(V)]
        count = [Signal(range(D + 1), name=f"count{v}") for v in range(V)]

        def nxt(ptr):
            if D == 1:
                return ptr
            if D & (D - 1) == 0:
                return (ptr + 1)[:len(ptr)]
            return Mux(ptr == D - 1, 0, ptr + 1)[:len(ptr)]

        def addr(vc, ptr):
            return vc if D == 1 else vc * D + ptr

        for k, rp in enumerate(rps):
            m.d.comb += [rp.addr.eq(addr(self.r_vc[k], select(rptr, self.r_vc[k]))),
                         self.r_data[k].eq(rp.data)]

        full = Signal(V)
        pops = Signal(V)
        for v in range(V):
            m.d.comb += full[v].eq(count[v] == D)
            m.d.comb += pops[v].eq(Cat(*(self.r_en[k] & (self.r_vc[k] == v)
                                         for k in range(self._read_ports))).any() & (count[v] != 0))
        accept = Signal()
        m.d.comb += accept.eq(self.w_en & ~(full.bit_select(self.w_vc, 1) & ~pops.bit_select(self.w_vc, 1)))
        with m.If(self.w_en & ~accept):
            m.d.sync += self.overflow.eq(1)
        m.d.comb += [wp.addr.eq(addr(self.w_vc, select(wptr, self.w_vc))), wp.data.eq(self.w_data),
                     wp.en.eq(accept)]

        for v in range(V):
            push = Signal(name=f"push{v}")
            m.d.comb += push.eq(accept & (self.w_vc == v))
            m.d.sync += count[v].eq(count[v] + push - pops[v])
            with m.If(push):
                m.d.sync += wptr[v].eq(nxt(wptr[v]))
            with m.If(pops[v]):
                m.d.sync += rptr[v].eq(nxt(rptr[v]))
            m.d.comb += self.count[v].eq(count[v])
        return m
