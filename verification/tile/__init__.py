"""Testbenches and models of the compute tile (``rtl.tile``)."""
