"""SECDED (single-error-correcting, double-error-detecting) Hsiao codes on plain integers.

This module *defines* the code the KV-cache controller stores with every SRAM word: the RTL encoder
and decoder (:mod:`rtl.kv.secded_encoder`, :mod:`rtl.kv.secded_decoder`) are generated from
:func:`hsiao_columns`, and :class:`SecdedCode` is their golden model, bit for bit, for any error
pattern (including patterns of three or more bits, which a SECDED code may miscorrect).

Codeword layout (systematic): bits ``0 .. k-1`` are the data bits unchanged, bits ``k .. k+r-1`` the
check bits. The parity-check matrix is ``H = [D | I_r]``; column ``i < k`` of ``D`` is the ``r``-bit
integer ``columns[i]`` (bit ``j`` set means data bit ``i`` takes part in check bit ``j``).

Hsiao's construction: every column of ``D`` has odd weight of at least three, the columns are
distinct, the total weight is minimal (all weight-3 columns are used before any weight-5 one) and
the row weights are balanced (each check bit's XOR tree has about the same depth). Then

* a single error gives a syndrome equal to one column of ``H`` (odd weight): it is corrected;
* a double error gives the XOR of two distinct odd-weight columns: even weight and non-zero, equal
  to no column, so it is detected and never miscorrected.

``r`` is the smallest number of check bits with at least ``k`` odd-weight columns of weight >= 3,
i.e. ``2**(r-1) - r >= k``: (8,4), (13,8), (22,16), (39,32), (72,64), (137,128).
"""

from functools import cache
from itertools import combinations

__all__ = ["check_bits_for", "hsiao_columns", "SecdedCode", "OK", "CORRECTED", "UNCORRECTABLE"]

OK = "ok"
CORRECTED = "corrected"
UNCORRECTABLE = "uncorrectable"


def check_bits_for(data_bits):
    """Number of check bits of the Hsiao code for ``data_bits`` data bits."""
    if not isinstance(data_bits, int) or data_bits < 1:
        raise ValueError(f"data_bits must be a positive integer, not {data_bits!r}")
    r = 3
    while (1 << (r - 1)) - r < data_bits:
        r += 1
    return r


@cache
def hsiao_columns(data_bits):
    """The ``data_bits`` columns of ``D`` as ``r``-bit integers (see the module docstring).

    Deterministic: weights are taken in increasing odd order; within a weight, each next column is
    the candidate (in lexicographic order of its set bits) that keeps the heaviest row lightest.
    """
    r = check_bits_for(data_bits)
    rows = [0] * r
    columns = []
    for weight in range(3, r + 1, 2):
        candidates = [sum(1 << b for b in bits) for bits in combinations(range(r), weight)]
        while candidates and len(columns) < data_bits:
            def cost(column):
                loads = [rows[j] + ((column >> j) & 1) for j in range(r)]
                return (max(loads), sorted(loads, reverse=True))
            best = min(candidates, key=cost)       # min() keeps the first of equal costs
            candidates.remove(best)
            columns.append(best)
            for j in range(r):
                rows[j] += (best >> j) & 1
        if len(columns) == data_bits:
            break
    assert len(columns) == data_bits
    return tuple(columns)


class SecdedCode:
    """The Hsiao SECDED code for ``data_bits`` data bits (golden model of the RTL codec).

    Attributes
    ----------
    data_bits, check_bits, width : int
        ``k``, ``r`` and ``k + r``.
    columns : tuple of int
        Columns of ``D`` (see :func:`hsiao_columns`).
    """

    def __init__(self, data_bits):
        self.data_bits = data_bits
        self.check_bits = check_bits_for(data_bits)
        self.width = data_bits + self.check_bits
        self.columns = hsiao_columns(data_bits)
        # Row masks: which data bits feed check bit j.
        self.row_masks = tuple(
            sum(1 << i for i, col in enumerate(self.columns) if (col >> j) & 1)
            for j in range(self.check_bits))
        # Syndrome of a single error at each codeword position.
        self._position_of = {col: i for i, col in enumerate(self.columns)}
        for j in range(self.check_bits):
            self._position_of[1 << j] = self.data_bits + j

    def _check(self, data):
        out = 0
        for j, mask in enumerate(self.row_masks):
            out |= (bin(data & mask).count("1") & 1) << j
        return out

    def encode(self, data):
        """Codeword of ``data`` (an unsigned ``data_bits``-bit integer)."""
        data = int(data)
        if data < 0 or data >> self.data_bits:
            raise ValueError(f"data {data:#x} does not fit {self.data_bits} bits")
        return data | (self._check(data) << self.data_bits)

    def syndrome(self, codeword):
        data = codeword & ((1 << self.data_bits) - 1)
        return self._check(data) ^ (codeword >> self.data_bits) & ((1 << self.check_bits) - 1)

    def decode(self, codeword):
        """``(data, status)``: status is :data:`OK`, :data:`CORRECTED` or :data:`UNCORRECTABLE`.

        A corrected single error in a check bit returns the data unchanged, still CORRECTED. An
        uncorrectable word returns its data bits as stored (uncorrected).
        """
        codeword = int(codeword)
        if codeword < 0 or codeword >> self.width:
            raise ValueError(f"codeword {codeword:#x} does not fit {self.width} bits")
        data = codeword & ((1 << self.data_bits) - 1)
        syndrome = self.syndrome(codeword)
        if syndrome == 0:
            return data, OK
        position = self._position_of.get(syndrome)
        if position is None:
            return data, UNCORRECTABLE
        if position < self.data_bits:
            data ^= 1 << position
        return data, CORRECTED
