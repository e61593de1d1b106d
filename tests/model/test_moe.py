"""The mixture-of-experts MLP (model/moe.py) and its plan: the router's tie rule and renormalisation, a token's
output independent of its batch, transformers' Qwen3-MoE with and without renormalisation and with dense layers
among the experts', and what the native step takes (its parity tests: test_native_lowering.py). The family's
engine equivalences (cached, paged, batched, speculative, GGUF) run in test_families.py with every family."""

import pytest
import torch

from helpers.family_models import hf_model, write_family_gguf, write_hf
from helpers.tiny_models import quantized_copy, tiny_llama
from tinyllm import LLM
from tinyllm.config import ExpertConfig
from tinyllm.kernels import native
from tinyllm.model.moe import MoEMLP, route
from tinyllm.model.native.lowering import unsupported
from tinyllm.model.plan import MoEPlan

PROMPT = [5, 77, 140, 9, 33, 201, 18, 64, 250, 7, 99, 120, 41]
EXPERTS = ExpertConfig(num_experts=4, top_k=2, intermediate_size=32, renormalize=True)


def tiny_moe(**overrides):
    values = dict(family="qwen3_moe", num_layers=2, experts=EXPERTS)
    return tiny_llama(0, **{**values, **overrides})


def test_equal_router_logits_choose_the_lower_expert_index():
    logits = torch.tensor(
        [
            [1.0, 3.0, 3.0, 3.0],  # three equal best: experts 1 and 2
            [0.0, 0.0, 0.0, 0.0],  # all equal: experts 0 and 1
            [2.0, 0.0, 2.0, 5.0],  # best 3, then 0 and 2 tie: 0
        ]
    )
    weights, experts = route(logits, MoEPlan(num_experts=4, top_k=2))
    assert experts.tolist() == [[1, 2], [0, 1], [0, 3]]
    probs = torch.softmax(logits, dim=-1)
    assert torch.equal(weights, probs.gather(-1, experts))  # not renormalised: the probabilities themselves


def test_renormalised_weights_sum_to_one_in_expert_order():
    logits = torch.tensor([[0.5, 4.0, -1.0, 2.0]])
    weights, experts = route(logits, MoEPlan(num_experts=4, top_k=2, renormalize=True))
    assert experts.tolist() == [[1, 3]]
    e1, e3 = torch.exp(torch.tensor(4.0)), torch.exp(torch.tensor(2.0))
    assert weights[0].tolist() == pytest.approx([(e1 / (e1 + e3)).item(), (e3 / (e1 + e3)).item()], rel=1e-6)


def test_the_layer_sums_each_tokens_chosen_experts_by_their_weights():
    torch.manual_seed(0)
    plan = MoEPlan(num_experts=4, top_k=2, renormalize=True)
    layer = MoEMLP(16, 8, plan).eval()
    x = torch.randn(2, 5, 16)  # [B, T, C]
    with torch.no_grad():
        weights, experts = route(layer.gate(x.reshape(-1, 16)), plan)
        want = torch.stack(
            [
                sum(w * layer.experts[e](row) for w, e in zip(ws, es.tolist()))
                for row, ws, es in zip(x.reshape(-1, 16), weights, experts)
            ]
        )
        assert torch.allclose(layer(x), want.view(2, 5, 16), rtol=0, atol=1e-6)


def test_a_tokens_output_is_the_same_bits_alone_and_batched():
    """With experts kept as blocks (their matmuls give a row the same bits at any number of rows), a token's
    output does not depend on which tokens share its experts' matmuls."""
    layer = quantized_copy(tiny_moe()).model.layers[0].mlp
    x = torch.randn(1, 11, 64, generator=torch.Generator().manual_seed(1))  # [B, T, C]
    with torch.no_grad():
        batched = layer(x)
        alone = torch.cat([layer(x[:, t : t + 1]) for t in range(x.shape[1])], dim=1)
    assert torch.equal(batched, alone)


@pytest.mark.parametrize(
    "overrides, dense",
    [
        (dict(norm_topk_prob=False), ()),  # the chosen probabilities as they are
        (dict(mlp_only_layers=[1]), (1,)),
        (dict(decoder_sparse_step=2), (0, 2)),  # experts on every second layer: layer 1
    ],
)
def test_transformers_qwen3_moe_variants_give_the_same_logits(tmp_path, overrides, dense):
    ref = hf_model("qwen3_moe", **overrides)
    llm = LLM(write_hf(ref, str(tmp_path / "moe")))
    assert llm.config.experts.dense_layers == dense
    assert [p.moe is None for p in llm.model.plan.layers] == [i in dense for i in range(3)]
    assert llm.config.experts.renormalize == overrides.get("norm_topk_prob", True)
    with torch.no_grad():
        want = ref(torch.tensor([PROMPT])).logits[0]  # [T, V]
        ours = llm.model(torch.tensor([PROMPT]))[0]
    assert (ours - want).abs().max().item() <= 1e-4
    assert torch.equal(ours.argmax(-1), want.argmax(-1))


def test_a_gguf_layer_without_a_router_keeps_its_dense_mlp(tmp_path, monkeypatch):
    """llama.cpp's converter writes experts on every qwen3moe layer; a file whose layer 1 holds a dense MLP's
    tensors and no router (written here with gguf's writer, its table widened) loads as the folder does."""
    import gguf

    arch, dense = gguf.MODEL_ARCH.QWEN3MOE, ("FFN_GATE", "FFN_UP", "FFN_DOWN")
    monkeypatch.setitem(gguf.MODEL_TENSORS, arch, [*gguf.MODEL_TENSORS[arch], *(gguf.MODEL_TENSOR[t] for t in dense)])
    ref = hf_model("qwen3_moe", mlp_only_layers=[1])
    folder = LLM(write_hf(ref, str(tmp_path / "moe")))
    from_gguf = LLM(write_family_gguf(ref, "qwen3_moe", str(tmp_path / "moe.gguf")), weights="dequantized")
    assert from_gguf.config.experts == folder.config.experts and from_gguf.config.experts.dense_layers == (1,)
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        assert (from_gguf.model(ids) - folder.model(ids)).abs().max().item() <= 1e-5


@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
def test_the_native_step_takes_quantized_experts_and_says_why_not_others():
    model = quantized_copy(tiny_moe())
    assert unsupported(model) is None and unsupported(quantized_copy(tiny_moe(experts=None))) is None
    model.model.layers[1].mlp.experts[2].down_proj = torch.nn.Linear(32, 64, bias=False)
    assert unsupported(model) == "its experts' projections are not quantized weights"
    model.model.layers[0].mlp.gate = torch.nn.Linear(64, 4, bias=True)
    assert unsupported(model) == "its router is neither a quantized weight nor float32 without a bias"


def test_the_plan_follows_the_config():
    model = tiny_moe(num_layers=3, experts=ExpertConfig(8, 3, 16, dense_layers=(1,)))
    assert [p.moe for p in model.plan.layers] == [MoEPlan(8, 3), None, MoEPlan(8, 3)]
    assert isinstance(model.model.layers[0].mlp, MoEMLP) and len(model.model.layers[0].mlp.experts) == 8
    assert model.model.layers[0].mlp.experts[0].intermediate_size == 16
    assert model.model.layers[1].mlp.intermediate_size == model.config.intermediate_size


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(num_experts=4, top_k=5, intermediate_size=8), "top_k must be at most num_experts=4, got 5"),
        (dict(num_experts=0, top_k=1, intermediate_size=8), "num_experts must be a positive integer, got 0"),
        (dict(num_experts=4, top_k=2, intermediate_size=None), "intermediate_size must be a positive integer"),
    ],
)
def test_bad_expert_configs_are_refused_naming_the_value(values, message):
    with pytest.raises(ValueError, match=message):
        ExpertConfig(**values)


def test_a_dense_family_with_experts_is_refused():
    with pytest.raises(ValueError, match="the qwen3 family has no experts, but the config gives 4"):
        tiny_moe(family="qwen3")


def test_info_counts_the_parameters_a_token_reads(tmp_path):
    ref = hf_model("qwen3_moe", mlp_only_layers=[1])
    info = LLM(write_hf(ref, str(tmp_path / "moe"))).info()
    total = sum(p.numel() for p in ref.parameters())
    experts = sum(p.numel() for p in ref.model.layers[0].mlp.experts.parameters())  # 4 experts' gate, up, down
    assert info["parameters"] == total
    assert info["active_parameters"] == total - 2 * experts * (4 - 2) // 4  # layers 0 and 2 skip 2 of 4 each
    assert "mixture of experts: top 2 of 4 (softmax router, renormalised) on 2 of 3 layers" in info["features"]


@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
def test_a_gguf_file_s_experts_run_natively_as_on_the_module_path(tmp_path):
    """A Q8_0 qwen3moe file: each expert's gate and up are views into the file's stacks (no copy), and the
    engine's native steps give the module path's tokens and log-probabilities."""
    from tinyllm import SamplingParams
    from tinyllm.engine.engine import Engine

    llm = LLM(write_family_gguf(hf_model("qwen3_moe"), "qwen3_moe", str(tmp_path / "q8.gguf"), quant="Q8_0"))
    assert unsupported(llm.model) is None
    experts = llm.model.model.layers[0].mlp.experts
    gates = [e.gate_up_proj.parts[0].data for e in experts]  # [Ie, row bytes] each
    assert all(b.data_ptr() - a.data_ptr() == a.nbytes for a, b in zip(gates, gates[1:]))  # one stack, in place
    params = [SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=2)] * 3
    prompts = [PROMPT, PROMPT[3:9], [40, 41, 42]]
    outs = []
    for native_step in (True, False):
        engine = Engine(llm.parts, block_size=8, num_blocks=64, max_num_seqs=3)
        assert engine.runner.fused is not None
        engine.runner.fused = engine.runner.fused if native_step else None
        ids = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
        while engine.has_unfinished():
            engine.step()
        outs.append([engine.generation(i) for i in ids])
    for ours, ref in zip(*outs):
        assert ours.ids == ref.ids
        table = [[v for t in g.logprobs for v in (t.logprob, *(lp for _, lp in t.top))] for g in (ours, ref)]
        assert table[0] == pytest.approx(table[1], abs=1e-4)
