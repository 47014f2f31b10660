"""Performance and energy model: from the tile's measured RTL cycles to tokens/s/user and tokens/s
per megawatt of a system built from Poblano dies (``docs/perf_model.md``).

One concept per module: :mod:`.system` (system descriptions), :mod:`.model_desc` (model
descriptions), :mod:`.tile_costs` (cycles of the tile's instructions), :mod:`.energy` (energy per
operation), :mod:`.mapping` (parallelism search), :mod:`.estimate` (per operating point).
"""
