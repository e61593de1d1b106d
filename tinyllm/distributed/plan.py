"""What the driver tells the workers, and how: a list of messages per broadcast on the control group.

A step's plan is the runner's StepInputs (token ids, positions, the slots derived from the block tables,
the attention layout, copy-on-write block copies); workers ask for no logits rows, since the driver alone
samples. Storage keys name one engine's KV pool: an LLM may hold several engines, each with its own pool.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..engine.runner import StepInputs


@dataclass
class NewStorage:
    key: int
    num_layers: int
    num_kv_heads: int  # this rank's
    head_dim: int
    num_blocks: int
    block_size: int
    dtype: torch.dtype
    resident: bool = False  # every page written at creation (PagedStorage)


@dataclass
class DropStorage:
    key: int


@dataclass
class Step:
    key: int
    inputs: StepInputs


@dataclass
class Shutdown:
    pass


def send(messages: list, group, timeout_s: float) -> None:
    """Broadcast messages from rank 0: their byte length, then the pickled bytes. The root's broadcast waits
    for every receiver, so a rank that stops answering raises here after timeout_s (the group's own timeout
    is the workers' idle patience, far longer)."""
    payload = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    size = torch.tensor([len(payload)], dtype=torch.int64)
    for tensor in (size, torch.frombuffer(bytearray(payload), dtype=torch.uint8)):
        dist.broadcast(tensor, src=0, group=group, async_op=True).wait(timeout=timedelta(seconds=timeout_s))


def receive(group) -> list:
    """The messages of the driver's next send (blocks until it comes)."""
    size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=0, group=group)
    data = torch.empty(int(size), dtype=torch.uint8)
    dist.broadcast(data, src=0, group=group)
    return pickle.loads(data.numpy().tobytes())
