"""A ``kx`` by ``ky`` mesh of routers, each with its network interface."""

from amaranth.hdl import Cat, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error

from .layouts import OPPOSITE, PORTS, STEP, E, L, N, S, W
from .network_interface import NetworkInterface
from .router import Router

__all__ = ["Mesh"]


class Mesh(wiring.Component):
    """Routers at every ``(x, y)`` of a ``kx`` by ``ky`` mesh, neighbours linked both ways.

    Every node exposes the message streams of its network interface. Router ports on the mesh edge
    are left unconnected (their inputs idle, their outputs unused: XY routing never leaves the mesh).

    Parameters
    ----------
    params : NocParams
    kx, ky : int
        Mesh size; both at most ``params.max_side``.
    inj_depth : int
        Injection queue flits per class in each network interface.

    Interface attributes
    --------------------
    tx_<x>_<y> : In(stream.Signature(message_layout)).array(classes)
    rx_<x>_<y> : Out(stream.Signature(message_layout)).array(classes)
        The message streams of node ``(x, y)`` (see :class:`~rtl.noc.network_interface.NetworkInterface`).
    dropped_<x>_<y> : Out(16)
        Messages the node dropped for addressing outside the mesh.
    error : Out(kx * ky)
        Sticky error flag per node (bit ``y * kx + x``): its interface dropped a message or saw a
        protocol error, or its router did.

    Latency and throughput
    ----------------------
    A message header accepted on ``tx`` in cycle ``t`` is offered on the destination's ``rx`` in cycle
    ``t + 5 + 2 * hops`` at zero load, its last word ``length - 1`` cycles later
    (:func:`sim_models.noc.zero_load_latency`). Every link carries one flit per cycle.
    """

    def __init__(self, params, kx, ky, *, inj_depth=4):
        for name, k in (("kx", kx), ("ky", ky)):
            if not isinstance(k, int) or not 1 <= k <= params.max_side:
                raise parameter_error(self, ValueError, f"{name} = {k!r} must be 1..{params.max_side} "
                                 f"for {params.coord_bits}-bit coordinates")
        self._params, self._kx, self._ky, self._inj_depth = params, kx, ky, inj_depth
        msg = stream.Signature(params.message_layout)
        members = {}
        for y in range(ky):
            for x in range(kx):
                members[f"tx_{x}_{y}"] = In(msg).array(params.classes)
                members[f"rx_{x}_{y}"] = Out(msg).array(params.classes)
                members[f"dropped_{x}_{y}"] = Out(16)
        members["error"] = Out(kx * ky)
        super().__init__(members)

    @property
    def params(self):
        return self._params

    @property
    def kx(self):
        return self._kx

    @property
    def ky(self):
        return self._ky

    def tx(self, x, y):
        return getattr(self, f"tx_{x}_{y}")

    def rx(self, x, y):
        return getattr(self, f"rx_{x}_{y}")

    def elaborate(self, platform):
        m = Module()
        p = self._params
        routers = {}
        errors = []
        for y in range(self._ky):
            for x in range(self._kx):
                r = routers[x, y] = Router(p, x, y)
                ni = NetworkInterface(p, x, y, self._kx, self._ky, inj_depth=self._inj_depth)
                m.submodules[f"router_{x}_{y}"] = r
                m.submodules[f"ni_{x}_{y}"] = ni
                wiring.connect(m, ni.inj, r.i_l)
                wiring.connect(m, r.o_l, ni.ej)
                for c in range(p.classes):
                    wiring.connect(m, wiring.flipped(self.tx(x, y)[c]), ni.tx[c])
                    wiring.connect(m, ni.rx[c], wiring.flipped(self.rx(x, y)[c]))
                m.d.comb += getattr(self, f"dropped_{x}_{y}").eq(ni.dropped)
                errors.append(ni.error | r.error)
        for (x, y), r in routers.items():
            for port in (N, E, S, W):
                dx, dy = STEP[port]
                other = routers.get((x + dx, y + dy))
                if other is not None:
                    wiring.connect(m, r.output(port), other.input(OPPOSITE[port]))
        m.d.comb += self.error.eq(Cat(*errors))
        _ = (L, PORTS)
        return m
