"""``poblano formal``: every SymbiYosys proof under verification/formal."""

import fnmatch

from poblano.errors import UsageError
from verification.formal import proof

NAME = "formal"
HELP = "run the formal proofs (Amaranth Assert/Assume/Cover -> RTLIL -> yowasp-sby, smtbmc+z3)"


def add_arguments(parser):
    parser.add_argument("--only", metavar="GLOB", help="run only proofs whose name matches GLOB")
    parser.add_argument("--list", action="store_true", help="list the proofs and exit")


def run(args):
    proofs = proof.discover()
    if args.only:
        proofs = [p for p in proofs if fnmatch.fnmatch(p.name, args.only)]
        if not proofs:
            raise UsageError(f"no proof matches {args.only!r}")
    if args.list:
        for p in proofs:
            print(f"{p.name:36s} {p.mode:6s} depth {p.depth:3d}  {p.description}")
        return 0
    failed = 0
    for p in proofs:
        result = proof.run(p)
        mark = "PASS" if result.passed else result.status
        print(f"{p.name:36s} {p.mode:6s} depth {p.depth:3d}  {mark:5s} {result.seconds:6.1f}s",
              flush=True)
        if not result.passed:
            failed += 1
            print(f"  log: {result.log}")
    print(f"{len(proofs) - failed} passed, {failed} failed")
    return 1 if failed else 0
