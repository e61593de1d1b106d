"""A mixture-of-experts MLP (the plan's MoEPlan): a router scores every expert per token, the token runs through
its top k experts (each a gated MLP, mlp.py) and gets their outputs weighted by the router's probabilities.

The rows of a batch or a prompt are grouped by expert: each chosen expert multiplies the rows routed to it in one
matmul, so its weights are read once per forward. A token's output depends on the token alone: its experts are
chosen with a fixed tie rule (the lower index wins) and its k weighted outputs are summed in expert-index order,
whatever rows share the forward. The router and the experts carry biases where the plan says (gpt-oss).
Parameter names follow Qwen3-MoE's Hugging Face checkpoints: `gate` is the router, `experts.{e}` the experts
(gate_up_proj fused as in the dense MLP); gpt-oss's stacked experts are split into these at load.
"""

from __future__ import annotations

import torch
from torch import nn

from .mlp import GatedMLP
from .plan import MoEPlan


def route(logits: torch.Tensor, plan: MoEPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [N, E] -> (weights [N, k] float32, experts [N, k]), each row's experts in ascending index.

    "softmax": a softmax over all experts in float32, the k most probable kept, renormalised over the chosen
    where the plan says so, in rank order as the reference sums them; "softmax_topk": the k largest logits
    kept, then a softmax over them alone. Either way a stable sort ranks them: among equal scores the lower
    index comes first (torch.topk promises no order for ties)."""
    chosen_only = plan.router == "softmax_topk"
    scores = logits.float() if chosen_only else torch.softmax(logits.float(), dim=-1)  # [N, E]
    ranked = torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, : plan.top_k]  # [N, k]
    weights = scores.gather(-1, ranked)  # [N, k], largest first
    if chosen_only:
        weights = torch.softmax(weights, dim=-1)
    if plan.renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    experts, order = ranked.sort(dim=-1)  # [N, k] ascending expert index
    return weights.gather(-1, order), experts


class MoEMLP(nn.Module):
    def __init__(self, hidden_size: int, expert_size: int, plan: MoEPlan, activation: str = "silu", **act_options):
        """act_options: the clamped SwiGLU's limit and alpha (mlp.GatedMLP)."""
        super().__init__()
        self.plan = plan
        self.gate = nn.Linear(hidden_size, plan.num_experts, bias=plan.router_bias)  # the router
        self.experts = nn.ModuleList(
            GatedMLP(hidden_size, expert_size, activation, bias=plan.expert_bias, **act_options)
            for _ in range(plan.num_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., C] -> [..., C]."""
        flat = x.reshape(-1, x.shape[-1])  # [N, C]
        weights, chosen = route(self.gate(flat), self.plan)  # [N, k] each
        weights = weights.to(x.dtype)
        parts = flat.new_zeros(*chosen.shape, flat.shape[-1])  # [N, k, C]: each token's weighted expert outputs
        k = chosen.shape[1]
        picks = torch.argsort(chosen.reshape(-1), stable=True)  # [N·k] (token, slot) pairs grouped by expert
        counts = torch.bincount(chosen.reshape(-1), minlength=self.plan.num_experts).tolist()  # [E]
        for e, group in enumerate(picks.split(counts)):
            if not counts[e]:
                continue
            rows, slots = group // k, group % k  # [n_e] each: a token takes an expert once
            out = self.experts[e](flat.index_select(0, rows))  # [n_e, C]
            parts[rows, slots] = out * weights[rows, slots, None]
        total = parts[:, 0]  # [N, C]
        for slot in range(1, chosen.shape[1]):  # in expert-index order, for every token alike
            total = total + parts[:, slot]
        return total.view(x.shape)
