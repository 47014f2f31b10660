"""Poblano's benchmarks: each module here is runnable as ``python -m benchmarks.<name>`` and writes
its measured figures to ``benchmarks/results/<name>.md`` (and ``.json``). ``make bench`` runs them all."""
