"""cocotb module behind ``poblano quantize --rtl``: quantize a file of blocks on the RTL.

Environment (set by :mod:`poblano.commands.quantize` through ``run_cocotb(extra_env=...)``):

``POBLANO_QUANTIZE_IN``
    ``.npy`` file of raw input patterns, shape ``(N, 32)``: ``uint32`` (binary32) for an ``fp32``
    instance, ``uint16`` (bfloat16) for a ``bf16`` one.
``POBLANO_QUANTIZE_MODE``
    ``floor`` or ``rceil`` (every block).
``POBLANO_QUANTIZE_FORMAT``
    Element format of every block (default ``e2m1``), one of the instance's formats (the run's
    config ``formats``, default E2M1 alone).
``POBLANO_QUANTIZE_OUT``
    ``.npz`` file written at the end: ``codes`` (``uint8``, ``(N, 32)``), ``scales`` (``uint8``,
    ``(N,)``) and ``cycles`` (clock cycles from the first input transfer to the last output transfer).

Blocks are streamed at full rate with the output always ready; the stream monitor checks the
valid/ready rules on the way. Comparing with the golden model is the caller's job.
"""

import os

import cocotb
import numpy as np

from rtl.mx.layouts import BLOCK_SIZE, MXFormat
from rtl.mx.quantizer import QuantizeMode, quantizer_input_layout, quantizer_output_layout
from verification import config
from verification.bench import TransferSpan, start_clock_and_reset, wait_until
from verification.stream import StreamDriver, StreamSink


@cocotb.test()
async def quantize_file(dut):
    """Stream every block of POBLANO_QUANTIZE_IN through the quantizer; write POBLANO_QUANTIZE_OUT."""
    raw = np.load(os.environ["POBLANO_QUANTIZE_IN"])
    mode = QuantizeMode[os.environ.get("POBLANO_QUANTIZE_MODE", "floor").upper()].value
    out_path = os.environ["POBLANO_QUANTIZE_OUT"]
    formats = tuple(config().get("formats", ("e2m1",)))
    fmt = os.environ.get("POBLANO_QUANTIZE_FORMAT", "e2m1")
    assert fmt in formats, f"format {fmt} is not built into this quantizer ({', '.join(formats)})"
    layout = quantizer_input_layout(config().get("input_format", "fp32"), formats)
    assert raw.ndim == 2 and raw.shape[1] == BLOCK_SIZE, f"bad input shape {raw.shape}"

    await start_clock_and_reset(dut)
    driver = StreamDriver(dut, "i", dut.clk, layout=layout)
    sink = StreamSink(dut, "o", dut.clk, layout=quantizer_output_layout(formats))
    span = TransferSpan(dut, dut.clk, inputs=("i",), output="o")
    for block in raw:
        payload = {"values": [int(v) for v in block], "mode": mode}
        if len(formats) > 1:
            payload["format"] = MXFormat[fmt.upper()].value
        driver.append(payload)
    await wait_until(dut.clk, lambda: sink.transfers == len(raw), max_cycles=3 * len(raw) + 100,
                     what=f"all {len(raw)} blocks delivered")
    span.stop()
    items = list(sink.items)
    codes = np.array([item["codes"] for item in items], dtype=np.uint8).reshape(len(raw), BLOCK_SIZE)
    scales = np.array([item["scale"] for item in items], dtype=np.uint8)
    cycles = span.cycles
    np.savez(out_path, codes=codes, scales=scales, cycles=np.int64(cycles))
    dut._log.info("quantized %d blocks in %d cycles", len(raw), cycles)
