"""Quantized matmul kernels: GGUF weights kept as their blocks and multiplied in place with float32 activations,
equal to "dequantize, then F.linear" up to float32 summation order."""

from .checks import check_blocks
from .formats import FORMATS, QuantFormat
from .qmatmul import native_available, qmatmul
from .qweight import QuantWeight
from .reference import dequantize

__all__ = ["FORMATS", "QuantFormat", "QuantWeight", "check_blocks", "dequantize", "native_available", "qmatmul"]
