"""HF tensors renamed and re-laid out by the family's table (loading/hf_tensors.py), one gpt-oss row at a time:
each expert's slice of a stack, transposed from [in, out], gate and up taken from alternating columns."""

import torch

from tinyllm.loading.hf_tensors import our_tensors
from tinyllm.model.family import FAMILIES

E, C, I = 3, 4, 2  # experts, hidden, expert width  # noqa: E741
P = "model.layers.7.mlp."


def gpt_oss_layer() -> dict[str, torch.Tensor]:
    """One layer's router and expert stacks as gpt-oss's checkpoints hold them, with distinct values."""
    shapes = {
        "router.weight": (E, C),
        "router.bias": (E,),
        "experts.gate_up_proj": (E, C, 2 * I),
        "experts.gate_up_proj_bias": (E, 2 * I),
        "experts.down_proj": (E, I, C),
        "experts.down_proj_bias": (E, C),
    }
    return {
        P + n: torch.arange(float(torch.Size(s).numel())).view(s) + 1000 * k for k, (n, s) in enumerate(shapes.items())
    }


def test_gpt_oss_rows_give_each_expert_its_gate_up_and_down():
    hf = gpt_oss_layer()
    ours = our_tensors({**hf, "model.norm.weight": torch.ones(C)}, FAMILIES["gpt_oss"])
    assert torch.equal(ours["model.norm.weight"], torch.ones(C))  # not in the table: as it is
    assert torch.equal(ours[P + "gate.weight"], hf[P + "router.weight"])
    assert torch.equal(ours[P + "gate.bias"], hf[P + "router.bias"])
    stack, bias = hf[P + "experts.gate_up_proj"], hf[P + "experts.gate_up_proj_bias"]
    for e in range(E):
        assert torch.equal(ours[P + f"experts.{e}.gate_proj.weight"], stack[e][:, [0, 2]].T)  # [I, C]
        assert torch.equal(ours[P + f"experts.{e}.up_proj.weight"], stack[e][:, [1, 3]].T)
        assert torch.equal(ours[P + f"experts.{e}.gate_proj.bias"], bias[e][[0, 2]])
        assert torch.equal(ours[P + f"experts.{e}.up_proj.bias"], bias[e][[1, 3]])
        assert torch.equal(ours[P + f"experts.{e}.down_proj.weight"], hf[P + "experts.down_proj"][e].T)  # [C, I]
        assert torch.equal(ours[P + f"experts.{e}.down_proj.bias"], hf[P + "experts.down_proj_bias"][e])
    assert len(ours) == 1 + 2 + 6 * E  # the stacks themselves are gone


def test_a_family_without_rows_passes_its_tensors_untouched():
    hf = gpt_oss_layer()
    assert our_tensors(hf, FAMILIES["qwen3_moe"]) is hf
