"""The one definition of the fabric's parameters, flit, header, message and credit layouts, and its link.

Every block of the fabric (router, network interface, mesh, traffic generator and checker), every
testbench and the CLI take their bit layouts from here.

Geometry
--------
Routers sit at integer coordinates ``(x, y)`` of a ``kx`` by ``ky`` mesh. Port ``E`` leads to
``(x + 1, y)``, ``W`` to ``(x - 1, y)``, ``N`` to ``(x, y + 1)``, ``S`` to ``(x, y - 1)`` and ``L`` to the
node's own network interface. An *input* port is named after the neighbour it receives from: a flit on
input ``W`` came from the west neighbour and is travelling east.

Link flit (:meth:`NocParams.flit_layout`), least significant field first::

    data[width] | head | tail | vc[vc_bits] | route[5]

``route`` (meaningful in head flits) is the one-hot output port the packet takes at the router that
receives the flit: routing is *lookahead*, each hop computes the next hop's XY route while the flit
waits in its buffer (:func:`xy_route`), so the allocators of the receiving router start from a register.

Head flit ``data`` (:meth:`NocParams.header_layout`)::

    dest_x | dest_y | src_x | src_y   (coord_bits each) | mclass[class_bits] | length[4] | user[...]

``length`` is the number of flits of the packet (1..15) as the sender states it; the fabric itself only
relies on the ``tail`` bit. ``user`` is free for the endpoint (the traffic generator keeps its time stamp
and sequence number there).
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = [
    "N", "E", "S", "W", "L", "PORTS", "PORT_NAMES", "OPPOSITE", "STEP", "turn_allowed", "legal_inputs",
    "legal_outputs", "LENGTH_BITS", "MAX_PACKET_FLITS", "NocParams", "LinkSignature",
    "TRAFFIC_PATTERNS", "TRAFFIC_TAG_BITS", "traffic_tag_layout", "traffic_config_layout",
    "xy_route", "flow_vc",
]

N, E, S, W, L = range(5)
PORTS = 5
PORT_NAMES = ("n", "e", "s", "w", "l")
OPPOSITE = {N: S, S: N, E: W, W: E}
#: Coordinate step of each mesh port.
STEP = {N: (0, 1), S: (0, -1), E: (1, 0), W: (-1, 0)}

LENGTH_BITS = 4
MAX_PACKET_FLITS = (1 << LENGTH_BITS) - 1


def turn_allowed(inp, out):
    """Whether XY routing can take a flit from input port ``inp`` to output port ``out``.

    A flit travelling in Y (inputs ``N``/``S``) never turns back into X, no flit makes a U-turn, and the
    local input may go anywhere (``L`` to ``L`` is a packet addressed to its own node).
    """
    if inp == L:
        return True
    if out == L:
        return True
    if inp in (N, S):
        return out == OPPOSITE[inp]
    return out != inp


def legal_inputs(out):
    """Input ports that XY routing can connect to output port ``out``, in port order."""
    return [i for i in range(PORTS) if turn_allowed(i, out)]


def legal_outputs(inp):
    """Output ports that XY routing can reach from input port ``inp``, in port order."""
    return [o for o in range(PORTS) if turn_allowed(inp, o)]


#: The values ``NocParams.order_buckets`` may take: 0 (static VCs) or a power of 2 from 2 to 64.
ORDER_BUCKETS = (0, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class NocParams:
    """Parameters shared by every block of one fabric.

    Parameters
    ----------
    width : int
        Flit payload bits (the ``data`` field). Must hold the header.
    vcs : int
        Virtual channels per port. They are split evenly between the message classes: class ``c`` owns
        VCs ``c * vcs_per_class`` to ``(c + 1) * vcs_per_class - 1``.
    depth : int
        Flit buffers per virtual channel (and credits per output virtual channel).
    classes : int
        Message classes (for example requests and responses); each has its own VCs end to end.
    coord_bits : int
        Bits per coordinate in the header; the largest mesh is ``2**coord_bits`` on a side.
    order_buckets : int
        0 (the default): *static VCs*, a packet keeps the VC it was injected on end to end. A power
        of 2 from 2 to 64: *dynamic VCs*, a head takes any free VC of its class at every router, and
        this many order buckets (:func:`order_bucket`) keep each flow in order; more buckets wait
        less often without need but cost area and Fmax (see
        :class:`~rtl.noc.output_allocator.OutputAllocator`).
    """
    width: int = 64
    vcs: int = 4
    depth: int = 4
    classes: int = 2
    coord_bits: int = 4
    order_buckets: int = 0

    def __post_init__(self):
        for name in ("width", "vcs", "depth", "classes", "coord_bits", "order_buckets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {value!r}")
        if self.classes < 1:
            raise ValueError(f"classes must be at least 1, not {self.classes}")
        if self.vcs < self.classes or self.vcs % self.classes:
            raise ValueError(f"vcs ({self.vcs}) must be a positive multiple of classes ({self.classes})")
        if not 1 <= self.depth <= 64:
            raise ValueError(f"depth must be 1..64, not {self.depth}")
        if not 1 <= self.coord_bits <= 8:
            raise ValueError(f"coord_bits must be 1..8, not {self.coord_bits}")
        if self.order_buckets not in ORDER_BUCKETS:
            raise ValueError(f"order_buckets must be 0 (static VCs) or a power of 2 in 2..64, "
                             f"not {self.order_buckets}")
        if self.width < self.header_bits:
            raise ValueError(f"width {self.width} cannot hold the {self.header_bits}-bit header")

    # Derived sizes ------------------------------------------------------------------------------
    @property
    def vc_bits(self):
        return max(1, ceil_log2(self.vcs))

    @property
    def dynamic_vcs(self):
        return self.order_buckets > 0

    @property
    def bucket_bits(self):
        return max(1, ceil_log2(self.order_buckets))

    @property
    def class_bits(self):
        return max(1, ceil_log2(self.classes))

    @property
    def vcs_per_class(self):
        return self.vcs // self.classes

    @property
    def header_bits(self):
        return 4 * self.coord_bits + self.class_bits + LENGTH_BITS

    @property
    def max_side(self):
        """The largest mesh side the header can address."""
        return 1 << self.coord_bits

    def class_of_vc(self, vc):
        return vc // self.vcs_per_class

    def vcs_of_class(self, cls):
        return range(cls * self.vcs_per_class, (cls + 1) * self.vcs_per_class)

    # Layouts ------------------------------------------------------------------------------------
    @property
    def flit_layout(self):
        """A flit on a link: payload, head and tail marks, the VC it travels on, and (head flits) its
        one-hot output port at the receiving router."""
        return data.StructLayout({"data": self.width, "head": 1, "tail": 1, "vc": self.vc_bits,
                                  "route": PORTS})

    @property
    def buffer_layout(self):
        """A flit as a router's input buffer stores it: the VC is implied by where it is stored, and
        ``route`` is already the next router's (computed on arrival)."""
        return data.StructLayout({"data": self.width, "head": 1, "tail": 1, "route": PORTS})

    @property
    def header_layout(self):
        """The ``data`` of a head flit."""
        cb = self.coord_bits
        return data.StructLayout({
            "dest_x": cb, "dest_y": cb, "src_x": cb, "src_y": cb,
            "mclass": self.class_bits, "length": LENGTH_BITS,
            "user": self.width - self.header_bits,
        })

    @property
    def message_layout(self):
        """One word of a message on a network interface stream: the first word is the header."""
        return data.StructLayout({"data": self.width, "last": 1})

    @property
    def link_signature(self):
        return LinkSignature(self)


class LinkSignature(wiring.Signature):
    """One direction of a fabric link, seen from the sender.

    Members
    -------
    valid : Out(1)
        A flit is on the link this cycle. There is no ready: the sender only sends with a credit.
    flit : Out(:meth:`NocParams.flit_layout`)
        The flit, meaningful when ``valid``.
    credit : In(vcs)
        One bit per VC: the receiver freed one buffer of that VC. Several bits may be set at once.

    The receiver starts with ``depth`` free buffers per VC, and the sender with as many credits.
    """

    def __init__(self, params):
        self._params = params
        super().__init__({
            "valid": Out(1),
            "flit": Out(params.flit_layout),
            "credit": In(params.vcs),
        })

    @property
    def params(self):
        return self._params

    def __eq__(self, other):
        return isinstance(other, LinkSignature) and other._params == self._params

    def __hash__(self):
        return hash(self._params)

    def __repr__(self):
        return f"LinkSignature({self._params!r})"


def xy_route(x, y, dest_x, dest_y):
    """One-hot output port (bit ``N``..``L``) of XY routing at router ``(x, y)`` towards ``dest``.

    ``x`` and ``y`` are Python ints, ``dest_x`` and ``dest_y`` Amaranth values.
    """
    def beyond(dest, c):        # dest > c, without a comparison that is constant
        return dest > c if c < (1 << len(dest)) - 1 else Const(0, 1)

    def before(dest, c):        # dest < c, likewise
        return dest < c if c > 0 else Const(0, 1)

    east, west, north, south = beyond(dest_x, x), before(dest_x, x), beyond(dest_y, y), before(dest_y, y)
    along_x = east | west
    return Cat(~along_x & north, east, ~along_x & south, west, ~along_x & ~north & ~south)


def order_bucket(params, src_x, src_y, dest_x, dest_y):
    """The order bucket of the flow ``(source, destination)``: a hash of ``bucket_bits`` bits.

    Each coordinate is folded to ``bucket_bits`` bits and rotated by its position before the four are
    XORed, so flows that differ in one coordinate differ in their bucket.
    """
    bb = params.bucket_bits
    out = Const(0, bb)
    for j, coord in enumerate((src_x, src_y, dest_x, dest_y)):
        folded = Const(0, bb)
        for lo in range(0, len(coord), bb):
            folded = folded ^ coord[lo:lo + bb]
        folded = Cat(folded, Const(0, bb))[:bb]
        rot = j % bb
        out = out ^ (Cat(folded[bb - rot:], folded[:bb - rot]) if rot else folded)
    return out


def flow_vc(params, mclass, src_x, src_y, dest_x, dest_y):
    """The VC of every packet of the flow ``(source, destination, mclass)``, as an Amaranth value.

    VCs are static (see :class:`~rtl.noc.router.Router`): the network interface puts a packet on this
    VC and every router forwards it on the VC of the same number, so the packets of one flow share one
    FIFO on every link and stay in order. The flows of a class are spread over its
    ``vcs_per_class`` VCs by the XOR of the four coordinates (so both the flows leaving one node and
    the flows reaching one node use every VC of the class)::

        vc = mclass * vcs_per_class + (src_x ^ src_y ^ dest_x ^ dest_y) % vcs_per_class

    :func:`sim_models.noc.flow_vc` is the same function in Python.
    """
    vpc = params.vcs_per_class
    base = (mclass * vpc)[:params.vc_bits]
    if vpc == 1:
        return base
    mix = src_x ^ src_y ^ dest_x ^ dest_y
    if vpc & (vpc - 1) == 0:
        index = mix[:ceil_log2(vpc)]
    else:
        index = mix % vpc
    return (base + index)[:params.vc_bits]


# Traffic generator and checker (synthesizable, beside each network interface) -------------------

#: Destination patterns of the traffic generator, by register code.
TRAFFIC_PATTERNS = ("uniform", "transpose", "bitcomp", "hotspot", "neighbor")

#: Bits of :func:`traffic_tag_layout`; a fabric carries generated traffic if its ``user`` field holds them.
TRAFFIC_TAG_BITS = 41


def traffic_tag_layout():
    """What the traffic generator keeps in a head flit's ``user`` field (``sim_models.noc_traffic.tag``)."""
    return data.StructLayout({"ts": 24, "seq": 16, "measured": 1})


def traffic_config_layout(params):
    """Run-time configuration of every traffic generator and checker of a mesh.

    ``rate``: a packet is created in a cycle when a 16-bit random number is below it (so rate/65536
    packets per cycle, up to 65536); ``length``: flits per packet; ``pattern``: index into
    :data:`TRAFFIC_PATTERNS`; ``cls``/``cls_random``: the message class of every packet, or a random one;
    ``hot_x``/``hot_y``/``hot_rate``: the hotspot node and the probability (out of 65536) that a hotspot
    packet goes to it; ``stall``: probability (out of 65536) that a checker takes no word in a cycle;
    ``seed``: seeds every random generator; ``warmup``/``measure``: the measurement window in cycles;
    ``hist_shift``: latency histogram bins are ``2**hist_shift`` cycles wide.
    The exact meaning of every field is the contract in :mod:`sim_models.noc_traffic`.
    """
    cb = params.coord_bits
    return data.StructLayout({
        "rate": 17, "length": LENGTH_BITS, "pattern": 3,
        "cls": params.class_bits, "cls_random": 1,
        "hot_x": cb, "hot_y": cb, "hot_rate": 17, "stall": 16,
        "seed": 32, "warmup": 32, "measure": 32, "hist_shift": 3,
    })
