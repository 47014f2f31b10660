"""``poblano regs``: the compute tile's host register map as a C header and as Markdown.

Both are generated from the one table, :func:`rtl.tile.register_map.tile_register_map`, for the
build parameters given (defaults: the tile's). ``--c-header PATH`` and ``--markdown PATH`` write the
files; with neither, the Markdown table is printed. ``docs/tile_registers.md`` holds the default
build's table (a test checks it is current).
"""

from pathlib import Path

from poblano.errors import UsageError

NAME = "regs"
HELP = "write the tile's host register map as a C header and/or a Markdown table"

C_PREFIX = "POBLANO_TILE"


def add_arguments(parser):
    parser.add_argument("--c-header", metavar="PATH", help="write the C header (#define "
                        f"{C_PREFIX}_<REG>_OFFSET, field _SHIFT/_MASK, region _BASE/_WORDS)")
    parser.add_argument("--markdown", metavar="PATH", help="write the Markdown register table")
    tile = parser.add_argument_group("tile parameters")
    tile.add_argument("--spad-words", type=int, default=65536, help="scratchpad words (default 65536)")
    tile.add_argument("--prog-words", type=int, default=1024,
                      help="program capacity in instructions (default 1024)")
    tile.add_argument("--mac-rows", type=int, default=4, help="MAC array rows (default 4)")
    tile.add_argument("--mac-cols", type=int, default=4, help="MAC array columns (default 4)")
    tile.add_argument("--interleave", type=int, default=8, help="accumulators per PE (default 8)")
    tile.add_argument("--lanes", type=int, default=8, help="vector-unit lanes (default 8)")


def run(args):
    from rtl.tile.register_map import tile_register_map

    try:
        regmap = tile_register_map(spad_words=args.spad_words, prog_words=args.prog_words,
                                   rows=args.mac_rows, cols=args.mac_cols,
                                   interleave=args.interleave, lanes=args.lanes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    outputs = []
    if args.c_header:
        outputs.append((args.c_header, regmap.c_header(C_PREFIX)))
    if args.markdown:
        outputs.append((args.markdown, regmap.markdown()))
    if not outputs:
        print(regmap.markdown(), end="")
        return 0
    for path, text in outputs:
        try:
            Path(path).write_text(text)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror}") from None
        print(f"wrote {path}")
    return 0
