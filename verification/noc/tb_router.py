"""cocotb testbench of one :class:`rtl.noc.router.Router` with random traffic on every port.

The testbench plays the five neighbours. Upstream, on each input link, it sends packets (1..4 flits,
random class, random legal XY destination for that input) on random VCs of the class, only with a
credit, interleaving VCs on the link; downstream, on each output link, it keeps a ``depth``-flit
buffer per VC and returns credits at random times. It checks

* every packet leaves on the XY output port, on a VC of its class (with static VCs, the VC it
  arrived on), whole and intact, exactly once, its head carrying the XY route at the next router
  (lookahead routing);
* per flow (one input VC's sequence of packets to one destination) in order *as the next hop drains
  them*: the downstream buffers drain their VCs at random, so a packet put on another VC than an
  older one of its flow that is still downstream would overtake it (with dynamic VCs the order
  buckets must prevent that);
* the router never overruns a downstream buffer (a flit without a credit) and never returns more
  credits than flits it holds;
* the output VCs carry whole packets (no two packets interleaved on one VC);
* a watchdog fails the run if nothing moves for a while, and ``error`` stays low.
"""

import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from rtl.noc.layouts import PORT_NAMES, PORTS, STEP, E, L, N, S, W, legal_outputs
from verification import config
from verification.bench import start_clock_and_reset
from verification.noc.env import drain, header_format, params_from_config
from verification.packing import pack, unpack
from verification.scoreboard import OutOfOrderScoreboard


def xy(x, y, dx, dy):
    if dx > x:
        return E
    if dx < x:
        return W
    if dy > y:
        return N
    if dy < y:
        return S
    return L


@cocotb.test()
async def random_traffic_every_port(dut):
    cfg = config()
    p = params_from_config(cfg)
    rx, ry = cfg["x"], cfg["y"]
    V, D = p.vcs, p.depth
    fmt = header_format(p)
    fl = p.flit_layout
    for i in range(PORTS):
        getattr(dut, f"i_{PORT_NAMES[i]}__valid").value = 0
        getattr(dut, f"o_{PORT_NAMES[i]}__credit").value = 0
    await start_clock_and_reset(dut)
    rng = random.Random(random.getrandbits(32))
    side = p.max_side
    n_packets = cfg.get("packets", 300)
    board = OutOfOrderScoreboard("router packets")

    # Upstream state per input: queues of flits per VC, credits per VC.
    queues = [[[] for _ in range(V)] for _ in range(PORTS)]
    credits = [[D] * V for _ in range(PORTS)]
    # Downstream state per output: packet in progress on each VC (wormhole check).
    cur = [[None] * V for _ in range(PORTS)]
    delivered = [0]
    seq = 0

    def dest_for(i):
        while True:
            dx, dy = rng.randrange(side), rng.randrange(side)
            if xy(rx, ry, dx, dy) in legal_outputs(i):
                return dx, dy

    for _ in range(n_packets):
        i = rng.randrange(PORTS)
        cls = rng.randrange(p.classes)
        v = rng.choice(list(p.vcs_of_class(cls)))
        dx, dy = dest_for(i)
        length = rng.choice((1, 2, 3, 4))
        seq += 1
        head = fmt.pack(dest_x=dx, dest_y=dy, src_x=i % side, mclass=cls, length=length,
                        user=seq % (1 << fmt.user_bits))
        words = [head] + [rng.getrandbits(p.width) for _ in range(length - 1)]
        out = xy(rx, ry, dx, dy)
        board.expect((out, i, v, dx, dy), (cls, tuple(words)))
        for k, w in enumerate(words):
            queues[i][v].append({"data": w, "head": int(k == 0), "tail": int(k == length - 1),
                                 "route": (1 << out) if k == 0 else 0})

    async def upstream(i):
        link_valid = getattr(dut, f"i_{PORT_NAMES[i]}__valid")
        link_flit = getattr(dut, f"i_{PORT_NAMES[i]}__flit")
        link_credit = getattr(dut, f"i_{PORT_NAMES[i]}__credit")
        while True:
            await ReadOnly()
            c = int(link_credit.value)
            for v in range(V):
                if c >> v & 1:
                    credits[i][v] += 1
                    assert credits[i][v] <= D, f"input {PORT_NAMES[i]} VC {v}: credit for no flit"
            await RisingEdge(dut.clk)
            ready = [v for v in range(V) if queues[i][v] and credits[i][v] > 0]
            if ready and rng.random() < 0.7:
                v = rng.choice(ready)
                flit = dict(queues[i][v].pop(0), vc=v)
                credits[i][v] -= 1
                link_flit.value = pack(fl, flit)
                link_valid.value = 1
            else:
                link_valid.value = 0

    def complete(o, u, words):
        """A whole packet has left the downstream buffer of output ``o`` VC ``u`` (as the next hop sees)."""
        h = fmt.unpack(words[0])
        assert p.class_of_vc(u) == h["mclass"], "packet left on a VC of another class"
        item = (h["mclass"], tuple(words))
        keys = [k for k, q in board.expected.items()
                if k[0] == o and k[3] == h["dest_x"] and k[4] == h["dest_y"] and q[0] == item
                and (p.dynamic_vcs or k[2] == u)]
        assert keys, f"output {PORT_NAMES[o]} VC {u}: packet {words} is not the oldest packet " \
                     f"of any flow (lost, duplicated, corrupted, misrouted, or overtaken an older one " \
                     f"of its flow, or moved to another VC with static VCs)"
        board.got(keys[0], item)
        delivered[0] += 1

    async def downstream(o):
        link_valid = getattr(dut, f"o_{PORT_NAMES[o]}__valid")
        link_flit = getattr(dut, f"o_{PORT_NAMES[o]}__flit")
        link_credit = getattr(dut, f"o_{PORT_NAMES[o]}__credit")
        fifo = [[] for _ in range(V)]            # the next hop's input buffer, per VC
        assembling = [[] for _ in range(V)]      # packet being drained from it
        while True:
            await RisingEdge(dut.clk)
            ret = 0
            for u in range(V):
                if fifo[u] and rng.random() < 0.4:
                    ret |= 1 << u
                    f = fifo[u].pop(0)
                    assembling[u].append(f["data"])
                    if f["tail"]:
                        complete(o, u, assembling[u])
                        assembling[u] = []
            link_credit.value = ret
            await ReadOnly()
            if int(link_valid.value):
                f = unpack(fl, int(link_flit.value))
                u = f["vc"]
                assert len(fifo[u]) < D, f"output {PORT_NAMES[o]} VC {u}: flit sent without a credit"
                fifo[u].append(f)
                if f["head"] and o != L:
                    h = fmt.unpack(f["data"])
                    nx, ny = rx + STEP[o][0], ry + STEP[o][1]
                    want = 1 << xy(nx, ny, h["dest_x"], h["dest_y"])
                    assert f["route"] == want, f"output {PORT_NAMES[o]}: lookahead route {f['route']:05b}, " \
                                               f"XY at ({nx}, {ny}) is {want:05b}"
                if f["head"]:
                    assert cur[o][u] is None, f"output {PORT_NAMES[o]} VC {u}: two packets interleaved"
                    cur[o][u] = True
                else:
                    assert cur[o][u] is not None, f"output {PORT_NAMES[o]} VC {u}: body flit without head"
                if f["tail"]:
                    cur[o][u] = None

    for i in range(PORTS):
        cocotb.start_soon(upstream(i))
        cocotb.start_soon(downstream(i))
    await drain(dut.clk, lambda: delivered[0], lambda: board.pending == 0, max_idle=500,
                what="router delivery")
    for _ in range(20):
        await RisingEdge(dut.clk)
    board.finish()
    assert int(dut.error.value) == 0
    assert all(c is None for row in cur for c in row)
    dut._log.info("%d packets through router (%d, %d)", delivered[0], rx, ry)
