"""Tiny models built in the tests: a random Llama and a scripted model whose greedy output we choose."""

from __future__ import annotations

import torch
from torch import nn

from tinyllm.config import ModelConfig
from tinyllm.model.llama import LlamaForCausalLM
from tinyllm.model.plan import ModelPlan
from tinyllm.model.step import CacheStep, CausalStep


def tiny_config(**overrides) -> ModelConfig:
    values = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    values.update(overrides)
    return ModelConfig(**values)


def tiny_llama(seed: int = 0, *, plan: ModelPlan | None = None, **overrides) -> LlamaForCausalLM:
    """Random weights with a spread large enough that a wrong position or mask changes the logits. plan: the
    model's, where not its config's."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(**overrides), plan)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3 if "embed" in name else 0.15)
            else:
                p.uniform_(0.8, 1.2)
    return model.eval()


class ScriptedModel(nn.Module):
    """Greedy output follows `script`: after n tokens in the sequence, the argmax is script[n - len(prompt)].
    It honours the step contract: positions from the step, one dummy attend per token, its logit_rows."""

    def __init__(self, script: list[int], prompt_len: int, vocab_size: int = 300, max_len: int = 256):
        super().__init__()
        self.script, self.prompt_len = list(script), prompt_len
        self.config = ModelConfig(
            vocab_size=vocab_size,
            hidden_size=8,
            intermediate_size=8,
            num_layers=1,
            num_heads=1,
            num_kv_heads=1,
            head_dim=8,
            max_position_embeddings=max_len,
        )
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, ids, step=None):
        B, T = ids.shape
        step = CausalStep(T) if step is None else step
        start = int(step.positions[0])
        z = torch.zeros(B, 1, T, 8)
        step.attend(0, z, z, z)
        logits = torch.zeros(B, T, self.config.vocab_size)
        for t in range(T):
            n = start + t + 1 - self.prompt_len
            if 0 <= n < len(self.script):
                logits[:, t, self.script[n]] = 10.0
        return logits if step.logit_rows is None else logits[:, step.logit_rows]


def forward_cached(model, ids: torch.Tensor, cache, logit_rows=None) -> torch.Tensor:
    """model's logits [B, T, V] for ids [B, T] appended to a contiguous cache."""
    return model(ids, CacheStep(cache, ids.shape[1], logit_rows))


def quantized_copy(model: LlamaForCausalLM, mode: str = "int8") -> LlamaForCausalLM:
    """The same model with its matrices quantized as `--quantize` does at load ("int8": Q8_0, "int4": Q4_1)
    and kept as blocks."""
    from tinyllm.loading.loader import build_model
    from tinyllm.loading.quantize import quantize_state

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return build_model(model.config, quantize_state(state, mode, "<test>"), "cpu", "<test>", plan=model.plan)
