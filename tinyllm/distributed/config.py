"""ParallelConfig: how many ranks, where they meet, and how long a silent rank is waited for."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import TinyLLMError


@dataclass
class ParallelConfig:
    """tensor_parallel_size ranks meet at master_addr:master_port (defaults: $MASTER_ADDR / $MASTER_PORT as
    torch.distributed reads them, else 127.0.0.1 and a free port). This process is rank 0, the driver; ranks
    1 .. num_local_ranks - 1 are started here, the others join from other machines (`tinyllm worker`).
    A collective that waits longer than timeout_s for a peer declares that peer hung."""

    tensor_parallel_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    num_local_ranks: int | None = None  # default: all of them
    timeout_s: float = 20.0
    startup_timeout_s: float = 300.0  # every rank joins and loads its model within this

    def __post_init__(self) -> None:
        n = self.tensor_parallel_size
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TinyLLMError(f"tensor_parallel_size must be a positive integer, got {n!r}")
        if self.master_addr is None:
            self.master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        if self.master_port is None and os.environ.get("MASTER_PORT"):
            self.master_port = _port(os.environ["MASTER_PORT"], "MASTER_PORT")
        if self.master_port is not None:
            self.master_port = _port(self.master_port, "master_port")
        if self.num_local_ranks is None:
            self.num_local_ranks = n
        if not isinstance(self.num_local_ranks, int) or not 1 <= self.num_local_ranks <= n:
            raise TinyLLMError(f"num_local_ranks must be in [1, {n}], got {self.num_local_ranks!r}")
        if self.num_local_ranks < n and self.master_port is None:
            raise TinyLLMError("a group spanning machines needs master_port (or $MASTER_PORT), got none")
        for name in ("timeout_s", "startup_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise TinyLLMError(f"{name} must be a positive number of seconds, got {value!r}")

    @classmethod
    def of(cls, tensor_parallel_size: int, parallel: ParallelConfig | None) -> ParallelConfig:
        """`LLM(tensor_parallel_size=N)` or `LLM(parallel=ParallelConfig(...))`: a size given with both agrees."""
        if parallel is None:
            return cls(tensor_parallel_size)
        if tensor_parallel_size not in (1, parallel.tensor_parallel_size):
            raise TinyLLMError(
                f"tensor_parallel_size={tensor_parallel_size} disagrees with parallel.tensor_parallel_size="
                f"{parallel.tensor_parallel_size}"
            )
        return parallel


def _port(value, name: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 0 < port < 65536:
        raise TinyLLMError(f"{name} must be a TCP port in 1..65535, got {value!r}")
    return port
