"""Compute tile: the MAC array, MX quantizer, vector unit and KV-cache slice run a program (issue 24)."""
