"""Session-wide pytest setup: pinned toolchain on PATH, its versions in the report header."""

from poblano import toolchain

toolchain.activate()


def pytest_report_header(config):
    versions = toolchain.tool_versions()
    icarus = "present" if toolchain.icarus_available() else "MISSING (Icarus runs will be skipped)"
    return [f"poblano toolchain: verilator {versions['verilator']} ({toolchain.verilator_bin()})",
            f"poblano toolchain: icarus {icarus}: {versions['iverilog']}"]


#: Tests that take minutes (whole programs and models on the RTL tile, Icarus above all): run first,
#: so that with ``--dist worksteal`` the other worker shares out the short tests meanwhile instead of
#: one worker finishing a long test alone at the end.
LONG_FIRST = ("tests/rtl/tile/test_tile_model_cocotb.py", "tests/rtl/tile/test_tile_cocotb.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        if path not in LONG_FIRST:
            return (len(LONG_FIRST), False)
        return (LONG_FIRST.index(path), "icarus" not in item.nodeid)     # Icarus, the slowest, first

    items.sort(key=rank)                         # stable: the rest keep their order
