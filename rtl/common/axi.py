"""AXI4 read and AXI4-Lite signatures (AMBA AXI and ACE Protocol Specification, ARM IHI 0022).

One definition of the channel signals every AXI port of Poblano uses. The signatures are written
from the *manager's* view: a manager port is ``Out(signature)``, a subordinate port is
``In(signature)``. Member names are the specification's lower-case signal names without the
``AXI`` prefix (``araddr``, ``rvalid``, ...), so a port ``m_axi`` comes out of Amaranth's Verilog
back end as ``m_axi__araddr``, ``m_axi__rvalid``, ... (cocotbext-axi finds them with the prefix
``m_axi`` and the bus separator ``__``).

Only what the blocks use is declared:

* :class:`Axi4ReadSignature`: the AR and R channels of AXI4 (a read-only manager such as the tile's
  weight port), with ``ARID``/``RID``, ``ARLEN`` (bursts of 1..256 beats), ``ARSIZE``, ``ARBURST``,
  ``ARCACHE``, ``ARPROT``, ``RRESP`` and ``RLAST``; no user signals, no ``ARLOCK``/``ARQOS``/``ARREGION``
  (their defaults, 0, are what a subordinate assumes when they are absent).
* :class:`AxiLiteSignature`: all five channels of AXI4-Lite, 32-bit data, ``AWPROT``/``ARPROT`` and
  ``WSTRB`` included.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int

__all__ = ["Axi4ReadSignature", "AxiLiteSignature", "RESP_OKAY", "RESP_EXOKAY", "RESP_SLVERR",
           "RESP_DECERR", "BURST_FIXED", "BURST_INCR", "BURST_WRAP"]

RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0b00, 0b01, 0b10, 0b11
"""``RRESP``/``BRESP`` codes."""

BURST_FIXED, BURST_INCR, BURST_WRAP = 0b00, 0b01, 0b10
"""``ARBURST`` codes."""


class Axi4ReadSignature(wiring.Signature):
    """AR and R channels of an AXI4 manager: ``addr_bits`` address, ``data_bits`` data, ``id_bits`` ID.

    ``data_bits`` is a power of two from 8 to 1024 (``ARSIZE`` = log2 of its bytes).
    """

    def __init__(self, *, addr_bits, data_bits, id_bits=1):
        for name, value in (("addr_bits", addr_bits), ("data_bits", data_bits), ("id_bits", id_bits)):
            check_positive_int(self, name, value)
        if data_bits < 8 or data_bits > 1024 or data_bits & (data_bits - 1):
            raise ValueError(f"Axi4ReadSignature: data_bits must be a power of two from 8 to 1024, "
                             f"got {data_bits}")
        self.addr_bits, self.data_bits, self.id_bits = addr_bits, data_bits, id_bits
        super().__init__({
            "arid": Out(id_bits),
            "araddr": Out(addr_bits),
            "arlen": Out(8),
            "arsize": Out(3),
            "arburst": Out(2),
            "arcache": Out(4),
            "arprot": Out(3),
            "arvalid": Out(1),
            "arready": In(1),
            "rid": In(id_bits),
            "rdata": In(data_bits),
            "rresp": In(2),
            "rlast": In(1),
            "rvalid": In(1),
            "rready": Out(1),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and (self.addr_bits, self.data_bits, self.id_bits)
                == (other.addr_bits, other.data_bits, other.id_bits))

    def __hash__(self):
        return hash((type(self), self.addr_bits, self.data_bits, self.id_bits))

    def __repr__(self):
        return (f"Axi4ReadSignature(addr_bits={self.addr_bits}, data_bits={self.data_bits}, "
                f"id_bits={self.id_bits})")


class AxiLiteSignature(wiring.Signature):
    """The five channels of an AXI4-Lite manager: ``addr_bits`` address, 32-bit data."""

    def __init__(self, *, addr_bits):
        check_positive_int(self, "addr_bits", addr_bits)
        self.addr_bits = addr_bits
        super().__init__({
            "awaddr": Out(addr_bits),
            "awprot": Out(3),
            "awvalid": Out(1),
            "awready": In(1),
            "wdata": Out(32),
            "wstrb": Out(4),
            "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2),
            "bvalid": In(1),
            "bready": Out(1),
            "araddr": Out(addr_bits),
            "arprot": Out(3),
            "arvalid": Out(1),
            "arready": In(1),
            "rdata": In(32),
            "rresp": In(2),
            "rvalid": In(1),
            "rready": Out(1),
        })

    def __eq__(self, other):
        return type(other) is type(self) and self.addr_bits == other.addr_bits

    def __hash__(self):
        return hash((type(self), self.addr_bits))

    def __repr__(self):
        return f"AxiLiteSignature(addr_bits={self.addr_bits})"
