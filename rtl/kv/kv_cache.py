"""The KV-cache SRAM controller: paged, banked, SECDED-protected on-chip token-record storage."""

from amaranth.hdl import Module
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from rtl.common.unchecked_read import NO_RW_CHECK, unchecked_read_port
from sim_models.kv_cache import KvConfig

from .command_engine import CommandEngine
from .layouts import KvGeometry
from .page_allocator import PageAllocator
from .read_engine import ReadEngine

__all__ = ["KvCache"]


class KvCache(wiring.Component):
    """Paged KV-cache store with block tables, reference counts, copy-on-write and SECDED ECC.

    Semantics are exactly those of :class:`sim_models.kv_cache.KvCacheModel` (see that module for
    every operation and its error order); ``docs/kv_cache.md`` describes the architecture.

    Storage: ``banks`` block-RAM banks (``amaranth.lib.memory.Memory``, synchronous reads), each
    ``pages * page_tokens / banks`` codewords of ``token_bits + check_bits`` bits; slot ``s`` of page
    ``p`` is in bank ``s % banks`` at row ``p * page_tokens / banks + s // banks``, so consecutive
    records of a sequence fall in consecutive banks. Each bank has a read port for the read engine
    and a read/write port pair (one shared address) for the command engine. The block table is a
    ``seqs * 2**index_width``-entry memory with a read port for each engine. Sequence lengths, live
    bits and reference counts are registers.

    Parameters
    ----------
    pages, page_tokens, token_bits, seqs, max_pages_per_seq, banks, counter_bits : int
        As :class:`sim_models.kv_cache.KvConfig` (defaults 64, 16, 64, 16, 16, 4, 16: 1024 records
        of 64 bits, (72,64) Hsiao code). Invalid values raise :class:`TypeError`/:class:`ValueError`.

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(geometry.command_layout()))``
        open, append, fork, truncate, close, stat and inject (the fault-injection port: flips the
        chosen data and check bits of one stored codeword). One command at a time.
    cmd_reply : ``Out(stream.Signature(geometry.command_reply_layout()))``
        One reply per command, in order.
    rd : ``In(stream.Signature(geometry.read_layout()))``
        Read requests, served concurrently with commands.
    rd_reply : ``Out(stream.Signature(geometry.read_reply_layout()))``
        One item per record (or one status item for a failed or empty read), in request order.

    Ordering between the ports
    --------------------------
    A read sees every command whose reply was first presented in or before the cycle the read is
    accepted, and none presented later. Truncate and close of a sequence wait until no read of it is
    being issued, and inject until no read at all is; reads they would affect are held off until
    their reply. Appends, forks, opens and stats never wait for reads, and reads never wait for them.

    Latency and throughput
    ----------------------
    Reads: seven cycles to the first record, then one record per cycle, back to back across
    requests, whatever the command port is doing. Commands: see
    :class:`rtl.kv.command_engine.CommandEngine` (an append takes 3 or 4 cycles).

    Stall and bad input
    -------------------
    Both reply streams may be stalled indefinitely without loss (the read engine stops issuing
    when its reply FIFO is full; the command engine holds its reply and waits). Every payload is a
    valid request: bad ids, positions and lengths get error replies, unassigned opcode 7 ``bad_op``.
    Running out of pages is an ordinary ``no_space`` reply.
    """

    def __init__(self, *, pages=64, page_tokens=16, token_bits=64, seqs=16, max_pages_per_seq=16,
                 banks=4, counter_bits=16):
        try:
            config = KvConfig(pages=pages, page_tokens=page_tokens, token_bits=token_bits,
                              seqs=seqs, max_pages_per_seq=max_pages_per_seq, banks=banks,
                              counter_bits=counter_bits)
        except (TypeError, ValueError) as error:
            raise parameter_error(self, type(error), str(error)) from None
        self._geometry = g = KvGeometry(config)
        super().__init__({
            "cmd": In(stream.Signature(g.command_layout())),
            "cmd_reply": Out(stream.Signature(g.command_reply_layout())),
            "rd": In(stream.Signature(g.read_layout())),
            "rd_reply": Out(stream.Signature(g.read_reply_layout())),
        })

    @property
    def geometry(self):
        return self._geometry

    @property
    def config(self):
        return self._geometry.config

    def elaborate(self, platform):
        m = Module()
        g = self._geometry
        # Built here, not in __init__: a controller that is only inspected (its geometry) and
        # never elaborated leaves no unused sub-elaboratables behind.
        m.submodules.allocator = allocator = PageAllocator(g)
        m.submodules.commands = commands = CommandEngine(g)
        m.submodules.reads = reads = ReadEngine(g)
        # No address is ever read in the cycle it is written, so no memory needs collision logic.
        # Banks: the command engine reads and writes a bank in different cycles, and the read
        # engine reads only records below a sequence's committed length in pages it holds, while
        # writes go to the slot at the length (append), to a page just allocated (copy-on-write)
        # or with every read locked out (inject). Block table: the read engine reads entries below
        # a sequence's length; writes go to the entry at the length (append), to a sequence that
        # is not live (fork), or, replacing a shared tail page (copy-on-write), with reads of the
        # sequence locked out and drained. The command engine reads and writes different entries.
        m.submodules.table = table = memory.Memory(shape=g.page_width, depth=g.table_depth, init=[],
                                                   attrs=NO_RW_CHECK)
        banks = [memory.Memory(shape=g.codeword_width, depth=g.bank_depth, init=[], attrs=NO_RW_CHECK)
                 for _ in range(g.banks)]
        for b, bank in enumerate(banks):
            m.submodules[f"bank{b}"] = bank

        wiring.connect(m, wiring.flipped(self.cmd), commands.cmd)
        wiring.connect(m, commands.cmd_reply, wiring.flipped(self.cmd_reply))
        wiring.connect(m, wiring.flipped(self.rd), reads.rd)
        wiring.connect(m, reads.rd_reply, wiring.flipped(self.rd_reply))
        wiring.connect(m, commands.link, reads.link)
        wiring.connect(m, commands.alloc, allocator.port)

        wiring.connect(m, commands.table_rd, unchecked_read_port(m, table, name="table_command_read"))
        wiring.connect(m, reads.table, unchecked_read_port(m, table, name="table_read"))
        wiring.connect(m, commands.table_wr, table.write_port())
        for b, bank in enumerate(banks):
            wiring.connect(m, reads.bank[b], unchecked_read_port(m, bank, name=f"bank{b}_read"))
            wiring.connect(m, commands.bank_rd[b],
                           unchecked_read_port(m, bank, name=f"bank{b}_copy_read"))
            wiring.connect(m, commands.bank_wr[b], bank.write_port())
        return m
