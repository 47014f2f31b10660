"""Vector unit: the non-GEMM binary32 math of a transformer layer (issue 22)."""
