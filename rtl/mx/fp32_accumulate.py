"""Binary32 accumulate adder of the MXFP4 tensor core: ``acc + dot / 4 * 2**exp``, rounded once."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.common.parameters import check_positive_int
from rtl.mx.layouts import FP32, ScaledDot

__all__ = ["Fp32Accumulate", "leading_zeros"]

QNAN = 0x7FC0_0000
_INF = 0x7F80_0000

# Steps of the accumulator path, in order; a pipeline register can follow any of them. The weights
# are rough logic depths (a carry chain counting as a few LUT levels), used to spread registers.
_STEPS = ("compare", "select", "align", "add", "magnitude", "clamp", "shift", "round")
_WEIGHTS = (4, 3, 5, 4, 5, 3, 5, 5)


def leading_zeros(m, value, name):
    """Count of leading zeros of ``value`` (``len(value)`` for zero), as a balanced tree.

    Returns a ``Signal``; logic depth grows with ``log2(len(value))``, not with the width.
    """
    width = len(value)
    size = 1
    while size < width:
        size *= 2
    padded = Cat(Const(0, size - width), value) if size > width else value  # pad at the bottom

    def count(bits):
        # (all_zero, zeros) for a power-of-two slice; zeros is meaningful only when not all zero.
        n = len(bits)
        if n == 1:
            return ~bits[0], Const(0, 1)
        lo_zero, lo_count = count(bits[:n // 2])
        hi_zero, hi_count = count(bits[n // 2:])
        zeros = Mux(hi_zero, (n // 2) + lo_count, hi_count)
        return hi_zero & lo_zero, zeros[:(n - 1).bit_length()]

    all_zero, zeros = count(padded)
    out = Signal(range(width + 1), name=name)
    m.d.comb += out.eq(Mux(all_zero, width, zeros))
    return out


def _stage_boundaries(stages):
    """(indices of the steps followed by a register, extra registers at the end)."""
    steps = len(_STEPS)
    if stages >= steps:
        return set(range(steps)), stages - steps
    total = sum(_WEIGHTS)
    cuts, running = set(), 0
    for index, weight in enumerate(_WEIGHTS[:-1]):
        running += weight
        if len(cuts) < stages - 1 and running * stages >= total * (len(cuts) + 1):
            cuts.add(index)
    cuts.add(steps - 1)
    return cuts, 0


class Fp32Accumulate(wiring.Component):
    """One MXFP4 accumulation step: ``acc + dot * 2**(exp - 2)``, rounded once to binary32 (RNE).

    This is :func:`sim_models.mx.fp32_add_scaled` in gates, bit for bit: the block dot product
    ``dot`` (an exact integer in quarters) scaled by ``2**exp`` is added exactly to the binary32
    accumulator and the sum is rounded once to nearest, ties to even. Subnormals are produced and
    consumed (no flush to zero); magnitudes that round to ``2**128`` or more give ±Inf; an exact
    zero sum is +0 (so ``-0 + 0`` is +0); a non-zero sum that rounds to zero keeps its sign; a NaN
    accumulator or ``term.nan`` gives the canonical NaN ``0x7FC00000``; an infinite accumulator is
    returned unchanged.

    Datapath. The term is normalized first (magnitude, 13-bit leading-zero count, shift), in three
    register stages of its own ahead of the accumulator (so that it is outside an accumulation loop closed
    from ``result`` back to ``acc``). Then, a single-path floating-point adder: the operand with the
    larger exponent is kept, the other aligned right with a sticky bit; both ``X - Y`` and ``Y - X``
    are formed, so a larger operand that is smaller than it looks (possible only for a subnormal
    accumulator) needs no negation step; the magnitude is normalized, clamped to the subnormal
    grid, rounded and packed in one carry chain (``((be - 1) << 23) + significand + round``, which
    also carries into the next binade and across the subnormal/normal boundary).

    Parameters
    ----------
    stages : int
        Pipeline registers from ``acc`` to ``result`` (at least 1): the accumulator loop latency.
        Up to eight they are spread over the eight steps of the path; more delay the result.

    Interface attributes
    --------------------
    term : ``In(ScaledDot)``
        The block term: ``dot`` (signed quarters, ``|dot| <= 4608``), ``exp`` (``-254..254``) and
        ``nan`` (a 0xFF scale on either side; ``dot`` and ``exp`` are then ignored).
    bypass : ``In(1)``
        Sampled with ``term``: this operation adds nothing and returns ``acc`` unchanged (a NaN as
        the canonical NaN), for cycles that carry no block term.
    acc : ``In(32)``
        Binary32 pattern of the accumulator, sampled :attr:`TERM_LATENCY` cycles after its ``term``.
    en : ``In(1)``, default 1
        Clock enable of every pipeline register: with ``en`` low the whole pipeline holds.
    result : ``Out(32)``
        Binary32 pattern of the result, ``stages`` enabled cycles after its ``acc``.

    Latency and throughput
    ----------------------
    ``TERM_LATENCY + stages`` cycles from ``term`` to ``result``; one operation per cycle. No valid
    signal and no stall logic: the pipeline is a fixed delay, frozen by ``en``.
    """

    TERM_LATENCY = 3

    def __init__(self, stages=8):
        check_positive_int(self, "stages", stages)
        self._stages = stages
        super().__init__({
            "term": In(ScaledDot),
            "bypass": In(1),
            "acc": In(FP32),
            "en": In(1, init=1),
            "result": Out(FP32),
        })

    @property
    def stages(self):
        return self._stages

    @property
    def latency(self):
        """Cycles from ``term`` to ``result``."""
        return self.TERM_LATENCY + self._stages

    def elaborate(self, platform):
        m = Module()
        cuts, extra = _stage_boundaries(self._stages)
        count = [0]

        def register(values):
            out = {}
            for key, value in values.items():
                reg = Signal(value.shape(), name=f"{key}_r{count[0]}", reset_less=True)
                with m.If(self.en):
                    m.d.sync += reg.eq(value)
                out[key] = reg
            count[0] += 1
            return out

        def step(index, values):
            return register(values) if index in cuts else values

        def wire(shape, value, name):
            sig = Signal(shape, name=name)
            m.d.comb += sig.eq(value)
            return sig

        # ---- term (three register stages): magnitude; leading zeros; normalized significand ---
        dot = self.term.dot
        t = register({
            "p_sign": dot < 0,
            "p_mag": Mux(dot < 0, -dot, dot)[:13],
            "bypass": self.bypass,
            "exp": self.term.exp,
            "nan": self.term.nan & ~self.bypass,
        })
        t = register({**t, "p_lz": leading_zeros(m, t["p_mag"], "p_lz"), "e137": t["exp"] + 137})
        magnitude, lz = t["p_mag"], t["p_lz"]
        # value = mag * 2**(exp - 2) = ((mag << lz) << 11) * 2**(be - 150)  =>  be = exp + 137 - lz
        t = register({
            "p_sign": t["p_sign"],
            "p_zero": (magnitude == 0) | t["bypass"],       # bypass: add an exact zero ...
            "keep": t["bypass"],                             # ... but keep the sign of a zero acc
            "p_sig": (magnitude << lz)[:13],
            "p_be": (t["e137"] - lz)[:10].as_signed(),
            "nan": t["nan"],
        })

        # ---- step 0: unpack the accumulator, compare exponents ----------------------------------
        acc = self.acc
        a_exp, a_frac = acc[23:31], acc[0:23]
        a_be = Cat(Mux(a_exp == 0, 1, a_exp), Const(0, 2)).as_signed()   # subnormals: exponent 1
        v = step(0, {
            "a_sign": acc[31], "a_be": a_be, "a_sig": Cat(a_frac, a_exp != 0),
            "a_nan": (a_exp == 0xFF) & (a_frac != 0), "a_inf": (a_exp == 0xFF) & (a_frac == 0),
            "d_ap": (a_be - t["p_be"])[:11].as_signed(),
            **t,
        })

        # ---- step 1: choose the larger operand X ------------------------------------------------
        d = v["d_ap"]
        swap = wire(1, (d < 0) & ~v["p_zero"], "swap")                  # the term is larger
        # Y is shifted right by |d|. For a swap, -d = ~d + 1: Y (the accumulator) enters the
        # window already shifted right by one (wiring only) and is shifted by ~d, so no second
        # subtractor is needed. Any shift of 27 or more moves all of Y into the sticky bit, and
        # a zero term is "below everything": it is shifted out entirely.
        far = Mux(d[10], d[5:11] != 0b111111, d[5:11] != 0)
        shift = Mux(v["p_zero"] | far, 31, d[:5] ^ swap.replicate(5))
        p_sig24 = Cat(Const(0, 11), v["p_sig"])
        flag_names = ("a_sign", "a_nan", "a_inf", "nan", "keep")
        flags = {k: v[k] for k in flag_names}
        v = step(1, {
            **flags,
            "shift": shift,
            "x_sig": Mux(swap, p_sig24, v["a_sig"]),
            # Y's window: 24 significand bits above guard, round and sticky (see step 2).
            "y": Mux(swap, Cat(Const(0, 2), v["a_sig"], Const(0, 1)),
                     Cat(Const(0, 3), Mux(v["p_zero"], 0, p_sig24))),
            "x_be": Mux(swap, v["p_be"], v["a_be"]),
            "x_sign": Mux(swap, v["p_sign"], v["a_sign"]),
            "sub": v["a_sign"] ^ v["p_sign"],
        })
        flags = {k: v[k] for k in flag_names}

        # ---- step 2: align Y right by the exponent difference, with a sticky bit -----------------
        y = v["y"]                                             # 24 bits + guard, round, sticky
        sticky = Const(0, 1)
        for k in range(5):
            amount = 1 << k
            sticky = Mux(v["shift"][k], sticky | (y[:amount] != 0), sticky)
            y = wire(unsigned(27), Mux(v["shift"][k], y >> amount, y), f"align_{k}")
        v = step(2, {**flags, "x_sig": v["x_sig"], "y": y | sticky, "x_be": v["x_be"],
                     "x_sign": v["x_sign"], "sub": v["sub"]})
        flags = {k: v[k] for k in flag_names}

        # ---- step 3: add or subtract (both orders) ----------------------------------------------
        x = Cat(Const(0, 3), v["x_sig"], Const(0, 1)).as_signed()
        y = Cat(v["y"], Const(0, 1)).as_signed()
        v = step(3, {**flags, "s_xy": Mux(v["sub"], x - y, x + y)[:29].as_signed(),
                     "s_yx": (y - x)[:28], "x_be": v["x_be"], "x_sign": v["x_sign"]})
        flags = {k: v[k] for k in flag_names}

        # ---- step 4: magnitude and its leading zeros --------------------------------------------
        negative = v["s_xy"] < 0                                          # only when subtracting
        mag = wire(unsigned(28), Mux(negative, v["s_yx"], v["s_xy"][:28]), "sum_mag")
        lz = leading_zeros(m, mag, "sum_lz")
        v = step(4, {**flags, "mag": mag, "lz": lz, "r_sign": v["x_sign"] ^ negative,
                     "x_be": v["x_be"]})
        flags = {k: v[k] for k in flag_names}

        # ---- step 5: normalization amount, never below the subnormal grid -----------------------
        # mag holds the sum's units-of-X bits at [26:3], its carry at 27. Shifting left by `sh`
        # brings the leading one to bit 27 (sh = lz) unless the exponent would fall below 1.
        x_be = v["x_be"]
        sh = Mux(x_be < v["lz"], x_be[:5], v["lz"])
        v = step(5, {**flags, "mag": v["mag"], "sh": sh, "r_be1": (x_be - sh)[:10].as_signed(),
                     "r_sign": v["r_sign"], "r_zero": v["mag"] == 0})
        flags = {k: v[k] for k in flag_names}

        # ---- step 6: shift, rounding decision ---------------------------------------------------
        norm = wire(unsigned(28), (v["mag"] << v["sh"])[:28], "norm")
        sig = norm[4:28]
        round_up = norm[3] & ((norm[0:3] != 0) | sig[0])
        v = step(6, {**flags, "sig": sig, "round_up": round_up, "r_be1": v["r_be1"],
                     "r_sign": v["r_sign"], "r_zero": v["r_zero"]})
        flags = {k: v[k] for k in flag_names}

        # ---- step 7: round and pack in one addition, special cases ------------------------------
        # ((be - 1) << 23) + significand (implicit bit included) + round: a subnormal (be = 1,
        # implicit bit 0) gets exponent field 0, a carry out of the significand bumps the exponent.
        packed = wire(signed(35), Cat(Const(0, 23), v["r_be1"]).as_signed()
                      + Cat(v["sig"], Const(0, 1)).as_signed() + v["round_up"], "packed")
        overflow = packed[23:35].as_signed() >= 0xFF
        result = Signal(FP32, name="sum")
        with m.If(v["nan"] | v["a_nan"]):
            m.d.comb += result.eq(QNAN)
        with m.Elif(v["a_inf"]):
            m.d.comb += result.eq(Cat(Const(_INF, 31), v["a_sign"]))
        with m.Elif(v["r_zero"]):
            m.d.comb += result.eq(Cat(Const(0, 31), v["keep"] & v["a_sign"]))  # exact zero: +0
        with m.Elif(overflow):
            m.d.comb += result.eq(Cat(Const(_INF, 31), v["r_sign"]))
        with m.Else():
            m.d.comb += result.eq(Cat(packed[0:31], v["r_sign"]))
        v = step(7, {"result": result})
        for _ in range(extra):
            v = register(v)
        m.d.comb += self.result.eq(v["result"])
        return m
