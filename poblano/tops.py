"""Registry of Poblano's top-level blocks, each in its default configuration.

``make verilog`` writes every entry to ``build/verilog/<name>.v`` and lints it; ``make fpga`` builds
the entries marked ``fpga=True`` for the ULX3S-85F. Add a block by adding one :class:`Top` line;
``factory`` is ``"module:Class"`` and is imported only when used.
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
    description: str = ""

    def build(self, **overrides):
        """Elaborate-ready instance of the component (``kwargs`` updated by ``overrides``)."""
        module, _, cls = self.factory.partition(":")
        return getattr(import_module(module), cls)(**{**self.kwargs, **overrides})


TOPS = [
    Top("stream_register", "rtl.common.stream_register:StreamRegister", {"shape": 64}, fpga=True,
        description="full-throughput skid-buffer register slice, 64-bit payload"),
]


def names():
    return [top.name for top in TOPS]


def get(name):
    for top in TOPS:
        if top.name == name:
            return top
    raise KeyError(name)
