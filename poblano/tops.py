"""Registry of Poblano's top-level blocks, each in its default configuration.

``make verilog`` writes every entry to ``build/verilog/<name>.v`` and lints it; ``make fpga`` builds
the entries marked ``fpga=True`` for the ULX3S-85F, each against its own ``target_mhz`` where it has
one. Add a block by adding one :class:`Top` line; ``factory`` is ``"module:Class"`` and is imported
only when used.
"""

from dataclasses import dataclass, field
from importlib import import_module

__all__ = ["Top", "TOPS", "get", "names"]


@dataclass(frozen=True)
class Top:
    name: str
    factory: str
    kwargs: dict = field(default_factory=dict)
    fpga: bool = False
    #: The block's own clock goal for ``make fpga`` (None: the board constraint's 125 MHz).
    target_mhz: float | None = None
    #: Extra Yosys ``synth_ecp5`` options for its FPGA build.
    synth_opts: str = ""
    description: str = ""

    def build(self, **overrides):
        """Elaborate-ready instance of the component (``kwargs`` updated by ``overrides``)."""
        module, _, cls = self.factory.partition(":")
        return getattr(import_module(module), cls)(**{**self.kwargs, **overrides})


TOPS = [
    Top("stream_register", "rtl.common.stream_register:StreamRegister", {"shape": 64}, fpga=True,
        description="full-throughput skid-buffer register slice, 64-bit payload"),
    Top("kv_cache", "rtl.kv.kv_cache:KvCache", {}, fpga=True,
        description="KV-cache SRAM controller: 64 pages x 16 records x 64 bits, 4 banks, (72,64) SECDED"),
    Top("mx_quantizer", "rtl.mx.quantizer:MXQuantizer", {"input_format": "fp32", "formats": ("e2m1",)},
        fpga=True,
        description="MXFP4 quantizer: 32 FP32 in, 32 E2M1 codes + E8M0 scale out per cycle, FLOOR/RCEIL"),
    Top("mx_quantizer_all_formats", "rtl.mx.quantizer:MXQuantizer", {"input_format": "fp32"},
        description="MX quantizer, every element format per block (E2M1, E2M3, E3M2, E4M3, E5M2): 32 FP32 "
                    "in, 32 codes + E8M0 scale out per cycle; poblano fpga --top builds it"),
    Top("mx_mac_array", "rtl.mx.mac_array:MacArray", {"rows": 4, "cols": 4, "mapping": (9, 7)}, fpga=True,
        description="4x4 MXFP4 MAC array, 8 accumulators/PE, products on 9 MULT18 + 7 DP16KD pairs per PE"),
    Top("mx_block_dot", "rtl.mx.block_dot:BlockDot", {},
        description="block-dot unit: 32 E2M1 products, two E8M0 scales, one binary32 accumulate (RNE)"),
    Top("vpu", "rtl.vpu.vector_unit:VectorUnit", {"lanes": 4}, target_mhz=100,
        description="vector unit, 4 binary32 lanes: element-wise ops, functions, reductions, rmsnorm, "
                    "softmax, rope, topk (94% of the 85F's LUT4s: poblano fpga --top vpu builds it, "
                    "make fpga builds vpu_2lanes)"),
    Top("vpu_2lanes", "rtl.vpu.vector_unit:VectorUnit", {"lanes": 2}, fpga=True, target_mhz=100,
        description="the vector unit with 2 binary32 lanes, the size that fits a compute tile beside "
                    "the 4x4 MAC array and a KV-cache slice on one 85F"),
    Top("noc_router", "rtl.noc.router:Router", {"x": 1, "y": 1}, fpga=True, target_mhz=100,
        synth_opts="-nowidelut -dff",
        description="5-port mesh router: 4 VCs x 4 flits per port, 2 classes, 64-bit flits, XY, credits"),
    Top("noc_router_dynamic_vcs", "poblano.tops:router_with_dynamic_vcs", {"x": 1, "y": 1},
        target_mhz=100, synth_opts="-nowidelut -dff",
        description="the same router with dynamic VCs (32 order buckets); poblano fpga --top builds it"),
    Top("noc_output_allocator", "rtl.noc.output_allocator:OutputAllocator",
        {"inputs": 5, "vcs": 4, "classes": 2}, target_mhz=100, synth_opts="-nowidelut -dff",
        description="one router output's allocator alone: the local port's 20 requesters, static VCs; "
                    "poblano fpga --top builds it"),
    Top("tile_weight_port", "rtl.tile.weight_port:WeightPort", description="AXI4 weight reader, 8-B beats"),
    Top("tile", "rtl.tile.tile:Tile", {},
        description="compute tile (TileConfig defaults): AXI4-Lite registers, sequencer, 65,536-word "
                    "scratchpad in 8 banks, VOP engine and 8-lane vector unit, GEMM engine with the MX "
                    "quantizer and 4x4 MAC array, AXI4 weight port"),
    Top("tile_ulx3s", "poblano.tops:ulx3s_tile", {"rows": 2, "cols": 2, "lanes": 2}, target_mhz=50,
        description="compute tile reduced for the ULX3S-85F: 2 vector lanes, 2x2 MAC array (products "
                    "on 9 MULT18 + 4 DP16KD pairs per PE), 4,096-word scratchpad, 512 instructions, KV "
                    "slice of 16 pages x 16 records in one bank (head_dim 32), B buffer of 256 beats; "
                    "its clock goal is the vector unit's (the slowest block). It does not place yet "
                    "(about 92,000 logic cells for 83,640): poblano fpga --top builds it"),
]


def router_with_dynamic_vcs(x, y, order_buckets=32):
    """The default router with dynamic VCs (``NocParams(order_buckets=...)``)."""
    from rtl.noc.layouts import NocParams
    from rtl.noc.router import Router
    return Router(NocParams(order_buckets=order_buckets), x, y)


def ulx3s_tile(rows, cols, lanes=2, mapping=(9, 4), spad_words=4096, kv_pages=16, prog_words=512):
    """The compute tile in a configuration sized for one ULX3S-85F (the KV records of head_dim 32
    are 1,152 bits with ECC: one bank keeps them to 32 DP16KD)."""
    from rtl.tile.tile import Tile
    from sim_models.tile_isa import TileConfig
    config = TileConfig(spad_words=spad_words, rows=rows, cols=cols, interleave=8, lanes=lanes,
                        kv_pages=kv_pages, kv_page_tokens=16, kv_seqs=16, kv_max_pages_per_seq=16,
                        kv_banks=1, weight_buffer_beats=256)
    return Tile(config, head_dim=32, prog_words=prog_words, mac_mapping=mapping)


def names():
    return [top.name for top in TOPS]


def get(name):
    for top in TOPS:
        if top.name == name:
            return top
    raise KeyError(name)
