"""ModelParts: what a loaded model is for the engine. `LLM` builds it once, at load, and hands it to every
Engine it makes (`Engine(llm.parts, ...)`); the engine reads nothing else of the LLM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..cache.paged_cache import PagedStorage
from ..config import ModelConfig
from ..grammar.constraint import Grammars
from ..speculative.factory import DraftModels
from ..text.tokenizer import Tokenizer
from .runner import ModelRunner


class TensorParallelShare(Protocol):
    """What the engine asks of a tensor-parallel group (`distributed/driver.py`'s TensorParallel, rank 0):
    this rank's share of the KV heads, a runner for an engine's pool, draft models, and a look at its ranks."""

    num_local_kv_heads: int

    def runner(self, model, storage: PagedStorage) -> ModelRunner: ...

    def drafts(self, tokenizer: Tokenizer) -> DraftModels: ...

    def check_ranks(self) -> None:
        """Between steps: raise EngineDown if a rank is known to have stopped."""


@dataclass(frozen=True)
class ModelParts:
    """A loaded model as the engine runs it. `grammars` is shared with the LLM and the server's request
    preparation, so a grammar compiles once; `tensor_parallel` is None on one process."""

    model: object  # a decoder: LlamaForCausalLM or anything with its forward, .config, .dtype and .device
    tokenizer: Tokenizer
    config: ModelConfig
    eos_ids: tuple[int, ...]
    grammars: Grammars
    tensor_parallel: TensorParallelShare | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.eos_ids, tuple):
            raise ValueError(f"eos_ids must be a tuple of token ids, got {self.eos_ids!r}")
