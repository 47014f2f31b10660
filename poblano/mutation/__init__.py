"""Mutation testing of the RTL: ``make mutate`` and ``poblano mutate`` (docs/mutation.md).

* :mod:`.mutator` makes mutants of one Amaranth source file with Python's ``ast`` (operators, constants
  ±1, ``Mux`` arms swapped, an ``.eq`` dropped, an ``m.If`` condition inverted), each a text splice
  of the original source.
* :mod:`.mapping` is the one table from an RTL file to its fast tests (Amaranth simulator, formal
  proofs) and its cocotb tests.
* :mod:`.campaign` runs each mutant on a scratch copy of the tree, fast tests first and survivors
  against the cocotb tests, with a timeout and a cache under ``build/mutation/``.
* :mod:`.report` writes ``build/mutation/mutation.json`` and ``benchmarks/results/mutation.md``.
"""
