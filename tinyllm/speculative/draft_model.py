"""A draft model proposer: a smaller model sharing the tokenizer drafts greedily through its own KV cache.
`self_draft` makes one from the target's first layers and its head, so any model can speculate alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from ..cache.kv_cache import KVCache
from ..errors import TinyLLMError
from ..model.llama import LlamaForCausalLM


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
    draft.family, draft.rotary, draft.rotary_local = target.family, target.rotary, target.rotary_local
    draft.lm_head = target.lm_head
    return draft.eval()


class DraftModelProposer:
    """Keeps the draft's cache in step with the sequence: it feeds whatever it has not seen, then drafts
    k tokens greedily (deterministic drafts, so verification reproduces plain sampling exactly)."""

    def __init__(self, model, max_len: int | None = None):
        c = model.config
        self.model = model
        self.max_len = max_len or c.max_position_embeddings
        device = next(model.parameters()).device
        self.cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, self.max_len, device=device)
        self.seen: list[int] = []  # the tokens whose KV the draft cache holds, in order

    def rollback(self, num_tokens: int) -> None:
        num_tokens = min(num_tokens, len(self.seen))
        self.cache.truncate(num_tokens)
        del self.seen[num_tokens:]

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], k: int) -> list[int]:
        ids = list(ids)
        common = next((i for i, (a, b) in enumerate(zip(self.seen, ids)) if a != b), min(len(self.seen), len(ids)))
        self.rollback(min(common, len(ids) - 1))  # the last token is always fed, to get logits
        k = min(k, self.max_len - len(ids))
        if k <= 0:
            return []
        device = self.cache.device
        feed = ids[len(self.seen) :]
        logits = self.model(torch.tensor([feed], device=device), cache=self.cache, last_only=True)[0, -1]
        self.seen += feed
        drafts = []
        for i in range(k):
            drafts.append(int(logits.argmax()))
            if i + 1 < k:
                logits = self.model(torch.tensor([[drafts[-1]]], device=device), cache=self.cache)[0, -1]
                self.seen.append(drafts[-1])
        return drafts
