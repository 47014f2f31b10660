"""Session-wide pytest setup: pinned toolchain on PATH, its versions in the report header."""

from poblano import toolchain

toolchain.activate()


def pytest_report_header(config):
    versions = toolchain.tool_versions()
    icarus = "present" if toolchain.icarus_available() else "MISSING (Icarus runs will be skipped)"
    return [f"poblano toolchain: verilator {versions['verilator']} ({toolchain.verilator_bin()})",
            f"poblano toolchain: icarus {icarus}: {versions['iverilog']}"]
