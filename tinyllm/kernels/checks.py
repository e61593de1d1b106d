"""Load-time validation of a block table: a NaN or infinite scale would silently turn into garbage logits."""
from __future__ import annotations

import torch

from .qweight import QuantWeight
from .reference import scale_fields


def check_blocks(w: QuantWeight) -> None:
    """Raise ValueError naming the first block whose fp16 scale or min is NaN or infinite."""
    fields = scale_fields(w)  # [NB, F]
    bad = ~torch.isfinite(fields).all(dim=1)  # [NB]
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        per_row = w.num_blocks_per_row
        raise ValueError(f"corrupt {w.fmt} weight of shape {w.shape}: block {first % per_row} of row "
                         f"{first // per_row} has a NaN or infinite scale ({int(bad.sum())} bad blocks in all)")
