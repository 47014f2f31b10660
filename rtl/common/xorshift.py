"""xorshift64: the fabric's cheap, exactly modelled pseudo-random source (``sim_models.noc_traffic``)."""

from amaranth.hdl import Const

__all__ = ["xorshift64_next", "start_state"]

_MASK64 = (1 << 64) - 1


def xorshift64_next(state):
    """The next state of an xorshift64 (13, 7, 17) generator, as a 64-bit combinational expression."""
    a = (state ^ (state << 13))[:64]
    b = a ^ (a >> 7)
    return (b ^ (b << 17))[:64]


def start_state(mixed_seed, key):
    """``mixed_seed ^ key``, or ``key`` where that is zero (an xorshift state must not be zero)."""
    key &= _MASK64
    s = (mixed_seed ^ Const(key, 64))[:64]
    return s | Const(key, 64) & (s == 0).replicate(64)
