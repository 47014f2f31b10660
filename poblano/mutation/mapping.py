"""Which tests a mutant of each RTL file runs against: the one table, and the convention behind it.

A mutant of ``rtl/<area>/<stem>.py`` runs first against the file's *fast* tests and, if it
survives them, against its *cocotb* tests:

* fast: the Amaranth-simulator cases of ``tests/rtl/<area>/test_<stem>.py`` (those not marked
  ``cocotb``), then the formal proofs named ``<area>_<stem>*`` or ``<stem>*`` (cases of
  ``tests/formal/test_proofs.py``);
* cocotb: ``tests/rtl/<area>/test_<stem>_cocotb.py`` and the ``cocotb``-marked cases of
  ``test_<stem>.py``.

:data:`OVERRIDES` replaces that answer for every file whose tests are named otherwise or live with
the block that uses it; it is the one place to edit when a block's tests move or a new piece has no
tests of its own.
"""

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Selection", "OVERRIDES", "selection_for", "rtl_files", "proof_names", "proof_files",
           "local_closure", "PROOFS_FILE"]

PROOFS_FILE = "tests/formal/test_proofs.py"
_LOCAL_PACKAGES = ("rtl", "sim_models", "verification", "poblano", "tests")


@dataclass(frozen=True)
class Selection:
    """The tests of one RTL file (paths relative to the project root)."""

    fast: tuple = ()           #: test files whose non-cocotb cases are fast tests
    proofs: tuple = ()         #: formal proof names (not globs) run as fast tests, after ``fast``
    cocotb: tuple = ()         #: test files whose cocotb cases are run for fast-test survivors
    note: str = field(default="", compare=False)

    @property
    def empty(self):
        return not (self.fast or self.proofs or self.cocotb)

    def fast_args(self):
        """pytest arguments of the fast stage (unit tests first: they are cheaper than proofs)."""
        if not (self.fast or self.proofs):
            return []
        args = ["-m", "not cocotb", *self.fast]
        args += [f"{PROOFS_FILE}::test_proof[{name}]" for name in self.proofs]
        return args

    def cocotb_args(self):
        return ["-m", "cocotb", *self.cocotb] if self.cocotb else []

    def fast_files(self):
        return tuple(self.fast) + ((PROOFS_FILE,) if self.proofs else ())


@dataclass(frozen=True)
class _Override:
    fast: tuple = ()
    proofs: tuple = ()         #: globs over proof names
    cocotb: tuple = ()
    note: str = ""


_MX_USERS = ("tests/rtl/mx/test_block_dot_cocotb.py", "tests/rtl/mx/test_mac_array_cocotb.py")
_KV_COCOTB = ("tests/rtl/kv/test_kv_cache_cocotb.py",)
_ROUTER_COCOTB = ("tests/rtl/noc/test_router_cocotb.py",)
_VPU_COCOTB = ("tests/rtl/vpu/test_vector_unit_cocotb.py",)


def _vpu(*fast, proofs=(), note="cocotb: through VectorUnit"):
    """A vector-unit file: its own fast tests, then the VectorUnit's cocotb regression."""
    return _Override(fast=tuple(f"tests/rtl/vpu/{name}" for name in fast), proofs=proofs, cocotb=_VPU_COCOTB,
                     note=note)

def _tile(*fast, note="cocotb: through the tile"):
    """A compute-tile file: its own fast tests (against the ISS), then the tile's cocotb regression."""
    return _Override(fast=tuple(f"tests/rtl/tile/{name}" for name in fast),
                     cocotb=("tests/rtl/tile/test_tile_cocotb.py",), note=note)


#: RTL file -> its tests, for every file whose tests do not follow the naming convention (or that
#: is also exercised by the cocotb tests of the blocks using it). An entry replaces the convention.
OVERRIDES = {
    "rtl/common/credited_buffer.py": _Override(
        fast=("tests/rtl/common/test_credited_buffer.py",), proofs=("credited_buffer*",),
        cocotb=("tests/rtl/mx/test_mac_array_cocotb.py",), note="cocotb: through MacArray"),
    "rtl/common/parameters.py": _Override(fast=("tests/rtl/mx/test_mx_parameters.py",)),
    "rtl/common/unchecked_read.py": _Override(
        fast=("tests/rtl/common/test_credited_buffer.py", "tests/rtl/kv/test_kv_cache.py"),
        cocotb=_KV_COCOTB, note="through CreditedBuffer and KvCache"),
    "rtl/common/xorshift.py": _Override(
        fast=("tests/rtl/common/test_xorshift.py", "tests/rtl/noc/test_traffic.py"),
        cocotb=("tests/rtl/noc/test_traffic_mesh_cocotb.py",),
        note="its own unit test, and through the traffic generator and checker"),
    "rtl/kv/command_engine.py": _Override(fast=("tests/rtl/kv/test_kv_cache.py",), cocotb=_KV_COCOTB,
                                          note="through KvCache"),
    "rtl/kv/read_engine.py": _Override(fast=("tests/rtl/kv/test_kv_cache.py",), cocotb=_KV_COCOTB,
                                       note="through KvCache"),
    "rtl/kv/layouts.py": _Override(
        fast=("tests/rtl/kv/test_kv_cache.py", "tests/rtl/kv/test_page_allocator.py"), cocotb=_KV_COCOTB),
    "rtl/kv/page_allocator.py": _Override(
        fast=("tests/rtl/kv/test_page_allocator.py",), proofs=("kv_allocator*",), cocotb=_KV_COCOTB),
    "rtl/kv/secded_encoder.py": _Override(
        fast=("tests/rtl/kv/test_secded.py",), proofs=("kv_ecc*",), cocotb=_KV_COCOTB),
    "rtl/kv/secded_decoder.py": _Override(
        fast=("tests/rtl/kv/test_secded.py",), proofs=("kv_ecc*",), cocotb=_KV_COCOTB),
    "rtl/mx/dot_product.py": _Override(fast=("tests/rtl/mx/test_dot_product.py",), cocotb=_MX_USERS,
                                       note="cocotb: through BlockDot and MacArray"),
    "rtl/mx/fp32_accumulate.py": _Override(
        fast=("tests/rtl/mx/test_fp32_accumulate.py",), proofs=("mx_fp32_accumulate*",), cocotb=_MX_USERS,
        note="cocotb: through BlockDot and MacArray"),
    "rtl/mx/layouts.py": _Override(
        fast=("tests/rtl/mx/test_mac_array.py", "tests/rtl/mx/test_dot_product.py",
              "tests/rtl/mx/test_quantizer.py"), cocotb=_MX_USERS,
        note="the array's row lane and result beat: through MacArray"),
    "rtl/mx/mac_pe.py": _Override(
        proofs=("mx_mac_array*",), cocotb=("tests/rtl/mx/test_mac_array_cocotb.py",),
        note="through MacArray"),
    "rtl/noc/arbiter.py": _Override(
        fast=("tests/rtl/noc/test_allocators.py",), proofs=("noc_output_allocator*", "noc_router*"),
        cocotb=_ROUTER_COCOTB),
    "rtl/noc/layouts.py": _Override(
        fast=("tests/rtl/noc/test_allocators.py", "tests/rtl/noc/test_traffic.py"), cocotb=_ROUTER_COCOTB),
    "rtl/noc/network_interface.py": _Override(cocotb=("tests/rtl/noc/test_mesh_cocotb.py",),
                                              note="through Mesh"),
    "rtl/noc/output_allocator.py": _Override(
        fast=("tests/rtl/noc/test_allocators.py",), proofs=("noc_output_allocator*", "noc_router*"),
        cocotb=_ROUTER_COCOTB),
    "rtl/noc/router.py": _Override(proofs=("noc_router*",), cocotb=_ROUTER_COCOTB),
    "rtl/noc/traffic_checker.py": _Override(
        fast=("tests/rtl/noc/test_traffic.py",), cocotb=("tests/rtl/noc/test_traffic_mesh_cocotb.py",)),
    "rtl/noc/traffic_generator.py": _Override(
        fast=("tests/rtl/noc/test_traffic.py",), cocotb=("tests/rtl/noc/test_traffic_mesh_cocotb.py",)),
    "rtl/noc/vc_buffer.py": _Override(
        fast=("tests/rtl/noc/test_allocators.py",), proofs=("noc_vc_buffer*",), cocotb=_ROUTER_COCOTB),
    "rtl/vpu/accumulator.py": _vpu("test_accumulator.py", "test_reducer.py"),
    "rtl/vpu/divider.py": _vpu("test_divider.py", "test_function_unit.py"),
    "rtl/vpu/exp_core.py": _vpu("test_exp_core.py", "test_function_unit.py"),
    "rtl/vpu/fp32_compare.py": _vpu("test_fp32_compare.py", "test_lane.py"),
    "rtl/vpu/fp32_fma.py": _vpu("test_fp32_fma.py", proofs=("vpu_fma_add*",)),
    "rtl/vpu/function_unit.py": _vpu("test_function_unit.py", "test_lane.py"),
    "rtl/vpu/grid_sum.py": _vpu("test_grid_sum.py"),
    "rtl/vpu/isqrt.py": _vpu("test_isqrt.py", "test_function_unit.py"),
    "rtl/vpu/lane.py": _vpu("test_lane.py"),
    "rtl/vpu/layouts.py": _vpu(note="the layouts; cocotb: through VectorUnit"),
    "rtl/vpu/max_reducer.py": _vpu("test_reducer.py"),
    "rtl/vpu/multiplier.py": _vpu("test_multiplier.py"),
    "rtl/vpu/reducer.py": _vpu("test_reducer.py"),
    "rtl/vpu/rms_output.py": _vpu("test_rms_output.py"),
    "rtl/vpu/rms_scale.py": _vpu("test_rms_scale.py"),
    "rtl/vpu/round_pack.py": _vpu("test_round_pack.py", "test_fp32_fma.py"),
    "rtl/vpu/topk.py": _vpu("test_topk.py", proofs=("vpu_topk*",)),
    "rtl/vpu/vector_unit.py": _vpu("test_vector_unit_sequences.py", note="then its cocotb regression"),
    "rtl/tile/layouts.py": _tile("test_sequencer.py", "test_vop_engine.py", "test_gemm_engine.py",
                                 "test_kv_engine.py", "test_attention_engine.py"),
    "rtl/tile/scratchpad.py": _tile("test_scratchpad.py", "test_sequencer.py", "test_vop_engine.py",
                                    "test_kv_engine.py"),
    "rtl/tile/sequencer.py": _tile("test_sequencer.py", "test_attention_engine.py"),
    "rtl/tile/vop_engine.py": _tile("test_vop_engine.py", "test_attention_engine.py"),
    "rtl/tile/kv_engine.py": _tile("test_kv_engine.py", "test_attention_engine.py"),
    "rtl/tile/attention_engine.py": _tile("test_attention_engine.py"),
    "rtl/tile/control_path.py": _tile("test_attention_engine.py", "test_sequencer.py"),
    "rtl/tile/gemm_engine.py": _tile("test_gemm_engine.py"),
    "rtl/tile/tile.py": _tile(note="only through the tile's cocotb regression"),
}


def rtl_files(root):
    """Every RTL source file (``rtl/<area>/<name>.py``, no ``__init__``), relative to ``root``."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in (root / "rtl").glob("*/*.py")
                  if p.name != "__init__.py")


def proof_files():
    """{proof name: the file of ``verification/formal`` that defines it}, in discovery order.

    The same walk as :func:`verification.formal.proof.discover` (it imports the proofs of the
    working tree); a result depends on the files of the proofs it ran, not on every proof file.
    """
    import importlib
    import pkgutil

    from verification import formal

    found = {}
    for info in sorted(pkgutil.iter_modules(formal.__path__), key=lambda i: i.name):
        if info.name == "proof":
            continue
        module = importlib.import_module(f"verification.formal.{info.name}")
        for p in getattr(module, "PROOFS", []):
            found[p.name] = f"verification/formal/{info.name}.py"
    return found


def proof_names():
    """Names of every formal proof, in discovery order."""
    return list(proof_files())


def _has_cocotb_cases(path):
    try:
        return "pytest.mark.cocotb" in path.read_text()
    except OSError:
        return False


def _has_fast_cases(path):
    """Whether a test file has a test function not marked cocotb (module-level marks aside)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            marks = [ast.unparse(d) for d in node.decorator_list]
            if not any("mark.cocotb" in m for m in marks):
                return True
    return False


def selection_for(root, path, proofs):
    """The :class:`Selection` of the RTL file ``path`` (relative to ``root``); ``proofs``: all names."""
    root = Path(root)
    parts = Path(path).parts
    if len(parts) != 3 or parts[0] != "rtl":
        raise ValueError(f"{path}: not an RTL file (rtl/<area>/<name>.py)")
    area, stem = parts[1], Path(parts[2]).stem
    override = OVERRIDES.get(Path(path).as_posix())
    if override is not None:
        globs, fast, cocotb, note = override.proofs, override.fast, override.cocotb, override.note
    else:
        unit = root / "tests" / "rtl" / area / f"test_{stem}.py"
        own = root / "tests" / "rtl" / area / f"test_{stem}_cocotb.py"
        fast = (unit.relative_to(root).as_posix(),) if _has_fast_cases(unit) else ()
        cocotb = tuple(p.relative_to(root).as_posix() for p in (unit, own) if _has_cocotb_cases(p))
        globs = (f"{area}_{stem}", f"{area}_{stem}_*", stem, f"{stem}_*")
        note = ""
    names = tuple(n for n in proofs if any(fnmatch.fnmatchcase(n, g) for g in globs))
    missing = [f for f in (*fast, *cocotb) if not (root / f).exists()]
    if missing:
        raise ValueError(f"{path}: mapped test file {missing[0]} does not exist "
                         "(poblano/mutation/mapping.py)")
    return Selection(fast=tuple(fast), proofs=names, cocotb=tuple(cocotb), note=note)


# -- what a result depends on: the local import closure ------------------------------------------

_MODULE_STRING = re.compile(r"""["']((?:verification|sim_models|rtl)(?:\.\w+)+)["']""")


def _module_file(root, dotted):
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(root, path):
    """Local modules ``path`` imports, plus modules named in strings (cocotb ``test_module=``)."""
    text = path.read_text()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    package = path.relative_to(root).with_suffix("").parts[:-1]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                if node.module:
                    base += node.module.split(".")
            else:
                base = (node.module or "").split(".")
            module = ".".join(base)
            names.append(module)
            names += [f"{module}.{a.name}" for a in node.names]
    names += _MODULE_STRING.findall(text)
    found = []
    for name in names:
        if name.split(".")[0] not in _LOCAL_PACKAGES:
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):          # the package __init__ files on the way
            f = _module_file(root, ".".join(parts[:i]))
            if f is not None:
                found.append(f)
    return found


def local_closure(root, paths):
    """Every project file (relative posix paths, sorted) the given files import, transitively."""
    root = Path(root)
    seen, todo = set(), [root / p for p in paths]
    while todo:
        f = todo.pop()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        if f.suffix == ".py":
            todo += _imports(root, f)
    return sorted(f.relative_to(root).as_posix() for f in seen)
