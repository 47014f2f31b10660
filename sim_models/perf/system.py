"""System descriptions: a TOML file (``sim_models/perf/systems/*.toml``) loaded into dataclasses.

:func:`load_system` takes a shipped name or a path and returns a :class:`System`; every missing,
mistyped or out-of-range field is a :class:`SystemError` with a one-line message naming the file
and the field. Units are in the field names (``_hz``, ``_bytes``, ``_bytes_per_s``, ``_ns``,
``_pj``, ``_w``).
"""

import tomllib
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

__all__ = ["SystemError", "Die", "Links", "Energy", "System", "load_system", "SYSTEMS_DIR",
           "shipped_systems"]

SYSTEMS_DIR = Path(__file__).resolve().parent / "systems"


class SystemError(ValueError):  # noqa: A001 - the module's own error, not the builtin
    """A system description that cannot be used (one line)."""


@dataclass(frozen=True)
class Die:
    """One compute die: tiles of a MAC array and a vector unit on a mesh, and its HBM."""

    tiles: int
    mesh_x: int
    mesh_y: int
    clock_hz: float
    rows: int
    cols: int
    interleave: int
    lanes: int
    sram_bytes: float            # on-die SRAM (all tiles)
    hbm_bytes: float
    hbm_bytes_per_s: float
    fabric_hop_cycles: float     # router latency per hop, in fabric cycles
    fabric_clock_hz: float
    flit_bytes: float
    peak_flops: float = 0.0      # dense MXFP4 FLOPS; 0: tiles * rows * cols * 64 * clock
    engine: str = "tile"         # "tile": priced by tile_costs; "roofline": peak and bandwidth
    mac_efficiency: float = 1.0  # fraction of peak a large GEMM reaches (roofline engine)
    hbm_efficiency: float = 1.0  # fraction of HBM bandwidth a stream reaches
    kv_bytes_per_element: float = 2.0
    weight_bits: float = 4.25    # MXFP4: 32 four-bit elements and an 8-bit scale

    @property
    def flops(self) -> float:
        """Dense MXFP4 FLOPS of the die (a block pair is 32 MACs, 64 FLOPs, per PE and cycle)."""
        return self.peak_flops or self.tiles * self.rows * self.cols * 64 * self.clock_hz


@dataclass(frozen=True)
class Links:
    """Die-to-die links, per die and direction."""

    scale_up_bytes_per_s: float
    scale_up_latency_ns: float
    scale_out_bytes_per_s: float
    scale_out_latency_ns: float
    max_dies: int                # largest scale-up domain


@dataclass(frozen=True)
class Energy:
    """Energy per operation (``docs/perf_model.md`` cites the source of each)."""

    mac_pj: float                # one MXFP4 multiply-accumulate
    sram_bit_pj: float
    hbm_bit_pj: float
    flit_hop_pj: float
    serdes_bit_pj: float
    die_static_w: float          # leakage, clocks, PHYs idle: per die


@dataclass(frozen=True)
class System:
    """A system: its name, die, links and energy figures."""

    name: str
    description: str
    die: Die
    links: Links
    energy: Energy


def shipped_systems() -> list[str]:
    """Names of the shipped system descriptions."""
    return sorted(p.stem for p in SYSTEMS_DIR.glob("*.toml"))


def _section(cls, table, where):
    if not isinstance(table, dict):
        raise SystemError(f"{where}: must be a table")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise SystemError(f"{where}: unknown field {unknown[0]!r}")
    values = {}
    for name, f in known.items():
        if name not in table:
            if f.default is MISSING:
                raise SystemError(f"{where}: missing field {name!r}")
            continue
        value = table[name]
        if f.type is str:
            if not isinstance(value, str):
                raise SystemError(f"{where}.{name}: must be a string, got {value!r}")
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SystemError(f"{where}.{name}: must be a number, got {value!r}")
            if f.type is int and value != int(value):
                raise SystemError(f"{where}.{name}: must be an integer, got {value!r}")
            if value < 0 or (value == 0 and name not in ("peak_flops", "die_static_w",
                                                         "scale_out_latency_ns",
                                                         "scale_out_bytes_per_s")):
                raise SystemError(f"{where}.{name}: must be positive, got {value!r}")
            value = int(value) if f.type is int else float(value)
        values[name] = value
    return cls(**values)


def parse_system(text: str, where: str) -> System:
    """A :class:`System` from TOML text; ``where`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SystemError(f"{where}: not valid TOML ({exc})") from None
    for key in ("name", "die", "links", "energy"):
        if key not in data:
            raise SystemError(f"{where}: missing {'field' if key == 'name' else 'table'} {key!r}")
    extra = sorted(set(data) - {"name", "description", "die", "links", "energy"})
    if extra:
        raise SystemError(f"{where}: unknown entry {extra[0]!r}")
    die = _section(Die, data["die"], f"{where}: die")
    if die.engine not in ("tile", "roofline"):
        raise SystemError(f"{where}: die.engine must be 'tile' or 'roofline', got {die.engine!r}")
    if die.mesh_x * die.mesh_y != die.tiles:
        raise SystemError(f"{where}: die.mesh_x * die.mesh_y ({die.mesh_x * die.mesh_y}) must equal "
                          f"die.tiles ({die.tiles})")
    for name in ("mac_efficiency", "hbm_efficiency"):
        if not 0 < getattr(die, name) <= 1:
            raise SystemError(f"{where}: die.{name} must be in (0, 1], got {getattr(die, name)}")
    links = _section(Links, data["links"], f"{where}: links")
    energy = _section(Energy, data["energy"], f"{where}: energy")
    return System(str(data["name"]), str(data.get("description", "")), die, links, energy)


def load_system(name_or_path) -> System:
    """A shipped system by name (``jalapeno-b0-like``) or a TOML file by path."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = SYSTEMS_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise SystemError(f"unknown system {str(name_or_path)!r} (shipped: "
                              f"{', '.join(shipped_systems())}; or give a .toml file)")
    if not path.is_file():
        raise SystemError(f"{path}: no such system file")
    return parse_system(path.read_text(), str(path))
