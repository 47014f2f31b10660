"""Per-link record of which flows may still be buffered in each VC of the receiver.

Why: a router may give consecutive packets of one flow different VCs, and packets in different VCs
can overtake each other. The sender of a link therefore keeps, for each of its output VCs, the flow
signature (:func:`rtl.noc.layouts.flow_hash`) of every packet that may still sit in the receiver's
buffer of that VC, and the VC allocator lets a head take VC ``v`` only if its flow is not present in
any *other* VC of the link. Packets of one flow are then either in one FIFO or strictly one after the
other, so they stay in order hop by hop (the argument is in ``docs/noc.md``).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .vc_buffer import select

__all__ = ["OrderTracker"]


class OrderTracker(wiring.Component):
    """Flow signatures of the packets possibly held downstream, per VC of one link.

    An entry is created when a head is given a VC (``push``), becomes *sent* when the packet's tail is
    sent, and is retired when the credits of every flit up to that tail have come back (the tail has
    left the receiver's buffer). A VC holds at most ``depth + 1`` entries: the packet being sent plus
    one per flit of buffer downstream.

    Parameters
    ----------
    vcs, depth, hash_bits : int
        Link geometry and signature width.
    queries : int
        Number of signatures looked up in parallel.

    Interface attributes
    --------------------
    push : In(1), push_vc, push_hash
        A packet of flow ``push_hash`` was given VC ``push_vc``.
    push_sent : In(1), push_need
        With ``push``: the packet's tail (a single-flit packet) is sent in the same cycle, and
        ``push_need`` credits must return before it has left the receiver.
    tail : In(1), tail_vc, tail_need
        The tail of the packet being sent on ``tail_vc`` is sent; ``tail_need`` (at least 1) credits of
        that VC, counted after this cycle's ``credit``, must come back before it has left.
    credit : In(vcs)
        Credits returned this cycle.
    query : In(ArrayLayout(hash_bits, queries)); present : Out(ArrayLayout(vcs, queries))
        ``present[q][v]``: flow ``query[q]`` may still be in VC ``v`` (combinational from registers).
    overflow : Out(1)
        Sticky: a push found no free entry (cannot happen with a correct sender).
    """

    def __init__(self, *, vcs, depth, hash_bits, queries):
        self._vcs, self._depth, self._hash_bits, self._queries = vcs, depth, hash_bits, queries
        vc_shape = unsigned(max(1, ceil_log2(vcs)))
        need = range(depth + 2)
        super().__init__({
            "push": In(1), "push_vc": In(vc_shape), "push_hash": In(hash_bits),
            "push_sent": In(1), "push_need": In(need),
            "tail": In(1), "tail_vc": In(vc_shape), "tail_need": In(need),
            "credit": In(vcs),
            "query": In(data.ArrayLayout(hash_bits, max(1, queries))),
            "present": Out(data.ArrayLayout(vcs, max(1, queries))),
            "overflow": Out(1),
        })

    @property
    def entries_per_vc(self):
        return self._depth + 1

    def elaborate(self, platform):
        m = Module()
        V, E = self._vcs, self.entries_per_vc
        # Running count of returned credits per VC, and per entry the count at which it retires.
        mark_bits = max(1, ceil_log2(2 * (self._depth + 2)))
        for v in range(V):
            returned = Signal(mark_bits, name=f"returned{v}")
            valid = Signal(E, name=f"valid{v}")
            hashes = [Signal(self._hash_bits, name=f"hash{v}_{k}") for k in range(E)]
            marks = [Signal(mark_bits, name=f"mark{v}_{k}") for k in range(E)]
            head = Signal(range(E), name=f"head{v}")      # oldest entry
            tail = Signal(range(E), name=f"tail{v}")      # next free slot
            pending = Signal(name=f"pending{v}")          # the newest entry's tail is not sent yet
            newest = Signal(range(E), name=f"newest{v}")

            def inc(ptr):
                return Mux(ptr == E - 1, 0, ptr + 1)[:len(ptr)]

            credit = self.credit[v]
            m.d.sync += returned.eq(returned + credit)
            returned_after = (returned + credit)[:mark_bits]

            # Retire the oldest entry once the credits of all flits up to its tail are back. Entries
            # retire in order because tails are sent in order on one VC.
            head_sent = Signal(name=f"head_sent{v}")
            m.d.comb += head_sent.eq(~(pending & (newest == head)))
            head_mark = select(marks, head)
            retire = Signal(name=f"retire{v}")
            m.d.comb += retire.eq(valid.bit_select(head, 1) & head_sent & (head_mark == returned_after))

            tail_here = self.tail & (self.tail_vc == v)
            push_here = self.push & (self.push_vc == v)
            with m.If(push_here & valid.bit_select(tail, 1) & ~retire):
                m.d.sync += self.overflow.eq(1)

            clear = Signal(E, name=f"clear{v}")
            setb = Signal(E, name=f"set{v}")
            for k in range(E):
                m.d.comb += [clear[k].eq(retire & (head == k)), setb[k].eq(push_here & (tail == k))]
            m.d.sync += valid.eq((valid & ~clear) | setb)
            with m.If(retire):
                m.d.sync += head.eq(inc(head))
            with m.If(tail_here & pending):
                for k in range(E):
                    with m.If(newest == k):
                        m.d.sync += marks[k].eq(returned_after + self.tail_need)
                m.d.sync += pending.eq(0)
            with m.If(push_here):
                m.d.sync += [tail.eq(inc(tail)), newest.eq(tail), pending.eq(~self.push_sent)]
                for k in range(E):
                    with m.If(tail == k):
                        m.d.sync += [hashes[k].eq(self.push_hash),
                                     marks[k].eq(returned_after + self.push_need)]
            for q in range(self._queries):
                hits = Cat(*(valid[k] & (hashes[k] == self.query[q]) for k in range(E)))
                m.d.comb += self.present[q][v].eq(hits.any())
        return m
