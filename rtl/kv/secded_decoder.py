"""SECDED decoder: corrects single-bit and detects double-bit errors of :mod:`sim_models.ecc` codewords."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import parameter_error
from sim_models.ecc import SecdedCode

__all__ = ["SecdedDecoder"]


class SecdedDecoder(wiring.Component):
    """Hsiao SECDED decoder, bit-exact with :meth:`sim_models.ecc.SecdedCode.decode`.

    The syndrome ``H · codeword`` is zero for a clean word; equal to one column of ``H`` for a
    single-bit error, which is corrected (a data bit is flipped back; an error in a check bit leaves
    the data as stored) and flagged ``corrected``; any other non-zero syndrome (every double-bit
    error, some wider ones) is flagged ``uncorrectable`` and the data bits pass through as stored.

    Parameters
    ----------
    data_bits : int
        Data word width ``k`` (the codeword is ``k + check_bits_for(k)`` wide).
    registered : bool
        Insert one pipeline register between the syndrome and the correction (default ``False``:
        fully combinational).

    Interface attributes
    --------------------
    codeword : ``In(data_bits + check_bits)``
        Stored word, layout as produced by :class:`rtl.kv.secded_encoder.SecdedEncoder`.
    data : ``Out(data_bits)``
        Corrected data.
    corrected : ``Out(1)``
        A single-bit error was found and corrected.
    uncorrectable : ``Out(1)``
        The word is damaged beyond correction; ``data`` is the stored data bits, unchanged.

    Latency and throughput
    ----------------------
    Zero cycles, or one cycle when ``registered`` (the pipeline advances every cycle; it has no
    enable and no valid). One word per cycle. Every input pattern is valid input.
    """

    def __init__(self, data_bits, *, registered=False):
        try:
            self._code = SecdedCode(data_bits)
        except ValueError as error:
            raise parameter_error(self, ValueError, str(error)) from None
        self._registered = bool(registered)
        super().__init__({
            "codeword": In(self._code.width),
            "data": Out(data_bits),
            "corrected": Out(1),
            "uncorrectable": Out(1),
        })

    @property
    def code(self):
        return self._code

    @property
    def registered(self):
        return self._registered

    def elaborate(self, platform):
        m = Module()
        code = self._code
        k, r = code.data_bits, code.check_bits
        stored = self.codeword[:k]
        checks = self.codeword[k:]
        syndrome_now = Cat(*[(stored & mask).xor() for mask in code.row_masks]) ^ checks

        if self._registered:
            syndrome = Signal(r)
            data_in = Signal(k)
            m.d.sync += [syndrome.eq(syndrome_now), data_in.eq(stored)]
        else:
            syndrome, data_in = syndrome_now, stored

        flips = Cat(*[syndrome == column for column in code.columns])
        check_error = Cat(*[syndrome == (1 << j) for j in range(r)]).any()
        single = flips.any() | check_error
        m.d.comb += [
            self.data.eq(data_in ^ flips),
            self.corrected.eq(single),
            self.uncorrectable.eq(syndrome.any() & ~single),
        ]
        return m
