"""Switch allocator: output-first, two crossbar reads per input port, packet-sticky round robin."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .arbiter import lowest_one
from .layouts import PORTS, legal_inputs, legal_outputs

__all__ = ["SwitchAllocator"]


def _rr_pick(m, requests, mask, name):
    """Round-robin pick: lowest request at or above the mask, else the lowest request."""
    masked = Signal(len(requests), name=f"{name}_masked")
    pick = Signal(len(requests), name=f"{name}_pick")
    m.d.comb += masked.eq(requests & mask)
    with m.If(masked.any()):
        m.d.comb += pick.eq(lowest_one(masked))
    with m.Else():
        m.d.comb += pick.eq(lowest_one(requests))
    return pick


def _past(onehot):
    """Mask of the positions strictly above a one-hot value."""
    return ~(onehot | (onehot - 1))[:len(onehot)]


class SwitchAllocator(wiring.Component):
    """Matches input VCs to output ports for the next cycle's crossbar traversal.

    Every requesting input VC asks for exactly one output port. The allocation is separable and
    output-first:

    1. for each (input port, output port) pair, one of the input's VCs asking for that output is
       chosen (round robin per pair);
    2. each output port grants one input port among those asking for it;
    3. each input port accepts up to ``speedup`` of the grants it received (round robin), because its
       buffer has that many read ports.

    *Packet stickiness*: an output that sent a non-tail flit of some VC last cycle prefers that VC while
    it keeps asking, so packets are not interleaved needlessly (it lowers packet latency at high load).
    Pointers only move on accepted grants (as in iSLIP), which makes every persistent request win within
    a bounded number of cycles (see ``docs/noc.md``).

    Parameters
    ----------
    params : NocParams
    speedup : int
        Crossbar reads per input port and cycle (1 or 2).

    Interface attributes
    --------------------
    req : In(PORTS * vcs)
        Request of input VC ``j = port * vcs + vc``.
    port : In(ArrayLayout(PORTS, PORTS * vcs))
        One-hot output port asked for by each request. Ports an input cannot reach under XY routing
        are ignored.
    tail : In(PORTS * vcs)
        The flit a request would send is a tail (ends stickiness).
    granted : Out(PORTS * vcs)
        Input VCs whose request won (at most one per output, at most ``speedup`` per input port).
    out_valid : Out(PORTS); out_in : Out(ArrayLayout(PORTS, PORTS)); out_vc, out_rd
        Per output: a grant, the one-hot input port, the VC and which read port of that input carries it.
    rd_valid, rd_vc : Out
        Per input port and read port: the VC to read and pop in the traversal cycle.

    Latency
    -------
    Combinational from requests to grants; the pointers and stickiness update at the clock edge.
    """

    def __init__(self, params, *, speedup=2):
        if speedup not in (1, 2):
            raise parameter_error(self, ValueError, f"speedup must be 1 or 2, not {speedup!r}")
        self._params = params
        self._speedup = speedup
        V = params.vcs
        super().__init__({
            "req": In(PORTS * V),
            "port": In(data.ArrayLayout(PORTS, PORTS * V)),
            "tail": In(PORTS * V),
            "granted": Out(PORTS * V),
            "out_valid": Out(PORTS),
            "out_in": Out(data.ArrayLayout(PORTS, PORTS)),
            "out_vc": Out(data.ArrayLayout(params.vc_bits, PORTS)),
            "out_rd": Out(PORTS),
            "rd_valid": Out(data.ArrayLayout(speedup, PORTS)),
            "rd_vc": Out(data.ArrayLayout(data.ArrayLayout(params.vc_bits, speedup), PORTS)),
        })

    @property
    def speedup(self):
        return self._speedup

    def elaborate(self, platform):
        m = Module()
        V = self._params.vcs
        P = PORTS

        # 1. Per (input, output) pair: the VCs asking, and the chosen one.
        cand = {}
        vsel = {}
        for i in range(P):
            for o in legal_outputs(i):
                c = Signal(V, name=f"cand_{i}_{o}")
                m.d.comb += c.eq(Cat(*(self.req[i * V + v] & self.port[i * V + v][o] for v in range(V))))
                cand[i, o] = c

        # Stickiness per output: input (one-hot) and VC (one-hot) of the packet in progress.
        st_valid = Signal(P)
        st_in = [Signal(P, name=f"st_in{o}") for o in range(P)]
        st_vc = [Signal(V, name=f"st_vc{o}") for o in range(P)]

        vmask = {}
        sticky_here = {}
        for (i, o), c in cand.items():
            vmask[i, o] = Signal(V, init=(1 << V) - 1, name=f"vmask_{i}_{o}")
            s = Signal(name=f"sticky_{i}_{o}")
            m.d.comb += s.eq(st_valid[o] & st_in[o][i] & (c & st_vc[o]).any())
            sticky_here[i, o] = s
            sel = Signal(V, name=f"vsel_{i}_{o}")
            rr = _rr_pick(m, c, vmask[i, o], f"vrr_{i}_{o}")
            with m.If(s):
                m.d.comb += sel.eq(st_vc[o])
            with m.Else():
                m.d.comb += sel.eq(rr)
            vsel[i, o] = sel

        # 2. Output arbitration over input ports.
        grant = {}
        omask = [Signal(P, init=(1 << P) - 1, name=f"omask{o}") for o in range(P)]
        for o in range(P):
            ins = legal_inputs(o)
            reqs = Signal(P, name=f"oreq{o}")
            m.d.comb += reqs.eq(Cat(*((cand[i, o].any() if i in ins else 0) for i in range(P))))
            sticky = Signal(name=f"osticky{o}")
            m.d.comb += sticky.eq(Cat(*(sticky_here[i, o] for i in ins)).any())
            rr = _rr_pick(m, reqs, omask[o], f"orr{o}")
            g = Signal(P, name=f"ogrant{o}")
            with m.If(sticky):
                m.d.comb += g.eq(st_in[o])
            with m.Else():
                m.d.comb += g.eq(rr)
            grant[o] = g

        # 3. Input acceptance of up to `speedup` grants.
        accept = {}
        first = {}
        amask = [Signal(P, init=(1 << P) - 1, name=f"amask{i}") for i in range(P)]
        for i in range(P):
            outs = legal_outputs(i)
            got = Signal(P, name=f"got{i}")
            m.d.comb += got.eq(Cat(*((grant[o][i] if o in outs else 0) for o in range(P))))
            a1 = _rr_pick(m, got, amask[i], f"acc1_{i}")
            acc = Signal(P, name=f"acc{i}")
            if self._speedup == 2:
                a2 = _rr_pick(m, got & ~a1, amask[i], f"acc2_{i}")
                m.d.comb += acc.eq(a1 | a2)
                with m.If(a2.any()):
                    m.d.sync += amask[i].eq(_past(a2))
                with m.Elif(a1.any()):
                    m.d.sync += amask[i].eq(_past(a1))
            else:
                m.d.comb += acc.eq(a1)
                with m.If(a1.any()):
                    m.d.sync += amask[i].eq(_past(a1))
            accept[i] = acc
            first[i] = a1

        # Outputs, read ports, pointer and stickiness updates.
        granted_bits = [0] * (P * V)
        for o in range(P):
            ins = legal_inputs(o)
            won = Signal(P, name=f"won{o}")
            m.d.comb += won.eq(Cat(*((grant[o][i] & accept[i][o]) if i in ins else 0 for i in range(P))))
            m.d.comb += [self.out_valid[o].eq(won.any()), self.out_in[o].eq(won)]
            vc_index = 0
            vc_onehot = 0
            rd = 0
            tail = 0
            for i in ins:
                for v in range(V):
                    bit = won[i] & vsel[i, o][v]
                    granted_bits[i * V + v] = granted_bits[i * V + v] | bit
                    if v:
                        vc_index = vc_index | Mux(bit, v, 0)
                    tail = tail | (bit & self.tail[i * V + v])
                vc_onehot = vc_onehot | Mux(won[i], vsel[i, o], 0)
                if self._speedup == 2:
                    rd = rd | (won[i] & ~first[i][o])
            m.d.comb += [self.out_vc[o].eq(vc_index), self.out_rd[o].eq(rd)]
            with m.If(won.any()):
                m.d.sync += omask[o].eq(_past(won))
                for i in ins:
                    with m.If(won[i]):
                        m.d.sync += vmask[i, o].eq(_past(vsel[i, o]))
                m.d.sync += [st_valid[o].eq(~tail), st_in[o].eq(won), st_vc[o].eq(vc_onehot)]
            with m.Else():
                m.d.sync += st_valid[o].eq(0)
        m.d.comb += self.granted.eq(Cat(*granted_bits))

        # Read ports: port 0 carries the first accepted grant, port 1 the second.
        for i in range(P):
            outs = legal_outputs(i)
            for r in range(self._speedup):
                valid = 0
                vc = 0
                for o in outs:
                    sel = first[i][o] if r == 0 else accept[i][o] & ~first[i][o]
                    valid = valid | sel
                    for v in range(1, V):
                        vc = vc | Mux(sel & vsel[i, o][v], v, 0)
                m.d.comb += [self.rd_valid[i][r].eq(valid), self.rd_vc[i][r].eq(vc)]
        return m
