"""Poblano's verification library: cocotb runner, stream drivers, monitors, scoreboards.

Modules
-------
``runner``      build an Amaranth component for Verilator/Icarus and run a cocotb test module
``stream``      valid/ready stream driver, sink and protocol-checking monitor (cocotb)
``scoreboard``  in-order and out-of-order scoreboards
``packing``     pack/unpack ``amaranth.lib.data`` layouts to integers, exactly as the RTL lays them out
``bench``       seeded NumPy generators, clock and reset, bounded waits (watchdog)
"""

import json
import os

__all__ = ["config"]


def config():
    """The elaboration parameters of the design under test (``POBLANO_CONFIG``, set by the runner)."""
    return json.loads(os.environ.get("POBLANO_CONFIG", "{}"))
