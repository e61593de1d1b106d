"""Tensor parallelism over torch.distributed: gloo on the CPU, NCCL on CUDA (see driver.py and shard.py)."""

from .config import ParallelConfig
from .driver import TensorParallel
from .worker import ModelSource

__all__ = ["ModelSource", "ParallelConfig", "TensorParallel"]

