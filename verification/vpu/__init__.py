"""cocotb environment and testbenches of the vector unit (``rtl.vpu``)."""
