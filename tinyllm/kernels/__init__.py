"""Quantized matmul kernels: GGUF weights kept as their blocks and multiplied in place with float32 activations,
equal to "dequantize, then F.linear" up to float32 summation order."""

from .checks import check_blocks
from .formats import FORMATS, QuantFormat
from .qmatmul import native_available, qmatmul
from .qweight import QuantWeight
from .reference import dequantize
from .threads import kernel_threads, torch_single_threaded

__all__ = [
    "FORMATS",
    "QuantFormat",
    "QuantWeight",
    "check_blocks",
    "dequantize",
    "kernel_threads",
    "native_available",
    "qmatmul",
    "torch_single_threaded",
]
