"""Host-side software of the tile: the register driver (:mod:`poblano.host.tile_registers`).

Everything here is generated at run time from the register map table
(:mod:`rtl.tile.register_map`), so the driver, the RTL register block, the C header and the docs
cannot disagree.
"""
