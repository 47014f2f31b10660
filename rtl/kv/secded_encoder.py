"""SECDED encoder: appends the Hsiao check bits of :mod:`sim_models.ecc` to a data word."""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from sim_models.ecc import SecdedCode

__all__ = ["SecdedEncoder"]


class SecdedEncoder(wiring.Component):
    """Combinational Hsiao SECDED encoder (the code of :class:`sim_models.ecc.SecdedCode`).

    Parameters
    ----------
    data_bits : int
        Data word width ``k``; the code adds ``r = check_bits_for(k)`` check bits ((72,64) for 64).

    Interface attributes
    --------------------
    data : ``In(data_bits)``
        Word to protect.
    codeword : ``Out(data_bits + check_bits)``
        ``data`` in bits ``0 .. k-1`` (unchanged), check bit ``j`` in bit ``k + j``.

    Latency and throughput
    ----------------------
    Combinational: no clock, no state; every input bit pattern is valid. Check bit ``j`` is the XOR
    of about ``3k/r`` data bits (26 for (72,64)), a three-level LUT4 tree.
    """

    def __init__(self, data_bits):
        try:
            self._code = SecdedCode(data_bits)
        except ValueError as error:
            raise parameter_error(self, ValueError, str(error)) from None
        super().__init__({
            "data": In(data_bits),
            "codeword": Out(self._code.width),
        })

    @property
    def code(self):
        return self._code

    def elaborate(self, platform):
        m = Module()
        code = self._code
        checks = [(self.data & mask).xor() for mask in code.row_masks]
        m.d.comb += self.codeword.eq(Cat(self.data, *checks))
        return m
