"""A mesh with a traffic generator and a checker at every node: experiments without a testbench loop."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sim_models.noc_traffic import GOLDEN64, HIST_BINS

from .layouts import traffic_config_layout
from .mesh import Mesh
from .traffic_checker import TrafficChecker, traffic_status_layout
from .traffic_generator import TrafficGenerator, check_traffic_params

__all__ = ["TrafficMesh"]


class TrafficMesh(wiring.Component):
    """A ``kx`` by ``ky`` :class:`~rtl.noc.mesh.Mesh` driven by synthesizable traffic.

    Every node has a :class:`~rtl.noc.traffic_generator.TrafficGenerator` on its ``tx`` streams and a
    :class:`~rtl.noc.traffic_checker.TrafficChecker` on its ``rx`` streams. A testbench sets
    ``config``, pulses ``start`` and waits; the run needs no per-cycle attention.

    Run sequence
    ------------
    ``start`` (one cycle, while not ``busy``) begins ``HIST_BINS`` cycles of clearing the latency
    histograms, then run cycle 0. Packets are created in run cycles ``0 .. warmup + measure - 1``; the
    measurement window is ``warmup .. warmup + measure - 1``. ``now`` keeps counting after that while
    the network drains; ``done`` rises once creation is over, every generator is idle and every packet
    created has been received (it never rises if packets are lost: the testbench's watchdog reports that).

    Interface attributes
    --------------------
    config : In(traffic_config_layout)
    start : In(1)
    busy, running, done : Out(1)
        Clearing or running / running / the run is over (see above).
    now : Out(32)
        Run cycle.
    status_<x>_<y> : Out(traffic_status_layout)
        Counters of node ``(x, y)``.
    hist_addr : In(range(HIST_BINS)); hist_total : Out(32)
        Latency histogram bin ``hist_addr`` summed over all nodes (combinational).
    error : Out(kx * ky)
        The mesh's sticky error flags per node (a packet dropped for its address, or a protocol error).
    """

    def __init__(self, params, kx, ky, *, queue_depth=256, inj_depth=4):
        check_traffic_params(self, params)
        self._mesh = Mesh(params, kx, ky, inj_depth=inj_depth)
        self._params, self._kx, self._ky, self._queue_depth = params, kx, ky, queue_depth
        members = {
            "config": In(traffic_config_layout(params)),
            "start": In(1),
            "busy": Out(1),
            "running": Out(1),
            "done": Out(1),
            "now": Out(32),
            "hist_addr": In(range(HIST_BINS)),
            "hist_total": Out(32),
            "error": Out(kx * ky),
        }
        for y in range(ky):
            for x in range(kx):
                members[f"status_{x}_{y}"] = Out(traffic_status_layout())
        super().__init__(members)

    @property
    def params(self):
        return self._params

    def status(self, x, y):
        return getattr(self, f"status_{x}_{y}")

    def elaborate(self, platform):
        m = Module()
        p, kx, ky = self._params, self._kx, self._ky
        m.submodules.mesh = mesh = self._mesh
        cfg = self.config

        clearing = Signal(name="clearing")
        clear_addr = Signal(range(HIST_BINS), name="clear_addr")
        load = Signal(name="load")
        mixed_seed = Signal(64, name="mixed_seed")
        m.d.comb += mixed_seed.eq((cfg.seed * Const(GOLDEN64, 64))[:64])
        with m.If(self.start & ~self.busy):
            m.d.sync += [clearing.eq(1), clear_addr.eq(0), self.running.eq(0)]
        with m.If(clearing):
            m.d.sync += clear_addr.eq(clear_addr + 1)
            with m.If(clear_addr == HIST_BINS - 1):
                m.d.sync += [clearing.eq(0), self.running.eq(1), self.now.eq(0)]
                m.d.comb += load.eq(1)
        with m.If(self.running):
            m.d.sync += self.now.eq(self.now + 1)
        m.d.comb += self.busy.eq(clearing | (self.running & ~self.done))

        end = Signal(33, name="end")
        create = Signal(name="create")
        window = Signal(name="window")
        m.d.comb += [
            end.eq(cfg.warmup + cfg.measure),
            create.eq(self.running & (self.now < end)),
            window.eq(create & (self.now >= cfg.warmup)),
        ]

        created, received, idles, hist = [], [], [], []
        for y in range(ky):
            for x in range(kx):
                gen = TrafficGenerator(p, x, y, kx, ky, queue_depth=self._queue_depth)
                chk = TrafficChecker(p, x, y, kx, ky)
                m.submodules[f"gen_{x}_{y}"] = gen
                m.submodules[f"chk_{x}_{y}"] = chk
                for c in range(p.classes):
                    wiring.connect(m, gen.tx[c], mesh.tx(x, y)[c])
                    wiring.connect(m, mesh.rx(x, y)[c], chk.rx[c])
                m.d.comb += [
                    gen.config.eq(cfg), gen.load.eq(load), gen.mixed_seed.eq(mixed_seed),
                    gen.create.eq(create), gen.measuring.eq(self.now >= cfg.warmup), gen.now.eq(self.now),
                    chk.config.eq(cfg), chk.load.eq(load), chk.mixed_seed.eq(mixed_seed),
                    chk.clear.eq(clearing), chk.clear_addr.eq(clear_addr),
                    chk.running.eq(self.running), chk.window.eq(window), chk.now.eq(self.now),
                    chk.hist_addr.eq(self.hist_addr),
                ]
                status = self.status(x, y)
                m.d.comb += [status.eq(chk.status), status.created.eq(gen.created),
                             status.overflow.eq(gen.overflow), status.idle.eq(gen.idle)]
                created.append(gen.created)
                received.append(chk.status.packets)
                idles.append(gen.idle)
                hist.append(chk.hist_data)

        total_created = Signal(40, name="total_created")
        total_received = Signal(40, name="total_received")
        m.d.comb += [
            total_created.eq(_sum(created)), total_received.eq(_sum(received)),
            self.done.eq(self.running & ~create & Cat(*idles).all() & (total_created == total_received)),
            self.hist_total.eq(_sum(hist)),
            self.error.eq(mesh.error),
        ]
        return m


def _sum(values):
    """A balanced adder tree."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] + values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]
