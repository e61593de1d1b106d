"""HF tensors whose names or layouts differ from ours, by the family's table (Family.hf_tensors): a row maps an
HF name ("{i}": the layer) to ours, through a layout that says how the HF tensor holds ours. A target holding
"{e}" takes one tensor per expert from a stack [E, ...] (gpt-oss keeps each layer's experts so).

Layouts (a stack's per-expert slice, or the whole tensor):
    whole        the tensor as it is (a rename)
    out          [N] or [N, K] as ours
    in_out       [K, N], transposed to our [N, K]
    in_out_even  [K, 2N] whose even columns are ours (gate and up alternate), transposed to [N, K]
    in_out_odd   the odd columns
    even, odd    [2N] vectors' even or odd entries (the biases of alternating gate and up)
"""

from __future__ import annotations

import re

import torch

from ..model.family import Family

LAYOUTS = {
    "whole": lambda t: t,
    "out": lambda t: t,
    "in_out": lambda t: t.transpose(-1, -2),
    "in_out_even": lambda t: t[..., ::2].transpose(-1, -2),
    "in_out_odd": lambda t: t[..., 1::2].transpose(-1, -2),
    "even": lambda t: t[..., ::2],
    "odd": lambda t: t[..., 1::2],
}


def _rows(family: Family) -> dict[str, list[tuple[str, str]]]:
    """HF name pattern (a regex over the layer index) -> [(our name, layout)]."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for hf, ours, layout in family.hf_tensors:
        rows.setdefault(re.escape(hf).replace(r"\{i\}", r"(\d+)"), []).append((ours, layout))
    return rows


def our_tensors(state: dict[str, torch.Tensor], family: Family) -> dict[str, torch.Tensor]:
    """HF names -> ours for the family's rows (each expert's tensor contiguous, so it owns its memory's layout);
    every other tensor passes as it is."""
    rows = _rows(family)
    if not rows:
        return state
    out = {}
    for name, t in state.items():
        match = next(((m, targets) for p, targets in rows.items() if (m := re.fullmatch(p, name))), None)
        if match is None:
            out[name] = t
            continue
        m, targets = match
        for ours, layout in targets:
            target, value = ours.format(i=m.group(1), e="{e}"), LAYOUTS[layout](t)
            if "{e}" not in target:
                out[target] = value
                continue
            out.update((target.format(e=e), w.contiguous()) for e, w in enumerate(value.unbind(0)))
    return out
