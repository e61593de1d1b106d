"""One vector per text from a decoder: its final hidden states, pooled.

Final hidden states are the last layer's output after the model's final norm, the input of the LM head (what
HF transformers calls `last_hidden_state`). Pooling "mean" averages a text's token states; "last" takes its
last token's state, the one that has attended to the whole text (embedding models trained from decoders read
that one). Normalizing scales each vector to unit L2 length, so a dot product is the cosine similarity.

Texts run as right-padded batches of one plain causal forward: a position never attends to the ones after
it, so padding changes no state of a text, and pooling reads only the text's own positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum

import torch
import torch.nn.functional as F

MAX_BATCH_TOKENS = 4096  # padded positions per forward: bounds the activations a batch holds at once


class Pooling(str, Enum):
    MEAN = "mean"
    LAST = "last"


def pool(states: torch.Tensor, lengths: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """states [B, T, C] of right-padded texts, lengths [B] -> [B, C]."""
    if pooling is Pooling.LAST:
        return states[torch.arange(states.shape[0]), lengths - 1]  # [B, C]
    keep = torch.arange(states.shape[1])[None, :] < lengths[:, None]  # [B, T]
    summed = (states * keep[..., None]).sum(dim=1)  # [B, C]
    return summed / lengths[:, None].to(states.dtype)  # [B, C]


def batches(lengths: Sequence[int], max_tokens: int) -> Iterator[list[int]]:
    """Indices of texts grouped shortest first, each group's padded size (count x longest) within
    max_tokens (a text longer than that goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    group: list[int] = []
    for i in order:
        if group and (len(group) + 1) * lengths[i] > max_tokens:
            yield group
            group = []
        group.append(i)
    if group:
        yield group


@torch.inference_mode()
def embed_ids(
    model,
    prompts: Sequence[Sequence[int]],
    pooling: Pooling = Pooling.MEAN,
    normalize: bool = True,
    max_batch_tokens: int = MAX_BATCH_TOKENS,
) -> torch.Tensor:
    """Token id lists (each non-empty) -> float32 [N, C], row i for prompts[i]."""
    out = torch.empty(len(prompts), model.config.hidden_size, dtype=torch.float32)
    for group in batches([len(p) for p in prompts], max_batch_tokens):
        lengths = torch.tensor([len(prompts[i]) for i in group])  # [B]
        ids = torch.zeros(len(group), int(lengths.max()), dtype=torch.long)  # [B, T], 0 pads
        for row, i in enumerate(group):
            ids[row, : len(prompts[i])] = torch.as_tensor(prompts[i], dtype=torch.long)
        states = model.model.norm(model.hidden_states(ids.to(model.device)))  # [B, T, C]
        out[group] = pool(states.float().cpu(), lengths, pooling)  # [B, C]
    return F.normalize(out, dim=-1) if normalize else out  # [N, C]
