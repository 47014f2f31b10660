"""The compiler's error: a model or program the tile cannot take; the message is one line."""

__all__ = ["CompileError"]


class CompileError(ValueError):
    """The model does not fit the tile (scratchpad, KV cache, weight memory) or cannot be lowered."""
