"""Weight-only quantization of float weights at load, into the GGUF block formats the kernels execute.

int8 -> Q8_0: groups of 32 along a row, one float16 scale each (amax / 127), symmetric. Error per weight
        <= scale / 2.
int4 -> Q4_1: groups of 32, a float16 scale and minimum each ((max - min) / 15, min): the minimum follows
        a group's asymmetric range, which the symmetric Q4_0 wastes a level on. Error <= scale / 2 plus the
        float16 rounding of the scale and minimum. Embeddings and the head stay Q8_0 under int4: their
        rounding reaches the logits directly.
Groups of 32 because the kernels' blocks are 32 wide and a group that small keeps one outlier from
coarsening many weights. Scales are rounded to float16 first and the weights quantized against the
rounded scale, so the stored block is the best it can be for the scale it stores.
"""

from __future__ import annotations

import torch

from ..errors import TinyLLMError
from ..kernels import QuantWeight, check_blocks

QUANTIZE_MODES = ("int8", "int4")
GROUP_SIZE = 32
# (mode -> format of linear weights, format of embeddings and the head)
MODE_FORMATS = {"int8": ("Q8_0", "Q8_0"), "int4": ("Q4_1", "Q8_0")}
EMBEDDING_NAMES = ("embed_tokens.weight", "lm_head.weight")


def _f16_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).view(torch.uint8)  # [n, 1] float16 -> [n, 2] bytes


def quantize_q8_0(w: torch.Tensor) -> QuantWeight:
    n, k = w.shape
    blocks = w.detach().float().reshape(-1, GROUP_SIZE)  # [n * k / 32, 32]
    d = (blocks.abs().amax(dim=1, keepdim=True) / 127).to(torch.float16)  # [nb, 1]
    inv = torch.where(d == 0, 0.0, 1.0 / d.float())
    q = torch.round(blocks * inv).clamp(-127, 127).to(torch.int8)  # [nb, 32]
    data = torch.cat((d.view(torch.uint8), q.view(torch.uint8)), dim=1)  # [nb, 34]
    return QuantWeight(data.reshape(n, -1), "Q8_0", (n, k))


def quantize_q4_1(w: torch.Tensor) -> QuantWeight:
    n, k = w.shape
    blocks = w.detach().float().reshape(-1, GROUP_SIZE)  # [nb, 32]
    lo, hi = blocks.amin(dim=1, keepdim=True), blocks.amax(dim=1, keepdim=True)  # [nb, 1]
    d, m = ((hi - lo) / 15).to(torch.float16), lo.to(torch.float16)
    inv = torch.where(d == 0, 0.0, 1.0 / d.float())
    q = torch.round((blocks - m.float()) * inv).clamp(0, 15).to(torch.uint8)  # [nb, 32]
    nibbles = q[:, :16] | (q[:, 16:] << 4)  # byte j: element j low, element j + 16 high
    data = torch.cat((d.view(torch.uint8), m.view(torch.uint8), nibbles), dim=1)  # [nb, 20]
    return QuantWeight(data.reshape(n, -1), "Q4_1", (n, k))


QUANTIZERS = {"Q8_0": quantize_q8_0, "Q4_1": quantize_q4_1}


def quantize_state(state: dict, mode: str, source: str) -> dict:
    """Every 2-D float weight whose rows split into groups of 32 becomes a QuantWeight (a tensor shared
    by two names, as a tied head is, is quantized once); others stay float."""
    linear_fmt, embedding_fmt = MODE_FORMATS[mode]
    done: dict[int, QuantWeight] = {}
    out = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] % GROUP_SIZE:
            out[name] = t
            continue
        if id(t) not in done:
            if not torch.isfinite(t).all():
                raise TinyLLMError(f"{source!r}: tensor {name} holds NaN or infinite values; cannot quantize it")
            fmt = embedding_fmt if name.endswith(EMBEDDING_NAMES) else linear_fmt
            done[id(t)] = QUANTIZERS[fmt](t)
            try:
                check_blocks(done[id(t)])  # a scale past float16's range
            except ValueError as exc:
                raise TinyLLMError(f"{source!r}: tensor {name} cannot be quantized to {fmt}: {exc}") from None
        out[name] = done[id(t)]
    return out
