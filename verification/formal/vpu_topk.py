"""Formal properties of TopK's systolic list (:func:`rtl.vpu.topk.systolic_list`).

The list must hold exactly what the obvious design holds: a sorted list into which each arriving
entry is inserted at once, in parallel, at its rank (key descending, then index ascending), the
worst entry falling off the end. The systolic list gets there later (each entry moves one cell per
cycle), so the claim is: whenever no entry has arrived for ``depth`` cycles, the two lists are equal,
cell by cell, for any sequence of entries and clears (bounded). The entries are narrow (the list's
logic does not depend on the widths) so that ties and full lists are common; indices are unique
within a row, as in TopK.
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, Signal
from amaranth.lib import data

from rtl.vpu.topk import systolic_list

from .proof import Proof, free, reset_at_start

DEPTH = 3
KEY_BITS = 2       # keys 0..3
INDEX_BITS = 2     # indices 0..3
ENTRY = data.StructLayout({"valid": 1, "key": KEY_BITS, "index": INDEX_BITS, "value": 2})


def _ranks_above(a, b):
    """The reference order: a larger key, or an equal key and a lower index."""
    return (a.key > b.key) | ((a.key == b.key) & (a.index < b.index))


def _harness():
    m = Module()
    started = reset_at_start(m)
    incoming = Signal(ENTRY)
    clear = Signal()
    free(m, incoming.as_value(), clear)
    # The list's contract: each element of a row (the entries between clears) arrives once, so no
    # two entries share an index. (Two equal entries could otherwise swap places, unobservably.)
    seen = Signal(1 << INDEX_BITS)
    first_of_row = Signal(1 << INDEX_BITS)
    m.d.comb += first_of_row.eq(Mux(clear, 0, seen))
    with m.If(incoming.valid):
        m.d.comb += Assume(~first_of_row.bit_select(incoming.index, 1))
    m.d.sync += seen.eq(first_of_row | Mux(incoming.valid, 1 << incoming.index, 0))
    cells = systolic_list(m, incoming, DEPTH, clear, "dut", ENTRY)

    # The reference: parallel insertion, in the cycle the entry arrives.
    ref = [Signal(ENTRY, name=f"ref{e}") for e in range(DEPTH)]
    wins = [incoming.valid & (~ref[e].valid | _ranks_above(incoming, ref[e])) for e in range(DEPTH)]
    for e in range(DEPTH):
        above = ref[e - 1] if e else incoming
        from_above = wins[e - 1] if e else 1
        with m.If(wins[e]):
            m.d.sync += ref[e].eq(Mux(from_above, above.as_value(), incoming.as_value()))
    with m.If(clear):
        m.d.sync += [ref[0].eq(incoming)] + [entry.valid.eq(0) for entry in ref[1:]]

    # Cycles since the last arrival (or clear), saturating.
    quiet = Signal(range(DEPTH + 1))
    with m.If(incoming.valid | clear):
        m.d.sync += quiet.eq(0)
    with m.Elif(quiet != DEPTH):
        m.d.sync += quiet.eq(quiet + 1)

    settled = started & (quiet == DEPTH)
    for e in range(DEPTH):
        same = (cells[e].valid == ref[e].valid) & (~ref[e].valid | ((cells[e].key == ref[e].key)
                                                                 & (cells[e].index == ref[e].index)
                                                                 & (cells[e].value == ref[e].value)))
        with m.If(settled):
            m.d.comb += Assert(same)
    full_tie = cells[DEPTH - 1].valid & (cells[0].key == cells[DEPTH - 1].key) & (cells[0].index != 0)
    m.d.comb += Cover(settled & full_tie)
    return m


PROOFS = [
    Proof("vpu_topk_systolic_list", _harness, mode="bmc", depth=12,
          description=f"{DEPTH}-cell systolic list == parallel insertion once settled, any input"),
    Proof("vpu_topk_systolic_list_cover", _harness, mode="cover", depth=14,
          description="reachability: a full, settled list of equal keys, not headed by index 0"),
]
