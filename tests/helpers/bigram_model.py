"""A Llama whose answer is a text we choose, as real weights: a bigram model (each token's successor is fixed),
so the engine, its native step and the server run it as any model, at any temperature (the margin is huge).

Its layers add nothing (zero output projections), so the last position's state is its token's embedding, a
one-hot slot; the head maps each slot to the logit of that token's successor. Tokens without a slot of their
own share slot 0, whose successor is the end of the answer.
"""

from __future__ import annotations

import torch

from helpers.tiny_models import tiny_config
from tinyllm.model.llama import LlamaForCausalLM

MARGIN = 10.0  # times sqrt(hidden) after the norm: the successor's logit, every other logit 0


def bigram_llama(successors: dict[int, int], vocab_size: int, end_id: int, hidden_size: int = 64, **overrides):
    """A model whose greedy next token after token a is successors[a] (end_id after any other token)."""
    slots = {token: i + 1 for i, token in enumerate(successors)}
    if len(slots) + 1 > hidden_size:
        raise ValueError(f"{len(slots)} tokens need a hidden size above {len(slots)}, got {hidden_size}")
    shape = dict(hidden_size=hidden_size, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=16)
    model = LlamaForCausalLM(tiny_config(vocab_size=vocab_size, **{**shape, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.ones_like(p) if p.dim() == 1 else torch.zeros_like(p))  # norms 1, matrices 0
        embed = model.model.embed_tokens.weight
        embed[:, 0] = 1.0
        for token, slot in slots.items():
            embed[token, 0], embed[token, slot] = 0.0, 1.0
        head = model.lm_head.weight
        head[end_id, 0] = MARGIN
        for token, slot in slots.items():
            head[successors[token], slot] = MARGIN
    return model.eval()


def _pieces(tokenizer) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.decode([i])
        if piece and "\ufffd" not in piece and not piece.startswith("<|"):
            out.setdefault(piece, []).append(i)
    return out


def token_path(tokenizer, text: str, after: int, end_id: int, cycle: bool = False) -> dict[int, int]:
    """Successors that spell `text` after token `after` (then end_id, or `text` again when cycle): the first
    way of cutting text into tokens in which no token needs two different successors."""
    pieces = _pieces(tokenizer)
    longest = max(map(len, pieces))

    def search(at: int, prev: int, succ: dict[int, int], first: int | None) -> dict[int, int] | None:
        if at == len(text):
            last = first if cycle else end_id  # a cycle's last token leads back to its first
            return {**succ, prev: last} if succ.get(prev, last) == last else None
        for size in range(min(longest, len(text) - at), 0, -1):
            for token in pieces.get(text[at : at + size], ()):
                if succ.get(prev, token) == token:
                    found = search(at + size, token, {**succ, prev: token}, token if first is None else first)
                    if found is not None:
                        return found
        return None

    found = search(0, after, {}, None)
    if found is None:
        raise ValueError(f"no cut of {text!r} into tokens gives each token one successor")
    return found


def scripted_llama(tokenizer, text: str, *, after: int, cycle: bool = False, **overrides) -> LlamaForCausalLM:
    """A model over `tokenizer`'s vocabulary that answers `text` to any prompt ending in token `after`."""
    end_id = tokenizer.stop_ids[-1]
    successors = token_path(tokenizer, text, after, end_id, cycle)
    return bigram_llama(successors, tokenizer.vocab_size, end_id, **overrides)
