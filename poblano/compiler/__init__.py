"""The compute tile's program side on the host: weight image, scratchpad plan, lowering, assembler.

``compile_model`` lowers a :class:`sim_models.transformer.Transformer` to a weight-memory image and
to programs of the tile's instruction set (:mod:`sim_models.tile_isa`); ``TileRunner`` runs them on
the instruction-level model (:mod:`sim_models.tile_iss`) as the host driver would. The layout and
the lowering are described in ``docs/tile_isa.md`` and ``docs/tile_compiler.md``.
"""

from poblano.compiler.assembler import AsmError, Program, assemble, disassemble, listing
from poblano.compiler.errors import CompileError
from poblano.compiler.lowering import CompiledModel, compile_model
from poblano.compiler.runtime import TileRunner
from poblano.compiler.weight_image import WeightImage, build_weight_image

__all__ = ["AsmError", "CompileError", "CompiledModel", "Program", "TileRunner", "WeightImage",
           "assemble", "build_weight_image", "compile_model", "disassemble", "listing"]
