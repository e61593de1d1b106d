"""A draft model proposer: a smaller model sharing the tokenizer drafts greedily through its own KV cache.
`self_draft` makes one from the target's first layers and its head, so any model can speculate alone."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from ..cache.kv_cache import KVCache
from ..cache.paged_cache import PagedStorage
from ..errors import TinyLLMError
from ..model.llama import LlamaForCausalLM
from ..model.native.lowering import MAX_TOKENS, build_stack, step_logits, unsupported
from ..model.native.step_structs import StepTokens
from ..model.step import LAST, CacheStep

BLOCK = 16  # slots per block of the native draft's storage (its slot p is position p)


def self_draft(target: LlamaForCausalLM, num_layers: int) -> LlamaForCausalLM:
    """A model made of the target's first num_layers layers, its final norm and head (weights shared)."""
    total = target.config.num_layers
    if not 1 <= num_layers < total:
        raise TinyLLMError(f"draft_layers must be in [1, {total - 1}] for a {total}-layer model, got {num_layers}")
    draft = LlamaForCausalLM.__new__(LlamaForCausalLM)
    nn.Module.__init__(draft)
    c = target.config
    draft.config = replace(c, num_layers=num_layers, layer_kinds=c.layer_kinds[:num_layers])
    draft.model = nn.Module()
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = nn.ModuleList(list(target.model.layers)[:num_layers])
    draft.model.norm = target.model.norm
    draft.plan = replace(target.plan, layers=target.plan.layers[:num_layers])
    draft.rotary, draft.rotary_local = target.rotary, target.rotary_local
    draft.lm_head = target.lm_head
    return draft.eval()


class NativeDraftCache:
    """The draft's keys and values for the native decode step (model/native/lowering.py): a paged storage whose
    slot p holds position p, fed up to MAX_TOKENS tokens per call, each reading the keys up to its own
    position. A draft token then costs one native call instead of a module forward."""

    def __init__(self, model, max_len: int):
        c = model.config
        blocks = -(-max_len // BLOCK)
        self.storage = PagedStorage(c.num_layers, c.num_kv_heads, c.head_dim, blocks, BLOCK)  # pages on first use
        self.stack = build_stack(model, self.storage)
        self.length = 0

    def feed(self, model, ids: list[int]) -> torch.Tensor:
        """Store the keys of ids after the first `length` positions -> the logits after the last [V]."""
        for start in range(0, len(ids), MAX_TOKENS):
            part = ids[start : start + MAX_TOKENS]
            n, stop = len(part), self.length + len(part)
            blocks = -(-stop // BLOCK)  # one row of blocks 0, 1, ...: slot p is position p
            tokens = StepTokens(
                array("q", part), array("q", range(self.length, stop)), array("q", [0] * n),
                array("q", range(blocks)), blocks, BLOCK, stop,
            )  # fmt: skip
            logits = step_logits(model, self.stack, tokens, array("q", [n - 1]))[0]
            self.length = stop
        return logits

    def truncate(self, length: int) -> None:
        self.length = length


class DraftModelProposer:
    """Keeps the draft's cache in step with the sequence: it feeds whatever it has not seen, then drafts
    k tokens greedily (deterministic drafts, so verification reproduces plain sampling exactly). A draft the
    native decode step covers runs through it; any other through its module path and a KV cache."""

    def __init__(self, model, max_len: int | None = None, native: bool = True):
        """native=False: the module path even for a draft the native step covers (its reference in tests)."""
        c = model.config
        self.model = model
        self.max_len = max_len or c.max_position_embeddings
        device = next(model.parameters(), torch.empty(0)).device
        native = NativeDraftCache(model, self.max_len) if native and unsupported(model) is None else None
        self.native = native if native is not None and native.stack is not None else None
        self.cache = (
            None if self.native else KVCache(c.num_layers, c.num_kv_heads, c.head_dim, self.max_len, device=device)
        )
        self.device = device
        self.seen: list[int] = []  # the tokens whose KV the draft cache holds, in order

    def rollback(self, num_tokens: int) -> None:
        num_tokens = min(num_tokens, len(self.seen))
        (self.native or self.cache).truncate(num_tokens)
        del self.seen[num_tokens:]

    def _feed(self, ids: list[int]) -> torch.Tensor:
        """The draft's logits after ids [V], its cache holding them."""
        if self.native is not None:
            return self.native.feed(self.model, ids)
        return self.model(torch.tensor([ids], device=self.device), CacheStep(self.cache, len(ids), LAST))[0, -1]

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], k: int) -> list[int]:
        ids = list(ids)
        common = next((i for i, (a, b) in enumerate(zip(self.seen, ids)) if a != b), min(len(self.seen), len(ids)))
        self.rollback(min(common, len(ids) - 1))  # the last token is always fed, to get logits
        k = min(k, self.max_len - len(ids))
        if k <= 0:
            return []
        feed = ids[len(self.seen) :]
        logits = self._feed(feed)
        self.seen += feed
        drafts = []
        for i in range(k):
            drafts.append(int(logits.argmax()))
            if i + 1 < k:
                logits = self._feed(drafts[-1:])
                self.seen.append(drafts[-1])
        return drafts
