"""Reference model of the on-chip fabric (``rtl/noc``): delivery contract and zero-load latency.

Contract of the network (what :class:`NetworkModel` checks)
-----------------------------------------------------------
A message is a list of words; its first word is the header (the bit fields of
:func:`header_word`, least significant field first, exactly as :meth:`rtl.noc.layouts.NocParams.header_layout`
packs them). The injecting network interface overwrites ``src_x``, ``src_y`` and ``mclass`` with its own
coordinates and the class of the stream the message arrived on, and leaves every other bit alone.
Every message addressed inside the mesh is delivered

* exactly once, at the node ``(dest_x, dest_y)``, on the stream of its class;
* intact: the same number of words, every word equal (the header as rewritten above);
* in order per flow: the messages of one ``(source, destination, class)`` arrive in the order they
  were accepted at the source.

Messages addressed outside the mesh are consumed and dropped by the injecting interface
(:meth:`NetworkModel.send` returns ``False`` for them and counts them in ``dropped``).

How the fabric keeps that order is not part of the contract. :func:`flow_vc` states the VC every
packet of a flow is injected on. With static VCs (the default) the packet keeps that VC end to end;
with dynamic VCs the routers may move it to another VC of its class, but never while an earlier
packet of the flow is still in a different VC of the next buffer.

Zero-load latency (what :func:`zero_load_latency` gives)
--------------------------------------------------------
Cycles from the cycle a message's header is transferred on the source interface's ``tx`` stream to
the cycle its last word is transferred on the destination's ``rx`` stream, when nothing else is in
the network and the receiver is always ready::

    latency = INJECT + 2 * hops + EJECT + (length - 1),   hops = |dx| + |dy|   (XY routing)

with ``INJECT = 2`` (injection queue, link register into the local router), two cycles per router
(allocation while the flit is written into its input buffer; traversal into the output link
register), and ``EJECT = 1`` (the ejection buffer offers the flit the cycle after it arrives). A
message to its own node crosses one router: ``2 + 2 + 1 = 5`` cycles. Each further hop adds one router
(2 cycles; the link is the output register of the upstream router). Words follow the header one per
cycle.
"""

from collections import deque
from dataclasses import dataclass, field

__all__ = [
    "INJECT_CYCLES", "ROUTER_CYCLES", "EJECT_CYCLES", "LENGTH_BITS", "HeaderFormat",
    "hops", "flow_vc", "zero_load_latency", "zero_load_table", "average_zero_load_latency",
    "PATTERNS", "destination", "NetworkModel", "DeliveryCounts",
]

INJECT_CYCLES = 2
ROUTER_CYCLES = 2
EJECT_CYCLES = 1
LENGTH_BITS = 4


@dataclass(frozen=True)
class HeaderFormat:
    """The header bit fields (mirrors ``NocParams.header_layout``): coordinates, class, length, user."""
    width: int = 64
    coord_bits: int = 4
    class_bits: int = 1

    @property
    def header_bits(self):
        return 4 * self.coord_bits + self.class_bits + LENGTH_BITS

    @property
    def user_bits(self):
        return self.width - self.header_bits

    def fields(self):
        cb = self.coord_bits
        return (("dest_x", cb), ("dest_y", cb), ("src_x", cb), ("src_y", cb),
                ("mclass", self.class_bits), ("length", LENGTH_BITS), ("user", self.user_bits))

    def pack(self, **values):
        """Header word from field values (missing fields are 0); fields must fit."""
        word, shift = 0, 0
        for name, bits in self.fields():
            value = values.pop(name, 0)
            if not 0 <= value < (1 << bits):
                raise ValueError(f"header field {name} = {value} does not fit {bits} bits")
            word |= value << shift
            shift += bits
        if values:
            raise TypeError(f"unknown header fields {sorted(values)}")
        return word

    def unpack(self, word):
        out, shift = {}, 0
        for name, bits in self.fields():
            out[name] = (word >> shift) & ((1 << bits) - 1)
            shift += bits
        return out

    def rewrite(self, word, src, mclass):
        """The header as the injecting interface at ``src`` forwards it on class ``mclass``."""
        h = self.unpack(word)
        h.update(src_x=src[0], src_y=src[1], mclass=mclass)
        return self.pack(**h)


def hops(src, dst):
    """Router-to-router links an XY-routed packet crosses from ``src`` to ``dst``."""
    return abs(src[0] - dst[0]) + abs(src[1] - dst[1])


def flow_vc(src, dst, mclass, *, vcs, classes):
    """The injection VC of every packet of the flow ``(src, dst, mclass)`` (``rtl.noc.layouts.flow_vc``).

    ``vcs`` VCs split evenly between ``classes``; the class's VC is chosen by the XOR of the four
    coordinates.
    """
    if vcs % classes or not 0 <= mclass < classes:
        raise ValueError(f"class {mclass} of {classes} with {vcs} VCs")
    per_class = vcs // classes
    return mclass * per_class + (src[0] ^ src[1] ^ dst[0] ^ dst[1]) % per_class


def zero_load_latency(src, dst, length=1):
    """Exact zero-load latency in cycles, header on ``tx`` to last word on ``rx`` (module docstring)."""
    if length < 1:
        raise ValueError(f"a packet has at least one flit, not {length}")
    return INJECT_CYCLES + ROUTER_CYCLES * (hops(src, dst) + 1) + EJECT_CYCLES + (length - 1)


def zero_load_table(kx, ky, length=1):
    """``{(src, dst): latency}`` for every ordered pair of nodes of a ``kx`` by ``ky`` mesh."""
    nodes = [(x, y) for y in range(ky) for x in range(kx)]
    return {(s, d): zero_load_latency(s, d, length) for s in nodes for d in nodes}


# Traffic patterns -------------------------------------------------------------------------------

PATTERNS = ("uniform", "transpose", "bitcomp", "hotspot", "neighbor")


def destination(pattern, src, kx, ky, rng, *, hotspot=(0, 0), hot_fraction=0.25):
    """Destination of a packet from ``src`` under ``pattern`` (``rng``: a ``random.Random``-like object).

    ``uniform``: any other node, equally likely (never ``src`` itself, unless the mesh has one node);
    ``transpose``: ``(y, x)`` (square meshes); ``bitcomp``: ``(kx-1-x, ky-1-y)``; ``hotspot``: the
    hotspot node with probability ``hot_fraction``, else uniform; ``neighbor``: ``((x+1) mod kx, y)``.
    """
    x, y = src
    if pattern == "uniform":
        n = kx * ky
        if n == 1:
            return src
        k = rng.randrange(n - 1)
        if k >= y * kx + x:
            k += 1
        return (k % kx, k // kx)
    if pattern == "transpose":
        if kx != ky:
            raise ValueError("transpose traffic needs a square mesh")
        return (y, x)
    if pattern == "bitcomp":
        return (kx - 1 - x, ky - 1 - y)
    if pattern == "hotspot":
        if rng.random() < hot_fraction:
            return tuple(hotspot)
        return destination("uniform", src, kx, ky, rng)
    if pattern == "neighbor":
        return ((x + 1) % kx, y)
    raise ValueError(f"unknown traffic pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")


def average_zero_load_latency(pattern, kx, ky, length=1, *, hotspot=(0, 0), hot_fraction=0.25):
    """Expected zero-load latency of one packet under ``pattern``, averaged over sources and destinations."""
    nodes = [(x, y) for y in range(ky) for x in range(kx)]
    total = 0.0
    for s in nodes:
        if pattern in ("uniform", "hotspot"):
            others = [d for d in nodes if d != s] or [s]
            uni = sum(zero_load_latency(s, d, length) for d in others) / len(others)
            if pattern == "uniform":
                total += uni
            else:
                hot = zero_load_latency(s, tuple(hotspot), length)
                total += hot_fraction * hot + (1 - hot_fraction) * uni
        else:
            total += zero_load_latency(s, destination(pattern, s, kx, ky, None), length)
    return total / len(nodes)


# Transaction-level network -----------------------------------------------------------------------

@dataclass
class DeliveryCounts:
    """What :class:`NetworkModel` has seen: every count but ``delivered``/``sent``/``dropped`` must be 0."""
    sent: int = 0
    dropped: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupted: int = 0
    reordered: int = 0
    misrouted: int = 0

    @property
    def clean(self):
        return not (self.lost or self.duplicated or self.corrupted or self.reordered or self.misrouted)


@dataclass
class _Pending:
    words: tuple
    order: int


@dataclass
class NetworkModel:
    """The ideal fabric of a ``kx`` by ``ky`` mesh: what must come out for what went in.

    Call :meth:`send` when a message's last word is accepted at its source (in acceptance order per
    source and class), :meth:`deliver` when a whole message has come out of an ``rx`` stream, and
    :meth:`finish` at the end. Messages must be distinguishable within a flow (the testbenches put a
    sequence number in the header's ``user`` field). Set ``strict`` to raise ``AssertionError`` on the
    first violation; otherwise the violations are counted in :attr:`counts`.
    """
    kx: int
    ky: int
    fmt: HeaderFormat = field(default_factory=HeaderFormat)
    strict: bool = True
    counts: DeliveryCounts = field(default_factory=DeliveryCounts)

    def __post_init__(self):
        self._flows = {}          # (src, dst, cls) -> deque of _Pending
        self._done = {}           # (src, dst, cls) -> set of delivered word tuples
        self._order = 0

    def _fail(self, kind, message):
        setattr(self.counts, kind, getattr(self.counts, kind) + 1)
        if self.strict:
            raise AssertionError(f"{kind}: {message}")

    def send(self, src, cls, words):
        """Message ``words`` accepted at node ``src`` on class ``cls``; ``False`` if it is dropped."""
        words = list(words)
        h = self.fmt.unpack(words[0])
        dst = (h["dest_x"], h["dest_y"])
        if not (dst[0] < self.kx and dst[1] < self.ky):
            self.counts.dropped += 1
            return False
        words[0] = self.fmt.rewrite(words[0], src, cls)
        self._flows.setdefault((tuple(src), dst, cls), deque()).append(_Pending(tuple(words), self._order))
        self._order += 1
        self.counts.sent += 1
        return True

    def expected(self, src, dst, cls):
        """The messages of a flow still to be delivered, oldest first."""
        return [list(p.words) for p in self._flows.get((tuple(src), tuple(dst), cls), ())]

    def outstanding(self):
        return sum(len(q) for q in self._flows.values())

    def deliver(self, node, cls, words):
        """A whole message came out of node ``node``'s ``rx`` stream of class ``cls``."""
        words = tuple(words)
        h = self.fmt.unpack(words[0])
        src, dst = (h["src_x"], h["src_y"]), (h["dest_x"], h["dest_y"])
        key = (src, tuple(node), cls)
        if dst != tuple(node) or h["mclass"] != cls:
            self._fail("misrouted", f"message for {dst} class {h['mclass']} came out at {tuple(node)} "
                                    f"class {cls}")
            return
        queue = self._flows.get(key, deque())
        if queue and queue[0].words == words:
            queue.popleft()
            self._done.setdefault(key, set()).add(words)
            self.counts.delivered += 1
            return
        for k, pending in enumerate(queue):
            if pending.words == words:
                del queue[k]
                self._done.setdefault(key, set()).add(words)
                self.counts.delivered += 1
                self._fail("reordered", f"flow {key}: message {k} of {len(queue) + 1} pending overtook "
                                        "older ones")
                return
        if words in self._done.get(key, ()):
            self._fail("duplicated", f"flow {key}: message delivered twice: {_short(words)}")
            return
        self._fail("corrupted", f"flow {key}: message matches nothing sent: {_short(words)}; "
                                f"oldest pending {_short(queue[0].words) if queue else None}")

    def finish(self):
        """Count (or raise on) messages never delivered; returns :attr:`counts`."""
        missing = self.outstanding()
        if missing:
            self.counts.lost += missing
            if self.strict:
                first = next((k, q[0].words) for k, q in self._flows.items() if q)
                raise AssertionError(f"lost: {missing} message(s) never delivered, first of flow "
                                     f"{first[0]}: {_short(first[1])}")
        return self.counts


def _short(words):
    text = ", ".join(f"{w:#x}" for w in list(words)[:4])
    return f"[{text}{', ...' if len(words) > 4 else ''}] ({len(words)} words)"
