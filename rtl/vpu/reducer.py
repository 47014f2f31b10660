"""Row sums and sums of squares of the vector unit: per-lane accumulate loops, a pairwise tree."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int, parameter_error
from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.accumulator import ACC_BITS, DEFAULT_EXPONENT_WIDTH, Acc48Add, acc_layout
from rtl.vpu.round_pack import RoundPack

__all__ = ["Reducer", "beat_layout", "exact_layout", "delay", "result_queue"]


def beat_layout(lanes):
    """One beat of a row entering a reduction unit (:class:`Reducer`, ``MaxReducer``).

    ``data[l]`` is element ``b * lanes + l`` of the row for beat ``b`` (binary32 bits); ``mask[l]``
    says lane ``l`` carries an element (the lanes beyond a row's length on its last beat have it
    clear: a sum counts them as +0, a maximum ignores them). ``first`` and ``last`` mark the row's
    first and last beats (both on a one-beat row); ``squares`` selects ``sum_squares`` for the row
    and is read on its first beat only.
    """
    return data.StructLayout({
        "data": data.ArrayLayout(32, lanes),
        "mask": lanes,
        "first": 1,
        "last": 1,
        "squares": 1,
    })


def exact_layout(exponent_width=DEFAULT_EXPONENT_WIDTH):
    """A row's sum before its rounding to binary32: the accumulator and the row's special verdict."""
    return data.StructLayout({"acc": acc_layout(exponent_width), "nan": 1, "inf": 1})


def delay(m, value, cycles, name):
    """``value`` delayed by ``cycles`` clock cycles through registers that reset to 0."""
    for k in range(cycles):
        reg = Signal(len(value), name=f"{name}_d{k}")
        m.d.sync += reg.eq(value)
        value = reg
    return value


def result_queue(m, o, valid, value, row_done, depth):
    """Drive stream ``o`` with the results of a fixed-latency pipeline; return the input's room.

    A result (``value`` when ``valid``) goes straight to ``o`` when nothing is queued and ``o`` is
    ready, into a ``depth``-entry FIFO otherwise (``o`` then shows the FIFO's head, so a result
    offered once holds until taken). ``row_done`` counts a row in when its last beat transfers; the
    returned signal is low while ``depth`` rows are in but their results not yet taken, so the
    FIFO cannot overflow. With ``depth`` at least the pipeline latency plus 2 a consumer that is
    always ready never sees it low.
    """
    m.submodules.results = queue = SyncFIFO(width=len(value), depth=depth)
    empty = ~queue.r_rdy
    m.d.comb += [
        o.valid.eq(Mux(empty, valid, 1)),
        o.payload.eq(Mux(empty, value, queue.r_data)),
        queue.w_data.eq(value),
        queue.w_en.eq(valid & ~(empty & o.ready)),
        queue.r_en.eq(o.ready),
    ]
    outstanding = Signal(range(depth + 1), name="rows_outstanding")
    m.d.sync += outstanding.eq(outstanding + row_done - (o.valid & o.ready))
    return outstanding < depth


_SQUARE_TOP = 11863284
"""Least 24-bit significand whose square reaches ``2**47``: ``ceil(sqrt(2**47))``."""


def _ceil_log2(n):
    return (n - 1).bit_length()


def _tree(m, leaves, stages, exponent_width, name):
    """The pairwise tree of ``sim_models.vpu.accumulate48`` over ``leaves`` (accumulator Values).

    Level by level: ``0+1, 2+3, ...``; an odd one out passes up through ``stages`` registers, so
    every level takes ``stages`` cycles. Returns the root, ``ceil(log2(len(leaves))) * stages`` cycles
    after the leaves.
    """
    nodes = list(leaves)
    level = 0
    while len(nodes) > 1:
        up = []
        for j in range(0, len(nodes) - 1, 2):
            add = Acc48Add(stages=stages, exponent_width=exponent_width)
            m.submodules[f"{name}{level}_{j // 2}"] = add
            m.d.comb += [add.a.as_value().eq(nodes[j]), add.b.as_value().eq(nodes[j + 1])]
            up.append(add.sum.as_value())
        if len(nodes) % 2:
            up.append(delay(m, nodes[-1], stages, f"{name}{level}_pass"))
        nodes = up
        level += 1
    return nodes[0]


class Reducer(wiring.Component):
    """``sum`` and ``sum_squares`` of rows streamed ``lanes`` elements per beat, one binary32 per row.

    Bit-exact to :func:`sim_models.vpu.sum` / :func:`sim_models.vpu.sum_squares` with the same
    ``lanes`` and ``slots`` (``docs/vpu_numerics.md``, "Reductions"): element ``i`` of a row goes to
    accumulator ``i mod (lanes * slots)``, which starts at +0 and adds its terms in increasing ``i``,
    each sum rounded to a 48-bit significand (:class:`rtl.vpu.accumulator.Acc48Add`); the
    ``lanes * slots`` accumulators are combined by the pairwise tree and rounded once to binary32
    (:class:`rtl.vpu.round_pack.RoundPack`). A row holding NaN, or both infinities (``sum``), gives
    the canonical NaN; one kind of infinity gives it (``sum_squares``: +Inf); an all-zero row +0.

    Datapath.

    1. Terms (4 cycles): each lane decodes its element and normalizes its significand ``nsig``
       (the leading zeros of a subnormal); a ``sum`` term is ``nsig`` placed at the top of 48 bits,
       a ``sum_squares`` term its exact square ``high**2 * 2**12 + 2*high*low * 2**6 + low**2`` for
       ``nsig = high * 2**6 + low`` (``high`` 18 bits: an 18x18 and an 18x6 multiplier, ``low**2``
       in LUTs; the partial products summed by one carry-save step and one carry chain), shifted
       left once when below ``2**47`` (known beforehand: ``nsig < ceil(sqrt(2**47))``). Masked
       lanes, zeros and specials give +0 terms; NaN and infinities are noted for the row.
    2. Accumulate loops: beat ``b`` of a row feeds slot ``b mod slots``, and lane ``l`` of slot ``s``
       is accumulator ``s * lanes + l``. Each lane has one ``Acc48Add`` of exactly ``slots`` stages
       whose pipeline *is* its ``slots`` accumulators: an accumulator is issued into the adder, comes
       out ``slots`` cycles later, and is issued again at once, with the lane's next term when a
       beat of its slot is there, with +0 otherwise (an exact no-op). A slot's first beat in a row
       adds its term to +0 instead of the adder's output. So the loop is the adder itself, 4 cycles
       for ``slots = 4`` (110 MHz on ECP5 with the loop closed).
    3. Drain: once a row's last beat is issued, its accumulators come out of the loops one slot per
       cycle, the last beat's slot last, ``slots`` cycles after that beat.
    4. Lane tree: a pipelined pairwise tree of ``lanes - 1`` adders reduces each slot's ``lanes``
       accumulators (tree levels 1 to ``log2(lanes)``: with ``lanes`` a power of two they stay within
       a slot). It takes one slot per cycle.
    5. Slot tree: the row's slot sums (+0 for slots the row never reached) go through a pipelined
       pairwise tree of ``slots - 1`` adders (the remaining levels) when the last one arrives, then
       ``RoundPack`` with the NaN/Inf verdict.

    Each ring position (a cycle of the loop, ``slots`` of them) holds one accumulator. A row claims
    a free position for each slot on the slot's first beat; the slot's later beats must arrive when
    that position comes round again. Beats arriving back to back always do; after a bubble in a row
    ``i.ready`` is low for up to ``slots - 1`` cycles until the position comes round. Beats of the
    next row may follow the last beat of a row at once (the drain and both trees overlap the next
    row, and rows of any length, one beat included, may follow each other every cycle).

    Parameters
    ----------
    lanes : int
        Elements per beat, a power of two (default 8).
    slots : int
        Accumulators per lane and the depth of the accumulate loops (default 4; at least 1). The
        loop adders have ``slots`` pipeline stages: 4 or more for 100 MHz.
    tree_stages : int
        Pipeline stages of every tree adder (default 4: 100 MHz).
    round_stages : int
        Pipeline stages of the final ``RoundPack`` (default 3: 100 MHz).
    exponent_width : int
        Accumulator exponent width (default 10, ``-512..511``: every row of binary32 terms).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(beat_layout(lanes)))``
        Beats (see :func:`beat_layout`). A beat transfers when ``valid`` and ``ready`` are both high;
        ``ready`` depends only on the unit's state (never on ``valid`` or the payload). A beat with
        ``first`` set starts a row whatever came before (a row left without its ``last`` beat gives
        no result); a beat after a row's ``last`` starts a row even with ``first`` clear.
    o : ``Out(stream.Signature(32))``
        One binary32 result per row, in row order. Backpressure is honoured: results the consumer
        does not take wait in a FIFO of :attr:`queue_depth` entries, and ``i.ready`` goes low while
        that many rows are in the unit with their results not yet taken (never with a consumer
        that is always ready).
    exact : ``Out(exact_layout(exponent_width))``
        The result offered on ``o`` before its rounding: the accumulator (48 bits, never overflowing)
        and whether the row held NaN (or, for ``sum``, both infinities) or an infinity. RMSNorm
        takes its sum of squares from here.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles from the transfer of a row's last beat to its result on ``o`` (offered
    that cycle when nothing is queued): ``4 + slots +
    tree_stages * (log2(lanes) + ceil(log2(slots))) + round_stages``, 31 for the defaults. A row of
    ``n`` elements streamed without bubbles from cycle 0 is summed at cycle
    ``ceil(n / lanes) - 1 + latency``. One beat per cycle.

    Resources (ECP5)
    ----------------
    ``lanes`` loop adders and ``lanes - 1 + slots - 1`` tree adders (18 ``Acc48Add`` for the
    defaults, about 1,450 LUT4 and 460 FF each), 2 MULT18X18D per lane. Defaults, Yosys
    ``synth_ecp5``: 23.5k LUT4 + 3.2k CCU2C (about 30k LUT4 sites), 11.0k FF, 16 MULT18X18D, 24
    DPR16X4 (the result FIFO). ``Reducer(2, 4)`` placed and routed (nextpnr seed 1): 100 MHz, its
    critical path in the final ``RoundPack``; a loop adder alone with its loop closed: 110 MHz.
    """

    TERM_STAGES = 4
    """Cycles from a beat's transfer to the issue of its terms into the accumulate loops."""

    def __init__(self, lanes=8, slots=4, tree_stages=Acc48Add.DEFAULT_STAGES, round_stages=3,
                 exponent_width=DEFAULT_EXPONENT_WIDTH):
        check_positive_int(self, "lanes", lanes)
        if lanes & (lanes - 1):
            raise parameter_error(self, ValueError, f"lanes must be a power of two, got {lanes!r}")
        check_positive_int(self, "slots", slots)
        check_positive_int(self, "tree_stages", tree_stages)
        check_positive_int(self, "round_stages", round_stages)
        check_positive_int(self, "exponent_width", exponent_width, minimum=10)
        self._lanes = lanes
        self._slots = slots
        self._tree_stages = tree_stages
        self._round_stages = round_stages
        self._exponent_width = exponent_width
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(32)),
            "exact": Out(exact_layout(exponent_width)),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def slots(self):
        return self._slots

    @property
    def tree_stages(self):
        return self._tree_stages

    @property
    def round_stages(self):
        return self._round_stages

    @property
    def queue_depth(self):
        """Results the output FIFO holds: ``latency + 2``."""
        return self.latency + 2

    @property
    def latency(self):
        """Cycles from the transfer of a row's last beat to its result on ``o``."""
        levels = _ceil_log2(self._lanes) + _ceil_log2(self._slots)
        return self.TERM_STAGES + self._slots + self._tree_stages * levels + self._round_stages

    def elaborate(self, platform):
        m = Module()
        lanes, slots, ew = self._lanes, self._slots, self._exponent_width
        layout = acc_layout(ew)
        pbits = max(1, _ceil_log2(slots))

        def count_up(value):
            return Mux(value == slots - 1, 0, value + 1)[:pbits]

        # ---- row bookkeeping at the input ------------------------------------------------------
        # Ring position of the accumulators a beat transferred now will meet: the loop phase
        # TERM_STAGES cycles from now (phase counts cycles modulo slots at the issue stage).
        iphase = Signal(pbits, init=self.TERM_STAGES % slots)
        phase = Signal(pbits)
        m.d.sync += [iphase.eq(count_up(iphase)), phase.eq(count_up(phase))]

        row_open = Signal()                   # a row's first beat is in, its last is not
        kslot = Signal(pbits)                 # slot of the row's next beat
        wrapped = Signal()                    # the row's next beat is beat `slots` or later
        positions = Array(Signal(pbits, name=f"position{s}") for s in range(slots))
        taken = Signal(slots)                 # ring positions the open row has claimed
        row_squares = Signal()

        beat = self.i.payload
        position_free = ~(taken >> iphase)[0]
        room = Signal()
        m.d.comb += self.i.ready.eq(room & (~row_open | Mux(wrapped, positions[kslot] == iphase,
                                                             position_free)))
        accept = self.i.valid & self.i.ready
        start = beat.first | ~row_open
        slot = Mux(start, 0, kslot)
        first_visit = start | ~wrapped
        claimed = Mux(start, 0, taken) | Mux(first_visit, Const(1, slots) << iphase, 0)[:slots]
        squares = Mux(start, beat.squares, row_squares)
        with m.If(accept):
            m.d.sync += [
                row_open.eq(~beat.last),
                kslot.eq(count_up(slot)),
                wrapped.eq((~start & wrapped) | (slot == slots - 1)),
                taken.eq(claimed),
                row_squares.eq(squares),
            ]
            for k in range(slots):               # (not positions[slot]: a switch Verilator finds incomplete)
                with m.If(first_visit & (slot == k)):
                    m.d.sync += positions[k].eq(iphase)

        control = data.StructLayout({
            "valid": 1, "start": 1, "last": 1, "first_visit": 1, "slot": pbits, "drain": slots,
            "squares": 1, "nan": 1, "pinf": 1, "ninf": 1,
        })

        ctl = Signal(control)
        ctls = [ctl]
        for k in range(1, self.TERM_STAGES + 1):
            ctls.append(Signal(control, name=f"ctl{k}"))
            m.d.sync += ctls[k].eq(ctls[k - 1])
        issue_ctl, term_ctl = ctls[-1], ctls[-2]      # at the loops; one cycle before

        def reg(value, name, shape=None):
            sig = Signal(shape if shape is not None else value.shape(), name=name, reset_less=True)
            m.d.sync += sig.eq(value)
            return sig

        # ---- terms: 4 register stages ------------------------------------------------------------
        terms, nans, pinfs, ninfs = [], [], [], []
        for lane in range(lanes):
            x = beat.data[lane]
            live = beat.mask[lane]
            sign, biased, frac = x[31], x[23:31], x[:23]
            special = biased == 0xFF
            normal = biased != 0
            nans.append(live & special & (frac != 0))
            pinfs.append(live & special & (frac == 0) & ~sign)
            ninfs.append(live & special & (frac == 0) & sign)
            # stage 1: decode; leading zeros of the significand (of a subnormal's fraction)
            sign1 = reg(sign, f"sign1_{lane}")
            zero1 = reg(~live | special | (~normal & (frac == 0)), f"zero1_{lane}")
            sig1 = reg(Cat(frac, normal), f"sig1_{lane}")
            lz1 = reg(Mux(normal, 0, leading_zeros(m, frac, f"lz0_{lane}") + 1), f"lz1_{lane}", range(25))
            biased1 = reg(Mux(normal, biased, 1), f"biased1_{lane}")
            # stage 2: the significand normalized, the weight of its last bit
            sign2 = reg(sign1, f"sign2_{lane}")
            zero2 = reg(zero1, f"zero2_{lane}")
            nsig2 = reg((sig1 << lz1)[:24], f"nsig2_{lane}")
            lsb2 = reg(biased1 - 150 - lz1, f"lsb2_{lane}", shape=signed(ew))
            # stage 3: partial products of its square: nsig = high * 2**6 + low, high on 18 bits
            # (an 18x18 and an 18x6 multiplier), low**2 in LUTs; whether the square reaches 2**47
            high, low = nsig2[6:24], nsig2[:6]
            low_sq = Signal(12, name=f"low_sq{lane}")
            with m.Switch(low):
                for v in range(63):
                    with m.Case(v):
                        m.d.comb += low_sq.eq(v * v)
                with m.Default():                # 63
                    m.d.comb += low_sq.eq(63 * 63)
            hh3 = reg(high * high, f"hh3_{lane}")
            hl3 = reg(high * low, f"hl3_{lane}")
            ll3 = reg(low_sq, f"ll3_{lane}")
            top3 = reg(nsig2 >= _SQUARE_TOP, f"top3_{lane}")
            sign3 = reg(sign2, f"sign3_{lane}")
            zero3 = reg(zero2, f"zero3_{lane}")
            nsig3 = reg(nsig2, f"nsig3_{lane}")
            lsb3 = reg(lsb2, f"lsb3_{lane}")
            # stage 4: the square, hh * 2**12 + hl * 2**7 + ll, through one carry-save step and one
            # carry chain; normalized to 48 bits (its top bit is bit 47 or 46); the term
            p0, p1, p2 = Cat(Const(0, 12), hh3), Cat(Const(0, 7), hl3), ll3
            half_sum = Signal(ACC_BITS, name=f"csa_sum{lane}")
            carries = Signal(ACC_BITS, name=f"csa_carry{lane}")
            m.d.comb += [half_sum.eq(p0 ^ p1 ^ p2), carries.eq(((p0 & p1) | (p0 & p2) | (p1 & p2)) << 1)]
            square = Signal(ACC_BITS, name=f"square{lane}")
            m.d.comb += square.eq(half_sum + carries)
            term = Signal(layout, name=f"term4_{lane}")
            with m.If(zero3 | ~term_ctl.valid):               # no beat: the loops add +0
                m.d.sync += term.eq(0)
            with m.Elif(term_ctl.squares):
                m.d.sync += [term.sign.eq(0),
                             term.mag.eq(Mux(top3, square, square << 1)),
                             term.exp.eq((lsb3 << 1) - ~top3)]
            with m.Else():
                m.d.sync += [term.sign.eq(sign3),
                             term.mag.eq(Cat(Const(0, 24), nsig3)),
                             term.exp.eq(lsb3 - 24)]
            terms.append(term)

        m.d.comb += [ctl.valid.eq(accept), ctl.start.eq(start), ctl.last.eq(beat.last),
                     ctl.first_visit.eq(first_visit), ctl.slot.eq(slot), ctl.drain.eq(claimed),
                     ctl.squares.eq(squares), ctl.nan.eq(Cat(*nans).any()),
                     ctl.pinf.eq(Cat(*pinfs).any()), ctl.ninf.eq(Cat(*ninfs).any())]

        # ---- accumulate loops: one Acc48Add of `slots` stages per lane ---------------------------
        # The tag of what each loop adder holds travels in a delay line beside it.
        tag_layout = data.StructLayout({"live": 1, "slot": pbits, "last": 1, "nan": 1, "inf": 1,
                                        "inf_sign": 1})
        tag_in = Signal(tag_layout)
        tag_out = Signal(tag_layout)
        m.d.comb += tag_out.as_value().eq(delay(m, tag_in.as_value(), slots, "ring_tag"))
        drain = Signal(slots)                 # ring positions whose accumulators a closed row awaits
        capture = Signal()
        m.d.comb += capture.eq(tag_out.live & (drain >> phase)[0])
        issue = issue_ctl.valid
        restart = Signal()                        # a slot's first beat in a row adds to +0
        m.d.sync += restart.eq(term_ctl.valid & term_ctl.first_visit)
        ring = []
        for lane in range(lanes):
            add = Acc48Add(stages=slots, exponent_width=ew)
            m.submodules[f"loop{lane}"] = add
            m.d.comb += [add.a.eq(add.sum), add.a_clear.eq(restart), add.b.eq(terms[lane])]
            ring.append(add.sum.as_value())

        # Row flags (NaN, +Inf, -Inf seen) and their verdict, carried by the last beat's tag.
        row_flags = Signal(3)
        flags = Mux(issue_ctl.start, 0, row_flags) | Cat(issue_ctl.nan, issue_ctl.pinf, issue_ctl.ninf)
        nan, pinf, ninf = flags[0], flags[1], flags[2]
        with m.If(issue):
            m.d.sync += row_flags.eq(flags)
        with m.If(issue):
            m.d.comb += [tag_in.live.eq(1), tag_in.slot.eq(issue_ctl.slot), tag_in.last.eq(issue_ctl.last),
                         tag_in.nan.eq(nan | (~issue_ctl.squares & pinf & ninf)),
                         tag_in.inf.eq(pinf | ninf), tag_in.inf_sign.eq(~issue_ctl.squares & ninf)]
        with m.Else():                            # recirculate the open row's accumulators
            m.d.comb += [tag_in.as_value().eq(tag_out.as_value()), tag_in.live.eq(tag_out.live & ~capture)]
        m.d.sync += drain.eq((drain & ~(capture << phase)[:slots])
                             | Mux(issue & issue_ctl.last, issue_ctl.drain, 0))

        # ---- lane tree: one slot's `lanes` accumulators per cycle ---------------------------------
        lane_levels = _ceil_log2(lanes)
        slot_sum = _tree(m, ring, self._tree_stages, ew, "lane_tree")
        lt_valid = delay(m, capture, self._tree_stages * lane_levels, "lane_tree_valid")
        lt_tag = Signal(tag_layout)
        m.d.comb += lt_tag.as_value().eq(delay(m, tag_out.as_value(), self._tree_stages * lane_levels,
                                               "lane_tree_tag"))

        # ---- slot sums gathered until the row's last; then the slot tree -------------------------
        present = Signal(slots)
        leaves = []
        launch = lt_valid & lt_tag.last
        with m.If(launch):
            m.d.sync += present.eq(0)
        for s in range(slots):
            held = Signal(layout, name=f"slot_sum{s}")
            here = lt_tag.slot == s
            with m.If(lt_valid & ~lt_tag.last & here):
                m.d.sync += [held.eq(slot_sum), present[s].eq(1)]
            # A slot the row never reached counts as +0: an accumulator whose bit 47 is clear.
            absent = Signal(layout, name=f"slot_leaf{s}")
            m.d.comb += [absent.eq(held), absent.mag[ACC_BITS - 1].eq(held.mag[ACC_BITS - 1] & present[s])]
            leaves.append(Mux(here, slot_sum, absent.as_value()))
        slot_levels = _ceil_log2(slots)
        root = Signal(layout)
        m.d.comb += root.as_value().eq(_tree(m, leaves, self._tree_stages, ew, "slot_tree"))
        verdict = Cat(lt_tag.nan, lt_tag.inf, lt_tag.inf_sign)
        st_verdict = delay(m, verdict, self._tree_stages * slot_levels, "slot_tree_verdict")
        st_valid = delay(m, launch, self._tree_stages * slot_levels, "slot_tree_valid")

        # ---- one rounding to binary32 -------------------------------------------------------------
        m.submodules.round = rnd = RoundPack(ACC_BITS, ew, stages=self._round_stages)
        m.d.comb += [rnd.sign.eq(Mux(st_verdict[1], st_verdict[2], root.sign)),
                     rnd.magnitude.eq(root.mag), rnd.exponent.eq(root.exp),
                     rnd.nan.eq(st_verdict[0]), rnd.inf.eq(st_verdict[1])]
        exact = Signal(exact_layout(ew))
        m.d.comb += [exact.acc.eq(root), exact.nan.eq(st_verdict[0]), exact.inf.eq(st_verdict[1])]
        exact_late = delay(m, exact.as_value(), self._round_stages, "exact")
        results = stream.Signature(32 + len(exact_late)).create()
        m.d.comb += room.eq(result_queue(m, results, delay(m, st_valid, self._round_stages, "round_valid"),
                                         Cat(rnd.result, exact_late), accept & beat.last, self.queue_depth))
        m.d.comb += [self.o.valid.eq(results.valid), self.o.payload.eq(results.payload[:32]),
                     self.exact.eq(results.payload[32:]), results.ready.eq(self.o.ready)]
        return m
