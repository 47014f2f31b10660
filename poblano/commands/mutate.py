"""``poblano mutate``: mutation testing of rtl/ (docs/mutation.md)."""

import os
import shlex
import signal
from pathlib import Path

from poblano.errors import UsageError
from poblano.mutation import mapping

NAME = "mutate"
HELP = ("mutation testing of rtl/: mutants of the Amaranth code run against each file's fast tests, "
        "survivors against its cocotb tests; report in benchmarks/results/mutation.md")

ROOT = Path(__file__).resolve().parents[2]
JSON_REPORT = Path("build") / "mutation" / "mutation.json"
MD_REPORT = Path("benchmarks") / "results" / "mutation.md"


def add_arguments(parser):
    parser.add_argument("--block", action="append", metavar="NAME",
                        help="an area of rtl/ (common, kv, mx, noc, ...) or one file's name "
                             "(fp32_accumulate, or mx/layouts where the name is ambiguous); repeatable")
    parser.add_argument("--file", action="append", metavar="PATH",
                        help="an RTL file, e.g. rtl/mx/fp32_accumulate.py; repeatable")
    parser.add_argument("--max", metavar="N", help="at most N mutants per file, spread evenly over it")
    parser.add_argument("--fast-only", action="store_true",
                        help="judge by the fast tests only (no cocotb re-run of the survivors)")
    parser.add_argument("--timeout-factor", metavar="X", default="3",
                        help="a run is timed out after X times the clean run (default 3; at least 30 s)")
    parser.add_argument("--no-cache", action="store_true",
                        help="re-run every mutant and clean run instead of using cached results")
    parser.add_argument("--list", action="store_true", help="list each file's tests and mutants; run nothing")
    parser.add_argument("--report-only", action="store_true",
                        help=f"rewrite {MD_REPORT} from {JSON_REPORT} (after editing "
                             "poblano/mutation/equivalent.py); run nothing")


def _positive(value, option, kind):
    try:
        number = kind(value)
    except ValueError:
        raise UsageError(f"{option} needs a positive number, not {value!r}") from None
    if number <= 0:
        raise UsageError(f"{option} needs a positive number, not {value!r}")
    return number


def _resolve_file(root, text):
    path = Path(text)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, root / path]
    for candidate in candidates:
        candidate = candidate.resolve()
        try:
            rel = candidate.relative_to(root).as_posix()
        except ValueError:
            continue
        if candidate.is_file():
            if rel not in mapping.rtl_files(root):
                raise UsageError(f"{text}: not an RTL file (rtl/<area>/<name>.py)")
            return rel
    raise UsageError(f"{text}: no such file")


def _resolve_block(root, name, files):
    areas = sorted({f.split("/")[1] for f in files})
    name = name.strip("/")
    if name in areas:
        return [f for f in files if f.split("/")[1] == name]
    matches = [f for f in files if f.removeprefix("rtl/").removesuffix(".py") == name
               or Path(f).stem == name]
    if len(matches) > 1:
        choices = ", ".join(f.removeprefix("rtl/").removesuffix(".py") for f in matches)
        raise UsageError(f"block {name!r} is ambiguous: {choices}")
    if not matches:
        raise UsageError(f"unknown block {name!r}; areas: {', '.join(areas)}, or a file's name "
                         "such as fp32_accumulate")
    return matches


def select_files(root, blocks, paths):
    """The RTL files named by ``--block`` and ``--file`` (all of rtl/ when neither is given)."""
    root = Path(root)
    files = mapping.rtl_files(root)
    if not blocks and not paths:
        return files
    chosen = []
    for name in blocks or ():
        chosen += _resolve_block(root, name, files)
    for text in paths or ():
        chosen.append(_resolve_file(root, text))
    return list(dict.fromkeys(chosen))


def _command(args):
    parts = ["poblano", "mutate"]
    for name in args.block or ():
        parts += ["--block", name]
    for name in args.file or ():
        parts += ["--file", name]
    if args.max is not None:
        parts += ["--max", str(args.max)]
    if args.fast_only:
        parts.append("--fast-only")
    if args.no_cache:
        parts.append("--no-cache")
    if args.timeout_factor != "3":
        parts += ["--timeout-factor", args.timeout_factor]
    return shlex.join(parts)


def _list(campaign, files):
    for path in files:
        sel = campaign.selection(path)
        sample, total = campaign.mutants(path)
        print(f"{path}: {total} mutants" + (f" ({len(sample)} selected)" if len(sample) < total else ""))
        proofs = f" + proofs {' '.join(sel.proofs)}" if sel.proofs else ""
        print(f"  fast:   {' '.join(sel.fast) or '-'}{proofs}")
        print(f"  cocotb: {' '.join(sel.cocotb) or '-'}")
        for m in sample:
            print(f"  {m.line:5d} {m.operator:7s} {m.function}: {m.description}")
    return 0


def _report_only(report, files, everything):
    entries = report.load_json(ROOT / JSON_REPORT)
    chosen = [entries[f] for f in (entries if everything else files) if f in entries]
    if not chosen:
        raise UsageError(f"no results in {JSON_REPORT} for the chosen files; run poblano mutate first")
    for e in chosen:
        report.refresh_equivalents(e)
    report.merge_json(ROOT / JSON_REPORT, chosen)
    md = report.write_markdown(ROOT / MD_REPORT, chosen)
    print(f"rewrote {md.relative_to(ROOT)} from {JSON_REPORT}: {', '.join(e['path'] for e in chosen)}")
    return 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def run(args):
    from poblano.mutation import campaign as campaign_mod
    from poblano.mutation import report

    max_mutants = _positive(args.max, "--max", int) if args.max is not None else None
    factor = _positive(args.timeout_factor, "--timeout-factor", float)
    files = select_files(ROOT, args.block, args.file)
    if not files:
        raise UsageError("no RTL file to mutate")
    if args.report_only:
        return _report_only(report, files, everything=not (args.block or args.file))
    campaign = campaign_mod.Campaign(ROOT, fast_only=args.fast_only, max_mutants=max_mutants,
                                     timeout_factor=factor, use_cache=not args.no_cache)
    try:
        for path in files:
            campaign.selection(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.list:
        return _list(campaign, files)

    # Mutation runs are long and the machine is shared: run them, and everything they start, niced.
    current = os.nice(0)
    if current < 19:
        os.nice(19 - current)
    # A TERM stops the run in flight and removes the scratch tree, as Ctrl-C does; results so far
    # are in the cache, so the same command resumes.
    signal.signal(signal.SIGTERM, _interrupted)
    command = _command(args)
    results = campaign.run(files)
    entries = [report.entry(r, ROOT, command, args.fast_only) for r in results]
    report.merge_json(ROOT / JSON_REPORT, entries)
    md = report.write_markdown(ROOT / MD_REPORT, entries)
    failed = 0
    rate, duration = report.format_rate, report.format_duration
    for e in entries:
        row = report.summary(e)
        if e["error"]:
            failed += 1
            print(f"{e['path']}: NOT JUDGED: {e['error']}")
            continue
        print(f"{e['path']}: {row['mutants']} mutants, {row['killed_fast']} killed by the fast tests, "
              f"{row['killed_cocotb']} by cocotb, {row['timed_out']} timed out, {row['survived']} survived "
              f"({row['equivalent']} argued equivalent); kill rate {rate(row['rate_all'])} "
              f"(fast tests {rate(row['rate_fast'])}); {duration(e['wall_seconds'])}")
    print(f"report: {md.relative_to(ROOT)}, {JSON_REPORT}")
    return 1 if failed else 0
