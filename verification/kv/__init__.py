"""cocotb testbenches, environment and benchmark harness of the KV-cache controller (rtl/kv)."""
