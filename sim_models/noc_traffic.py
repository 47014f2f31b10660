"""Reference model of the synthesizable traffic generators and checkers (``rtl/noc/traffic_*.py``).

The generators decide everything about the traffic from their seed alone, independent of how the
network treats it, so this model predicts, bit for bit, every packet each node creates and what each
node must receive. The checkers measure what the network did; :class:`CheckerModel` gives, for any
sequence of received words, the exact counters a checker reports.

Random numbers
--------------
Every generator and checker owns one xorshift64 generator (:func:`xorshift64`: ``x ^= x << 13;
x ^= x >> 7; x ^= x << 17``, modulo 2**64), stepped once per cycle while it runs. Its start state is
``mix_seed(seed) ^ node_key(index, role)``, or ``node_key`` alone in the (practically impossible) case
that this is zero; ``index = y * kx + x``.

Generator contract (one per node, ``config`` as in :func:`rtl.noc.layouts.traffic_config_layout`)
----------------------------------------------------------------------------------------------------
Run cycle ``t`` counts from 0, the cycle after ``start``. In each cycle ``t < warmup + measure`` the
generator steps its random state to ``r`` and:

* creates a packet if ``r[0:16] < rate`` (so ``rate / 65536`` packets per cycle);
* its class is ``r[48:] & (classes - 1)`` if ``cls_random`` (else ``cls``; ``classes`` is a power of 2);
* its destination follows ``pattern``: ``uniform`` takes the ``k``-th other node in index order,
  ``k = (r[16:32] * (n - 1)) >> 16`` (``n`` nodes; a one-node mesh sends to itself); ``hotspot`` takes
  ``(hot_x, hot_y)`` if ``r[32:48] < hot_rate`` and the uniform choice otherwise; ``transpose``
  ``(y, x)``; ``bitcomp`` ``(kx-1-x, ky-1-y)``; ``neighbor`` ``((x+1) mod kx, y)``;
* it is *measured* if ``warmup <= t``;
* its sequence number is the count of packets of its class this node created before it (mod 2**16).

The packet waits in the class's source queue (``queue_depth`` packets; creation with the queue full
is an error the generator counts, and this model does not predict what follows) and is injected,
``length`` words, one per cycle while the stream is ready. Word 0 is the header with ``user`` =
:func:`tag` (time stamp ``t mod 2**24``, sequence number, measured bit); word ``k`` is
``header ^ body_salt(k, width)``.

Checker contract
----------------
A checker takes at most one word per cycle from its node's ``rx`` streams (the lowest class offering
one, rotating priority after every word), except in cycles it stalls (``r[0:16] < stall``, stepped every
cycle while running). It counts, see :class:`CheckerModel`: words received in the measurement window
(run cycles ``warmup <= t < warmup + measure``), packets received, for *measured* packets their count,
latency sum and maximum and a latency histogram, the signature sum of every packet's
:func:`flow_tag`, and three error counts:

* ``corrupted``: a header for another node or class, a length other than the configured one, a body
  word that is not ``header ^ body_salt(k)``, or ``last`` on the wrong word;
* ``duplicated``: a packet whose sequence number equals the last one received from its (source, class);
* ``reordered``: one whose sequence number is older than that (by modulo 2**16 distance).

Counters wrap at their widths (32 bits; the latency sum 48), the error counts and histogram bins
saturate at 65535. Latency is ``t - ts`` modulo 2**24 at the packet's last word, and goes to bin
``min(latency >> hist_shift, HIST_BINS - 1)``.

A network that delivers exactly once, intact and in order per flow leaves the three error counts at
zero and makes each node's packet count and signature equal :func:`expected_deliveries`.
"""

from dataclasses import dataclass, field

from sim_models.noc import PATTERNS

__all__ = [
    "MASK64", "GOLDEN64", "TS_BITS", "SEQ_BITS", "HIST_BINS", "xorshift64", "mix_seed", "node_key",
    "body_salt", "tag", "untag", "class_bits", "flow_tag", "TrafficConfig", "Packet", "generate",
    "expected_deliveries", "CheckerModel",
]

MASK64 = (1 << 64) - 1
#: The 64-bit golden-ratio constant: seeds are multiplied by it, body salts are its multiples.
GOLDEN64 = 0x9E3779B97F4A7C15
TS_BITS = 24
SEQ_BITS = 16
#: Latency histogram bins of a checker; the last bin also holds every larger latency.
HIST_BINS = 1024

GENERATOR, CHECKER = 0, 1


def xorshift64(state):
    """One step of the xorshift64 generator (13, 7, 17)."""
    state ^= (state << 13) & MASK64
    state ^= state >> 7
    state ^= (state << 17) & MASK64
    return state


def mix_seed(seed):
    """The run seed spread over 64 bits (``seed * GOLDEN64 mod 2**64``), shared by all nodes."""
    return (seed * GOLDEN64) & MASK64


def _splitmix64(value):
    value = (value + GOLDEN64) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def node_key(index, role):
    """Elaboration-time constant that makes each node's (and role's) random stream its own."""
    return _splitmix64(2 * index + role) or 1


def start_state(seed, index, role):
    key = node_key(index, role)
    return (mix_seed(seed) ^ key) or key


def body_salt(k, width):
    """What body word ``k`` (1..15) of a generated packet is XORed with: ``k * GOLDEN64``, cut to width."""
    return (k * GOLDEN64) & ((1 << width) - 1)


def tag(ts, seq, measured):
    """The ``user`` field of a generated header (``rtl.noc.layouts.traffic_tag_layout``)."""
    return (ts & ((1 << TS_BITS) - 1)) | ((seq & 0xFFFF) << TS_BITS) | (int(bool(measured)) << 40)


def untag(user):
    return user & ((1 << TS_BITS) - 1), (user >> TS_BITS) & 0xFFFF, (user >> 40) & 1


def class_bits(classes):
    return max(1, (classes - 1).bit_length())


def flow_tag(src_index, cls, seq, classes=2):
    """A packet's term of the per-node signature sum: ``seq``, ``cls`` and ``src_index`` concatenated
    (least significant first; ``cls`` takes ``class_bits(classes)`` bits), cut to 32 bits."""
    cb = class_bits(classes)
    return ((src_index << (16 + cb)) | (cls << 16) | (seq & 0xFFFF)) & 0xFFFFFFFF


@dataclass(frozen=True)
class TrafficConfig:
    """Run-time configuration of every generator and checker (fields of ``traffic_config_layout``)."""
    rate: int = 0
    length: int = 4
    pattern: str = "uniform"
    cls: int = 0
    cls_random: bool = True
    hot_x: int = 0
    hot_y: int = 0
    hot_rate: int = 16384
    stall: int = 0
    seed: int = 1
    warmup: int = 0
    measure: int = 1000
    hist_shift: int = 0

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown traffic pattern {self.pattern!r}; choose one of {', '.join(PATTERNS)}")
        limits = dict(rate=1 << 16, length=15, hot_rate=1 << 16, stall=(1 << 16) - 1, seed=(1 << 32) - 1,
                      warmup=(1 << 31) - 1, measure=(1 << 31) - 1, hist_shift=7)
        for name, top in limits.items():
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError(f"{name} must be an integer 0..{top}, not {value!r}")
        if self.length < 1:
            raise ValueError("length must be 1..15 flits")

    @classmethod
    def from_rate(cls, rate, length, **kwargs):
        """Offered ``rate`` flits per node per cycle with ``length``-flit packets, as a register value."""
        return cls(rate=round(rate / length * 65536), length=length, **kwargs)

    @property
    def offered(self):
        """The offered load this configuration stands for, in flits per node per cycle."""
        return self.rate / 65536 * self.length

    def as_fields(self):
        """The values of the ``traffic_config_layout`` fields (the pattern as its index)."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values["pattern"] = PATTERNS.index(self.pattern)
        values["cls_random"] = int(self.cls_random)
        return values


@dataclass(frozen=True)
class Packet:
    """A packet as a generator creates it."""
    t: int
    src: tuple
    dst: tuple
    cls: int
    seq: int
    measured: bool


def _destination(cfg, src, kx, ky, r):
    x, y = src
    n = kx * ky
    if cfg.pattern in ("uniform", "hotspot"):
        if cfg.pattern == "hotspot" and ((r >> 32) & 0xFFFF) < cfg.hot_rate:
            return (cfg.hot_x, cfg.hot_y)
        if n == 1:
            return src
        k = (((r >> 16) & 0xFFFF) * (n - 1)) >> 16
        if k >= y * kx + x:
            k += 1
        return (k % kx, k // kx)
    if cfg.pattern == "transpose":
        return (y, x)
    if cfg.pattern == "bitcomp":
        return (kx - 1 - x, ky - 1 - y)
    return ((x + 1) % kx, y)


def generate(cfg, src, kx, ky, classes=2):
    """Every packet node ``src`` of a ``kx`` by ``ky`` mesh creates under ``cfg``, in creation order."""
    x, y = src
    state = start_state(cfg.seed, y * kx + x, GENERATOR)
    seqs = [0] * classes
    out = []
    for t in range(cfg.warmup + cfg.measure):
        state = xorshift64(state)
        if (state & 0xFFFF) >= cfg.rate:
            continue
        cls = (state >> 48) & (classes - 1) if cfg.cls_random else cfg.cls
        out.append(Packet(t, tuple(src), _destination(cfg, src, kx, ky, state), cls, seqs[cls],
                          t >= cfg.warmup))
        seqs[cls] = (seqs[cls] + 1) & 0xFFFF
    return out


def expected_deliveries(cfg, kx, ky, classes=2):
    """``{node: (packets, signature)}`` that every node's checker must end with."""
    out = {(x, y): [0, 0] for y in range(ky) for x in range(kx)}
    for y in range(ky):
        for x in range(kx):
            for pkt in generate(cfg, (x, y), kx, ky, classes):
                entry = out[pkt.dst]
                entry[0] += 1
                entry[1] = (entry[1] + flow_tag(y * kx + x, pkt.cls, pkt.seq, classes)) & 0xFFFFFFFF
    return {node: tuple(v) for node, v in out.items()}


@dataclass
class CheckerModel:
    """The counters of the checker at ``node``, fed one received word at a time.

    ``fmt`` is a :class:`sim_models.noc.HeaderFormat`. Call :meth:`word` for every word the checker
    accepts, with the run cycle ``t`` it is accepted in, in acceptance order.
    """
    node: tuple
    kx: int
    ky: int
    fmt: object
    cfg: TrafficConfig
    classes: int = 2
    window_words: int = 0
    packets: int = 0
    measured: int = 0
    latency_sum: int = 0
    latency_max: int = 0
    signature: int = 0
    corrupted: int = 0
    duplicated: int = 0
    reordered: int = 0
    histogram: list = field(default_factory=lambda: [0] * HIST_BINS)

    def __post_init__(self):
        self._open = {}      # class -> [header, words so far, bad]
        self._last = {}      # (src index, class) -> last sequence number

    def word(self, t, cls, data, last):
        if self.cfg.warmup <= t < self.cfg.warmup + self.cfg.measure:
            self.window_words = (self.window_words + 1) & 0xFFFFFFFF
        width = self.fmt.width
        if cls not in self._open:
            h = self.fmt.unpack(data)
            bad = ((h["dest_x"], h["dest_y"]) != tuple(self.node) or h["mclass"] != cls
                   or h["length"] != self.cfg.length)
            self._open[cls] = [data, 1, bad]
        else:
            entry = self._open[cls]
            header, k, bad = entry
            entry[2] = bad or data != (header ^ body_salt(k, width))
            entry[1] = k + 1
        header, count, bad = self._open[cls]
        bad = bad or bool(last) != (count == self.cfg.length)
        self._open[cls][2] = bad
        if not last:
            return
        del self._open[cls]
        h = self.fmt.unpack(header)
        ts, seq, measured = untag(h["user"])
        src = h["src_y"] * self.kx + h["src_x"]
        self.packets = (self.packets + 1) & 0xFFFFFFFF
        self.signature = (self.signature + flow_tag(src, cls, seq, self.classes)) & 0xFFFFFFFF
        self.corrupted = min(0xFFFF, self.corrupted + bad)
        key = (h["src_x"], h["src_y"], cls)
        if key in self._last:
            ahead = (seq - self._last[key]) & 0xFFFF
            if ahead == 0:
                self.duplicated = min(0xFFFF, self.duplicated + 1)
            elif ahead >= 0x8000:
                self.reordered = min(0xFFFF, self.reordered + 1)
            else:
                self._last[key] = seq
        else:
            self._last[key] = seq
        if measured:
            latency = (t - ts) & ((1 << TS_BITS) - 1)
            self.measured = (self.measured + 1) & 0xFFFFFFFF
            self.latency_sum = (self.latency_sum + latency) & ((1 << 48) - 1)
            self.latency_max = max(self.latency_max, latency)
            b = min(latency >> self.cfg.hist_shift, HIST_BINS - 1)
            self.histogram[b] = min(0xFFFF, self.histogram[b] + 1)
