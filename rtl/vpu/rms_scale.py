"""RMSNorm's row scale: ``r = 1/sqrt(round24x(S/n + eps))`` from the row's sum of squares, once per row."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.mx.fp32_accumulate import leading_zeros
from rtl.vpu.accumulator import ACC_BITS, DEFAULT_EXPONENT_WIDTH, acc_layout

__all__ = ["RmsScale", "SCALE_EXPONENT", "round_to_24"]

SCALE_EXPONENT = signed(12)
"""Shape of the scale's exponent ``r_lsb`` (the scale ranges over about ``2**-152 .. 2**156``)."""

_WINDOW = 64          # the sum S + eps * n, aligned: top bit at 62 (63 holds the carry)
_DIVIDEND = 42        # its leading bits divided by n: a quotient of at least 28 bits
_RADICAND = 64        # sig << (36 + p), zero-extended to a multiple of four bits
_QUOTIENT = 27        # bits of floor(2**59 / d), the reciprocal of the root


def round_to_24(m, value, sticky, name):
    """``value`` (top bit set) rounded to its leading 24 bits, nearest even, with ``sticky``.

    Returns ``(sig, carry)``: the 24-bit significand (renormalized on a carry out) and whether the
    rounding carried into a new binade (the weight of the lsb then grows by one)."""
    width = len(value)
    kept = value[width - 24:]
    guard = value[width - 25]
    rest = (value[:width - 25] != 0) | sticky
    up = guard & (rest | kept[0])
    total = Signal(25, name=f"{name}_total")
    m.d.comb += total.eq(kept + up)
    return Mux(total[24], total[1:], total[:24]), total[24]


class RmsScale(wiring.Component):
    """The scale of an RMSNorm row, bit-exact to ``sim_models.vpu._rms_inverse``.

    From the row's sum of squares ``S`` (an accumulator of the :class:`~rtl.vpu.reducer.Reducer`:
    ``mag * 2**exp``, 48 bits, never rounded to binary32), the row length ``n`` and ``eps`` (a finite,
    non-negative binary32; its sign bit is ignored):

    1. ``V = S/n + eps`` correctly rounded to a 24-bit significand (nearest even) with an unbounded
       exponent. The sum ``S + eps * n`` is formed exactly in a 64-bit window (the term with the lower
       top bit may lose bits below it: they become a sticky bit), its leading 42 bits are divided by
       ``n`` two quotient bits per cycle (at least 28 quotient bits), and the remainder, the bits
       below and the sticky bit decide the rounding. That is the exact quotient's rounding: bits
       below the quotient's last place never change the quotient, only whether it is exact.
    2. ``s = isqrt(v_sig << (36 + p))`` with ``p`` the parity of ``v_lsb``, two root bits per cycle,
       and ``h = (v_lsb - 36 - p) / 2`` (``sim_models.vpu._rsqrt_parts``).
    3. ``1 / (s * 2**h)``: ``s`` normalized to 34 bits, ``q = floor(2**59 / d)`` two bits per cycle
       with its sticky bit, and ``2q + sticky`` rounded to 24 bits (nearest even): ``r_sig * 2**r_lsb``.

    ``zero`` is set instead when ``V`` is zero (an all-zero row and ``eps = 0``): the row's outputs
    are NaN. The unit is sequential (:attr:`latency` cycles per row, one row at a time), which is
    cheap beside the row's two passes through the lanes.

    Interface attributes
    --------------------
    start : ``In(1)``
        Pulse: take ``ss``, ``n`` and ``eps`` (ignored while :attr:`busy`).
    ss : ``In(acc_layout(exponent_width))``
        The sum of squares (its sign is ignored: it is non-negative).
    n : ``In(14)``
        The row length, 1 to 8192.
    eps : ``In(32)``
        Binary32 ``eps``.
    busy : ``Out(1)``
        A row's scale is being computed.
    done : ``Out(1)``
        Pulse, :attr:`latency` cycles after ``start``: ``r_sig``, ``r_lsb`` and ``zero`` are valid (and
        hold until the next ``start``).
    r_sig : ``Out(24)``
        The scale's significand, ``2**23 <= r_sig < 2**24``.
    r_lsb : ``Out(SCALE_EXPONENT)``
        The weight of its last bit.
    zero : ``Out(1)``
        ``V`` was zero.
    """

    def __init__(self, exponent_width=DEFAULT_EXPONENT_WIDTH):
        self._exponent_width = exponent_width
        super().__init__({
            "start": In(1),
            "ss": In(acc_layout(exponent_width)),
            "n": In(14),
            "eps": In(32),
            "busy": Out(1),
            "done": Out(1),
            "r_sig": Out(24),
            "r_lsb": Out(SCALE_EXPONENT),
            "zero": Out(1),
        })

    @property
    def latency(self):
        """Cycles from ``start`` to ``done``."""
        # load, product, two tops, distances, align, sum, two normalization steps, divide, three
        # rounding steps and the radicand, sqrt, two normalization steps, reciprocal, three rounding
        return (1 + 1 + 2 + 1 + 1 + 1 + 2 + _DIVIDEND // 2 + 4 + _RADICAND // 4 + 2 + (_QUOTIENT + 1) // 2
                + 3)

    @staticmethod
    def _divide_step(m, rem, bit, n, name):
        """One restoring-division step: ``(2 * rem + bit) mod-n`` and its quotient bit."""
        trial = Cat(bit, rem)
        fits = Signal(name=f"{name}_fits")
        rest = Signal(15, name=f"{name}_rest")
        m.d.comb += [fits.eq(trial >= n), rest.eq(Mux(fits, trial - n, trial))]
        return rest, fits

    @staticmethod
    def _sqrt_step(m, rem, root, two_bits, name):
        """One square-root step: the next two radicand bits, the trial ``4 * root + 1``."""
        trial = Cat(two_bits, rem)
        bar = Cat(Const(1, 2), root)                       # 4 * root + 1
        fits = Signal(name=f"{name}_fits")
        rest = Signal(36, name=f"{name}_rest")
        grown = Signal(32, name=f"{name}_root")
        m.d.comb += [fits.eq(trial >= bar), rest.eq(Mux(fits, trial - bar, trial)), grown.eq(Cat(fits, root))]
        return rest, grown

    @staticmethod
    def _reciprocal_step(m, rem, divisor, name):
        """One step of ``floor(2**59 / d)``: the quotient bit and what remains (not yet doubled)."""
        fits = Signal(name=f"{name}_fits")
        rest = Signal(35, name=f"{name}_rest")
        m.d.comb += [fits.eq(rem >= divisor), rest.eq(Mux(fits, rem - divisor, rem))]
        return rest, fits

    def elaborate(self, platform):
        m = Module()
        exp_shape = SCALE_EXPONENT

        # ---- operands, latched at start ---------------------------------------------------------
        s_mag = Signal(ACC_BITS)
        s_exp = Signal(exp_shape)
        n = Signal(14)
        e_sig = Signal(24)
        e_lsb = Signal(exp_shape)
        product = Signal(38)                   # eps significand * n
        # ---- alignment ----------------------------------------------------------------------------
        b_zeros = Signal(range(39))
        b_norm = Signal(38)
        a_top = Signal(exp_shape)
        b_top = Signal(exp_shape)
        top = Signal(exp_shape)
        a_live = Signal()
        b_live = Signal()
        amounts = [Signal(6, name=f"{name}_shift") for name in ("s", "eps")]
        aligned = [Signal(63, name=f"{name}_aligned") for name in ("s", "eps")]
        lost = Signal(2)
        # ---- the sum and the division ------------------------------------------------------------
        total = Signal(_WINDOW)
        total_lsb = Signal(exp_shape)
        zeros = Signal(range(_WINDOW + 1))
        sticky = Signal()
        dividend = Signal(_DIVIDEND)           # shifted out top first
        quotient = Signal(_DIVIDEND)
        rem = Signal(15)
        q_lsb = Signal(exp_shape)
        count = Signal(range(_DIVIDEND + 1))
        normal_v = Signal(_DIVIDEND)
        v_sig = Signal(24)
        v_lsb = Signal(exp_shape)
        # ---- square root and reciprocal -------------------------------------------------------------
        radicand = Signal(_RADICAND)
        root = Signal(32)
        sq_rem = Signal(36)
        half = Signal(exp_shape)
        divisor = Signal(34)
        d_exp = Signal(exp_shape)
        recip = Signal(_QUOTIENT)
        r_rem = Signal(35)
        normal_r = Signal(_QUOTIENT + 1)

        m.d.comb += self.busy.eq(0)
        m.d.sync += self.done.eq(0)
        with m.FSM(name="rms_scale"):
            with m.State("IDLE"):
                with m.If(self.start):
                    biased = self.eps[23:31]
                    m.d.sync += [
                        s_mag.eq(self.ss.mag), s_exp.eq(self.ss.exp), n.eq(self.n),
                        e_sig.eq(Cat(self.eps[:23], biased != 0)),
                        e_lsb.eq(Mux(biased == 0, -149, biased - 150)),
                    ]
                    m.next = "PRODUCT"
            with m.State("PRODUCT"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += product.eq(e_sig * n)
                m.next = "TOPS"
            with m.State("TOPS"):
                # The weights of the two terms' top bits: S's (48 bits, normalized), eps * n's.
                m.d.comb += self.busy.eq(1)
                m.d.sync += [b_zeros.eq(leading_zeros(m, product, "eps_n_lz")),
                             a_top.eq(s_exp + (ACC_BITS - 1)), a_live.eq(s_mag[ACC_BITS - 1]),
                             b_live.eq(product != 0)]
                m.next = "TOP"
            with m.State("TOP"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [b_norm.eq(product << b_zeros), b_top.eq(e_lsb + 37 - b_zeros)]
                m.next = "DISTANCES"
            with m.State("DISTANCES"):
                # The higher top bit goes to bit 62 of the window; each term's right shift.
                m.d.comb += self.busy.eq(1)
                higher = Signal(exp_shape)
                m.d.comb += higher.eq(Mux(a_live & (~b_live | (a_top >= b_top)), a_top, b_top))
                for amount, term_top in zip(amounts, (a_top, b_top), strict=True):
                    distance = Signal(exp_shape, name=f"{amount.name}_distance")
                    m.d.comb += distance.eq(higher - term_top)
                    m.d.sync += amount.eq(Mux(distance > 63, 63, distance[:6]))
                m.d.sync += [top.eq(higher), total_lsb.eq(higher - 62)]
                with m.If(~a_live & ~b_live):
                    m.d.sync += [self.zero.eq(1), self.done.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "ALIGN"
            with m.State("ALIGN"):
                # Both terms shifted under the window; the bits shifted out are only a sticky bit.
                m.d.comb += self.busy.eq(1)
                fields = (Cat(Const(0, 15), s_mag), Cat(Const(0, 25), b_norm))   # top bits at 62
                terms = zip(fields, (a_live, b_live), amounts, strict=True)
                for k, (field, live, amount) in enumerate(terms):
                    below = Signal(63, name=f"{amount.name}_below")           # the bits under the cut
                    m.d.comb += below.eq(field & ((Const(1, 64) << amount) - 1)[:63])
                    m.d.sync += [aligned[k].eq(Mux(live, field >> amount, 0)),
                                 lost[k].eq(live & (below != 0))]
                m.next = "SUM"
            with m.State("SUM"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [total.eq(aligned[0] + aligned[1]), sticky.eq(lost.any())]
                m.next = "NORMALIZE"
            with m.State("NORMALIZE"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += zeros.eq(leading_zeros(m, total, "total_lz"))
                m.next = "WINDOW"
            with m.State("WINDOW"):
                # The window's leading 42 bits are divided; the bits below only make the result inexact.
                m.d.comb += self.busy.eq(1)
                shifted = Signal(_WINDOW)
                m.d.comb += shifted.eq(total << zeros)
                cut = _WINDOW - _DIVIDEND
                m.d.sync += [
                    dividend.eq(shifted[cut:]), sticky.eq(sticky | (shifted[:cut] != 0)),
                    q_lsb.eq(total_lsb - zeros + cut), rem.eq(0), count.eq(0),
                ]
                m.next = "DIVIDE"
            with m.State("DIVIDE"):
                # Restoring division by n, two quotient bits per cycle, most significant first.
                m.d.comb += self.busy.eq(1)
                high_rem, high = self._divide_step(m, rem, dividend[_DIVIDEND - 1], n, "div_high")
                low_rem, low = self._divide_step(m, high_rem, dividend[_DIVIDEND - 2], n, "div_low")
                m.d.sync += [
                    rem.eq(low_rem),
                    quotient.eq(Cat(low, high, quotient)),
                    dividend.eq(dividend << 2),
                    count.eq(count + 2),
                ]
                with m.If(count == _DIVIDEND - 2):
                    m.next = "QUOTIENT_ZEROS"
            with m.State("QUOTIENT_ZEROS"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [zeros.eq(leading_zeros(m, quotient, "quotient_lz")),
                             sticky.eq(sticky | (rem != 0))]
                m.next = "QUOTIENT_SHIFT"
            with m.State("QUOTIENT_SHIFT"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [normal_v.eq(quotient << zeros), q_lsb.eq(q_lsb - zeros + (_DIVIDEND - 24))]
                m.next = "ROUND_V"
            with m.State("ROUND_V"):
                # V = quotient (28 to 42 bits) rounded to 24.
                m.d.comb += self.busy.eq(1)
                rounded, carry = round_to_24(m, normal_v, sticky, "v")
                m.d.sync += [v_sig.eq(rounded), v_lsb.eq(q_lsb + carry)]
                m.next = "RADICAND"
            with m.State("RADICAND"):
                m.d.comb += self.busy.eq(1)
                parity = v_lsb[0]
                m.d.sync += [
                    radicand.eq(Mux(parity, v_sig << 37, v_sig << 36)),
                    half.eq((v_lsb - 36 - parity) >> 1),
                    root.eq(0), sq_rem.eq(0), count.eq(0),
                ]
                m.next = "SQRT"
            with m.State("SQRT"):
                # Restoring square root, four radicand bits (two root bits) per cycle.
                m.d.comb += self.busy.eq(1)
                top2 = _RADICAND - 2
                rem1, root1 = self._sqrt_step(m, sq_rem, root, radicand[top2:], "sqrt_high")
                rem2, root2 = self._sqrt_step(m, rem1, root1, radicand[top2 - 2:top2], "sqrt_low")
                m.d.sync += [
                    sq_rem.eq(rem2), root.eq(root2),
                    radicand.eq(radicand << 4),
                    count.eq(count + 1),
                ]
                with m.If(count == _RADICAND // 4 - 1):
                    m.next = "ROOT_ZEROS"
            with m.State("ROOT_ZEROS"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += zeros.eq(leading_zeros(m, Cat(root, Const(0, 34 - len(root))), "root_lz"))
                m.next = "PREPARE"
            with m.State("PREPARE"):
                # The root (30 or 31 bits) normalized to a 34-bit divisor.
                m.d.comb += self.busy.eq(1)
                m.d.sync += [
                    divisor.eq(root << zeros),
                    d_exp.eq(half - zeros),
                    r_rem.eq(1 << 33), recip.eq(0), count.eq(0),
                ]
                m.next = "RECIPROCAL"
            with m.State("RECIPROCAL"):
                # floor(2**33 * 2**26 / d): one quotient bit in the first cycle, then two per cycle.
                m.d.comb += self.busy.eq(1)
                rest1, bit1 = self._reciprocal_step(m, r_rem, divisor, "recip_high")
                rest2, bit2 = self._reciprocal_step(m, rest1 << 1, divisor, "recip_low")
                with m.If(count == 0):
                    m.d.sync += [recip.eq(Cat(bit1, recip)), r_rem.eq(rest1 << 1), count.eq(1)]
                with m.Else():
                    m.d.sync += [recip.eq(Cat(bit2, bit1, recip)), count.eq(count + 2)]
                    with m.If(count == _QUOTIENT - 2):
                        m.d.sync += r_rem.eq(rest2)
                        m.next = "RECIPROCAL_ZEROS"
                    with m.Else():
                        m.d.sync += r_rem.eq(rest2 << 1)
            with m.State("RECIPROCAL_ZEROS"):
                m.d.comb += self.busy.eq(1)
                value = Cat(r_rem != 0, recip)              # 2q + sticky: 28 bits
                m.d.sync += [zeros.eq(leading_zeros(m, value, "recip_lz")), normal_r.eq(value)]
                m.next = "RECIPROCAL_SHIFT"
            with m.State("RECIPROCAL_SHIFT"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [normal_r.eq(normal_r << zeros),
                             d_exp.eq(-33 - d_exp - _QUOTIENT - zeros + (_QUOTIENT + 1 - 24))]
                m.next = "ROUND_R"
            with m.State("ROUND_R"):
                # 2q + sticky rounded to 24 bits: the scale.
                m.d.comb += self.busy.eq(1)
                r_sig, carry = round_to_24(m, normal_r, Const(0, 1), "r")
                m.d.sync += [
                    self.r_sig.eq(r_sig), self.r_lsb.eq(d_exp + carry),
                    self.zero.eq(0), self.done.eq(1),
                ]
                m.next = "IDLE"
        return m
