"""Survivors argued equivalent: mutants no test can kill because the circuit does not change.

Each entry is keyed by the file, the enclosing function and the mutation as the report shows it
(``before``, ``after``: the enclosing expression, whitespace collapsed), so it survives edits that
only move lines. The reason is printed beside the survivor in ``benchmarks/results/mutation.md``
and the mutant is left out of the kill rate. Add an entry only with an argument a reviewer can
check; a survivor that is not equivalent needs a test instead.
"""

__all__ = ["EQUIVALENT", "reason"]

#: path -> {(function, before, after): reason}
EQUIVALENT = {
    "rtl/common/stream_register.py": {
        ("StreamRegister.elaborate", "self.o.valid.eq(1)", "(dropped)"):
            "o.valid is already 1 whenever skid_valid is: the skid register is loaded only while o holds a "
            "stalled word (o.valid & ~o.ready, a cycle that leaves o.valid alone), and o.valid is assigned "
            "otherwise only on the branch taken when skid_valid is 0; so holding o.valid instead of setting "
            "it to 1 changes nothing",
    },
}


def reason(path, function, before, after):
    """The argument that this mutant is equivalent, or ``None``."""
    return EQUIVALENT.get(path, {}).get((function, before, after))
