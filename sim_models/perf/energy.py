"""Energy of an operating point from counts of operations and the system's energy per operation.

The figures live in the system files (``[energy]``); ``docs/perf_model.md`` cites the published
source of each default. :func:`energy_joules` is the whole contract.
"""

from dataclasses import dataclass

__all__ = ["Activity", "energy_joules"]


@dataclass
class Activity:
    """What a run does: MXFP4 MACs, SRAM bits, HBM bits, flit-hops on the die fabrics, SerDes bits."""

    macs: float = 0.0
    sram_bits: float = 0.0
    hbm_bits: float = 0.0
    flit_hops: float = 0.0
    serdes_bits: float = 0.0

    def __add__(self, other):
        return Activity(*(a + b for a, b in zip(vars(self).values(), vars(other).values(), strict=True)))


def energy_joules(activity: Activity, energy, dies: int, seconds: float) -> dict:
    """Joules per kind of operation, plus ``static`` (``dies`` dies for ``seconds``) and ``total``."""
    out = {"mac": activity.macs * energy.mac_pj * 1e-12,
           "sram": activity.sram_bits * energy.sram_bit_pj * 1e-12,
           "hbm": activity.hbm_bits * energy.hbm_bit_pj * 1e-12,
           "fabric": activity.flit_hops * energy.flit_hop_pj * 1e-12,
           "serdes": activity.serdes_bits * energy.serdes_bit_pj * 1e-12,
           "static": dies * energy.die_static_w * seconds}
    out["total"] = sum(out.values())
    return out
