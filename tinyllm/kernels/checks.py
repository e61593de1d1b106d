"""Load-time validation of a block table: a NaN or infinite scale would silently turn into garbage logits."""

from __future__ import annotations

import torch

from .formats import FORMATS
from .qweight import QuantWeight
from .reference import SCALE_OFFSETS

# An fp16 is NaN or infinite when its five exponent bits are all ones: bits 2..6 of its high (second) byte.
EXPONENT_BITS = 0x7C


def non_finite_blocks(w: QuantWeight) -> torch.Tensor:
    """bool [num_blocks]: whether any fp16 scale/min field of the block is NaN or infinite (read in place)."""
    b = w.data.reshape(-1, FORMATS[w.fmt].type_size)  # [NB, ts]
    bad = torch.zeros(b.shape[0], dtype=torch.bool)  # [NB]
    for off in SCALE_OFFSETS[w.fmt]:
        bad |= (b[:, off + 1] & EXPONENT_BITS) == EXPONENT_BITS
    return bad


def check_blocks(w: QuantWeight) -> None:
    """Raise ValueError naming the first block whose fp16 scale or min is NaN or infinite."""
    bad = non_finite_blocks(w)  # [NB]
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        per_row = w.num_blocks_per_row
        raise ValueError(
            f"corrupt {w.fmt} weight of shape {w.shape}: block {first % per_row} of row "
            f"{first // per_row} has a NaN or infinite scale ({int(bad.sum())} bad blocks in all)"
        )
