"""Synthesizable traffic generator: Bernoulli packet creation, source queues and packetization."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.common.xorshift import start_state, xorshift64_next
from sim_models.noc_traffic import GENERATOR, TS_BITS, body_salt, node_key

from .layouts import TRAFFIC_PATTERNS, TRAFFIC_TAG_BITS, traffic_config_layout, traffic_tag_layout
from .vc_buffer import select

__all__ = ["TrafficGenerator", "check_traffic_params", "salt_of"]


def check_traffic_params(component, params):
    """Raise unless the fabric's header can carry a traffic tag and its class count is a power of 2."""
    user = params.width - params.header_bits
    if user < TRAFFIC_TAG_BITS:
        raise parameter_error(component, ValueError,
                              f"generated traffic needs {TRAFFIC_TAG_BITS} user bits in the header; "
                              f"{params.width}-bit flits leave {user}")
    if params.classes & (params.classes - 1):
        raise parameter_error(component, ValueError,
                              f"generated traffic needs a power-of-2 number of classes, not {params.classes}")


def salt_of(k, width):
    """``body_salt(k)`` for a word index signal ``k`` (0 for index 0), as a multiplexer."""
    return select([Const(0, width)] + [Const(body_salt(n, width), width) for n in range(1, 16)], k)


class TrafficGenerator(wiring.Component):
    """The packet source of node ``(x, y)`` of a ``kx`` by ``ky`` mesh (contract: ``sim_models.noc_traffic``).

    Each run cycle in which ``create`` is high the generator draws a random number and may create one
    packet, which waits in its class's source queue (``queue_depth`` packets, in a memory) until it is
    sent on that class's ``tx`` stream, one word per cycle.

    Interface attributes
    --------------------
    config : In(traffic_config_layout)
        Traffic parameters; must stay unchanged during a run.
    load : In(1)
        Start a run at the next cycle: load the random state from ``mixed_seed``, clear the counters
        and sequence numbers, empty the queues.
    mixed_seed : In(64)
        ``mix_seed(config.seed)``, computed once for the whole mesh.
    create, measuring : In(1)
        This cycle is a creation cycle / of the measurement window (created packets are measured).
    now : In(32)
        Run cycle; its low 24 bits are the time stamp of created packets.
    tx : Out(stream.Signature(message_layout)).array(classes)
        To the network interface.
    created : Out(32)
        Packets created in this run.
    overflow : Out(16)
        Creations refused because the class's queue was full (saturating); any is an error of the run.
    idle : Out(1)
        No packet waits or is being sent.

    Latency and throughput
    ----------------------
    A packet created in cycle ``t`` offers its header on ``tx`` in cycle ``t + 1`` at the earliest.
    One word per cycle per class.
    """

    def __init__(self, params, x, y, kx, ky, *, queue_depth=256):
        check_traffic_params(self, params)
        if not (0 <= x < kx and 0 <= y < ky and kx <= params.max_side and ky <= params.max_side):
            raise parameter_error(self, ValueError, f"node ({x}, {y}) is outside the {kx}x{ky} mesh")
        if queue_depth < 2 or queue_depth & (queue_depth - 1):
            raise parameter_error(self, ValueError, f"queue_depth must be a power of 2, not {queue_depth!r}")
        self._params, self._x, self._y, self._kx, self._ky = params, x, y, kx, ky
        self._queue_depth = queue_depth
        msg = stream.Signature(params.message_layout)
        super().__init__({
            "config": In(traffic_config_layout(params)),
            "load": In(1),
            "mixed_seed": In(64),
            "create": In(1),
            "measuring": In(1),
            "now": In(32),
            "tx": Out(msg).array(params.classes),
            "created": Out(32),
            "overflow": Out(16),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        x, y, kx, ky = self._x, self._y, self._kx, self._ky
        cb = p.coord_bits
        cfg = self.config
        n = kx * ky
        index = y * kx + x

        # Random draw of this cycle.
        state = Signal(64, name="state")
        r = Signal(64, name="r")
        m.d.comb += r.eq(xorshift64_next(state))
        with m.If(self.load):
            m.d.sync += state.eq(start_state(self.mixed_seed, node_key(index, GENERATOR)))
        with m.Elif(self.create):
            m.d.sync += state.eq(r)

        # Destination.
        others = [(k % kx, k // kx) for k in range(n) if k != index] or [(x, y)]
        pick = Signal(range(max(2, len(others))), name="uniform_pick")
        m.d.comb += pick.eq((r[16:32] * (n - 1 if n > 1 else 1)) >> 16)
        uniform = Signal(2 * cb, name="uniform_dest")
        m.d.comb += uniform.eq(select([Const(ox | (oy << cb), 2 * cb) for ox, oy in others], pick))
        fixed = {
            "transpose": (y, x), "bitcomp": (kx - 1 - x, ky - 1 - y), "neighbor": ((x + 1) % kx, y),
        }
        dest = Signal(2 * cb, name="dest")
        hot = Cat(cfg.hot_x, cfg.hot_y)
        with m.Switch(cfg.pattern):
            for name, (dx, dy) in fixed.items():
                with m.Case(TRAFFIC_PATTERNS.index(name)):
                    m.d.comb += dest.eq(Const((dx | (dy << cb)) & ((1 << 2 * cb) - 1), 2 * cb))
            with m.Case(TRAFFIC_PATTERNS.index("hotspot")):
                m.d.comb += dest.eq(Mux(r[32:48] < cfg.hot_rate, hot, uniform))
            with m.Default():
                m.d.comb += dest.eq(uniform)
        cls = Signal(p.class_bits, name="cls")
        cls_mask = p.classes - 1
        m.d.comb += cls.eq(Mux(cfg.cls_random, r[48:48 + p.class_bits] & cls_mask, cfg.cls))
        fire = Signal(name="fire")
        m.d.comb += fire.eq(self.create & (r[:16] < cfg.rate))

        entry = data.StructLayout({"ts": TS_BITS, "dest": 2 * cb, "measured": 1})
        Q = self._queue_depth
        idles = []
        refused = Signal(name="refused")
        refusals = []
        for c in range(p.classes):
            m.submodules[f"queue{c}"] = mem = Memory(shape=entry, depth=Q, init=[])
            wp = mem.write_port()
            rp = mem.read_port(domain="comb")
            wptr = Signal(range(Q), name=f"wptr{c}")
            rptr = Signal(range(Q), name=f"rptr{c}")
            count = Signal(range(Q + 1), name=f"count{c}")
            push = Signal(name=f"push{c}")
            pop = Signal(name=f"pop{c}")
            mine = fire & (cls == c)
            m.d.comb += [
                push.eq(mine & (count != Q)),
                wp.addr.eq(wptr), wp.en.eq(push),
                wp.data.ts.eq(self.now[:TS_BITS]), wp.data.dest.eq(dest), wp.data.measured.eq(self.measuring),
                rp.addr.eq(rptr),
            ]
            refusals.append(mine & (count == Q))

            # Packetizer: the header from the queue head, then the body words.
            tx = self.tx[c]
            head = rp.data
            busy = Signal(name=f"busy{c}")
            k = Signal(4, name=f"word{c}")
            seq = Signal(16, name=f"seq{c}")
            header = Signal(p.header_layout, name=f"header{c}")
            held = Signal(p.width, name=f"held{c}")
            tag = Signal(traffic_tag_layout(), name=f"tag{c}")
            m.d.comb += [
                tag.ts.eq(head.ts), tag.seq.eq(seq), tag.measured.eq(head.measured),
                header.dest_x.eq(head.dest[:cb]), header.dest_y.eq(head.dest[cb:]),
                header.src_x.eq(x), header.src_y.eq(y), header.mclass.eq(c),
                header.length.eq(cfg.length), header.user.eq(tag),
            ]
            last = Signal(name=f"last{c}")
            m.d.comb += [
                last.eq(Mux(busy, k, 0) == cfg.length - 1),
                tx.valid.eq(busy | (count != 0)),
                tx.payload.data.eq(Mux(busy, held ^ salt_of(k, p.width), header.as_value())),
                tx.payload.last.eq(last),
                pop.eq(~busy & tx.valid & tx.ready),
            ]
            with m.If(tx.valid & tx.ready):
                with m.If(~busy):
                    m.d.sync += [held.eq(header.as_value()), seq.eq(seq + 1), rptr.eq(rptr + 1)]
                m.d.sync += [busy.eq(~last), k.eq(Mux(last, 0, Mux(busy, k, 0) + 1))]
            with m.If(push):
                m.d.sync += wptr.eq(wptr + 1)
            m.d.sync += count.eq(count + push - pop)
            idles.append(~busy & (count == 0))
            with m.If(self.load):
                m.d.sync += [busy.eq(0), k.eq(0), seq.eq(0), wptr.eq(0), rptr.eq(0), count.eq(0)]

        m.d.comb += [refused.eq(Cat(*refusals).any()), self.idle.eq(Cat(*idles).all())]
        with m.If(self.load):
            m.d.sync += [self.created.eq(0), self.overflow.eq(0)]
        with m.Else():
            with m.If(fire & ~refused):
                m.d.sync += self.created.eq(self.created + 1)
            with m.If(refused & (self.overflow != 0xFFFF)):
                m.d.sync += self.overflow.eq(self.overflow + 1)
        return m
