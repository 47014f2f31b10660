# amaranth: UnusedElaboratable=no
"""Constructor checks of the MX tensor-core components (a bad parameter is a clear error)."""

import pytest

from rtl.mx.dot_product import DotProduct, ProductMapping
from rtl.mx.fp32_accumulate import Fp32Accumulate
from rtl.mx.mac_array import MacArray
from rtl.mx.mac_pe import MacPe


@pytest.mark.parametrize("stages", [0, -1, 1.5, True])
def test_adder_rejects_bad_stage_count(stages):
    with pytest.raises(ValueError, match="stages"):
        Fp32Accumulate(stages)


def test_mapping_rejects_too_many_pairs():
    with pytest.raises(ValueError, match="exceeds"):
        ProductMapping(10, 7)
    with pytest.raises(ValueError, match="non-negative"):
        ProductMapping(-1, 0)


def test_dot_product_rejects_non_mapping():
    with pytest.raises(TypeError, match="ProductMapping"):
        DotProduct((9, 7))


@pytest.mark.parametrize("kwargs,match", [
    ({"rows": 0}, "rows"), ({"cols": 2.0}, "cols"), ({"interleave": 1}, "interleave"),
    ({"result_depth": 0}, "result_depth"), ({"mapping": [1, 2]}, "ProductMapping"),
])
def test_mac_array_rejects_bad_parameters(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MacArray(**kwargs)


def test_pe_rejects_column_outside_array():
    with pytest.raises(ValueError, match="col"):
        MacPe(col=3, cols=3, interleave=8)


def test_array_properties():
    array = MacArray(2, 3, interleave=4, mapping=(9, 7))
    assert array.tile_shape == (2, 12)
    assert array.mapping == ProductMapping(9, 7)
    assert array.latency > array.result_delay
