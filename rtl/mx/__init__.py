"""MXFP4 tensor core: block-dot unit, MAC array, accumulate adder and quantizer."""
