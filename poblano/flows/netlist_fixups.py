"""Clean-ups of Yosys's ECP5 JSON netlist before nextpnr places it.

nextpnr-ecp5 (0.11) ends every carry chain whose last ``CCU2C.COUT`` is connected to a net with a
*feed-out* cell: a whole ``CCU2C`` (two LUT4 sites) that brings the carry out into the fabric. Yosys
leaves the last ``COUT`` of each chain connected to a wire even when nothing reads that wire (the
carry out of the top bit of an adder is almost never used), so nextpnr spends two LUT4 sites per
adder on a carry nobody reads. :func:`drop_dangling_carry_outs` disconnects those outputs; the
netlist's function is unchanged (an output that no cell and no port reads is removed).
"""

import json
from collections import Counter
from pathlib import Path

__all__ = ["drop_dangling_carry_outs"]


def _is_top(module):
    flag = module.get("attributes", {}).get("top", 0)
    return bool(int(flag, 2) if isinstance(flag, str) else flag)   # Yosys writes "000...01"


def _top_module(netlist):
    tops = [module for module in netlist["modules"].values() if _is_top(module)]
    if len(tops) != 1:
        raise ValueError(f"expected one top module in the netlist, found {len(tops)}")
    return tops[0]


def drop_dangling_carry_outs(path):
    """Disconnect every ``CCU2C.COUT`` that no cell input and no top-level output reads.

    Rewrites the JSON netlist at ``path`` in place and returns the number of outputs disconnected.
    """
    path = Path(path)
    netlist = json.loads(path.read_text())
    module = _top_module(netlist)
    readers = Counter()
    for cell in module["cells"].values():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "output":
                readers.update(bit for bit in bits if isinstance(bit, int))
    for port in module["ports"].values():
        if port["direction"] != "input":
            readers.update(bit for bit in port["bits"] if isinstance(bit, int))
    dropped = 0
    for cell in module["cells"].values():
        if cell["type"] != "CCU2C":
            continue
        bits = cell["connections"].get("COUT", [])
        if len(bits) == 1 and isinstance(bits[0], int) and not readers[bits[0]]:
            cell["connections"]["COUT"] = ["x"]
            dropped += 1
    if dropped:
        path.write_text(json.dumps(netlist))
    return dropped
