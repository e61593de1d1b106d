"""The mixture-of-experts MLP (model/moe.py) and its plan: the router's tie rule and renormalisation, a token's
output independent of its batch, transformers' Qwen3-MoE with and without renormalisation and with dense layers
among the experts', gpt-oss's router (softmax over the chosen logits) and clamped SwiGLU, what the native step
takes (its parity tests: test_native_lowering.py) and what it declines (gpt-oss's sinks, an output bias, the clamped
SwiGLU, YaRN's attention factor). The family's
engine equivalences (cached, paged, batched, speculative, GGUF) run in test_families.py with every family."""

import pytest
import torch

from helpers.family_models import hf_model, write_family_gguf, write_hf
from helpers.tiny_models import quantized_copy, tiny_llama
from tinyllm import LLM
from tinyllm.config import ExpertConfig, RopeScaling
from tinyllm.kernels import native
from tinyllm.model.mlp import clamped_swiglu
from tinyllm.model.moe import MoEMLP, route
from tinyllm.model.native.lowering import unsupported
from tinyllm.model.plan import LayerPlan, MoEPlan, model_plan

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


def test_the_chosen_only_router_takes_the_softmax_of_the_top_logits_alone():
    logits = torch.tensor([[0.5, 4.0, -1.0, 2.0]])
    weights, experts = route(logits, MoEPlan(num_experts=4, top_k=2, router="softmax_topk"))
    assert experts.tolist() == [[1, 3]]
    e1, e3 = torch.exp(torch.tensor(4.0)), torch.exp(torch.tensor(2.0))
    assert weights[0].tolist() == pytest.approx([(e1 / (e1 + e3)).item(), (e3 / (e1 + e3)).item()], rel=1e-6)
    over_all = torch.softmax(logits, dim=-1)[0, [1, 3]]  # what the other router would give
    assert not torch.allclose(weights[0], over_all)


def test_the_chosen_only_router_breaks_ties_to_the_lower_index():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 2.0, 5.0]])
    weights, experts = route(logits, MoEPlan(num_experts=4, top_k=2, router="softmax_topk"))
    assert experts.tolist() == [[1, 2], [0, 1], [0, 3]]
    assert weights[:2].tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_the_clamped_swiglu_clamps_gate_above_and_up_on_both_sides():
    gate = torch.tensor([7.0, 9.0, -3.0, -9.0, -7.0])
    up = torch.tensor([7.0, 9.0, -9.0, 0.0, 0.0])
    out = clamped_swiglu(gate, up, limit=7.0, alpha=1.702)
    assert out[1] == out[0] == 7.0 * torch.sigmoid(torch.tensor(7.0 * 1.702)) * 8.0  # gate and up at the limit
    assert out[2] == -3.0 * torch.sigmoid(torch.tensor(-3.0 * 1.702)) * (1 - 7.0)  # up clamped below, plus one
    assert out[3] != out[4]  # gate is not clamped below
    assert out[3] == -9.0 * torch.sigmoid(torch.tensor(-9.0 * 1.702))


def test_transformers_gpt_oss_with_its_own_swiglu_limit_gives_the_same_logits(tmp_path):
    """A clamp that bites (0.5) and another gain: both read from config.json."""
    ref = hf_model("gpt_oss", swiglu_limit=0.5, swiglu_alpha=1.2)
    llm = LLM(write_hf(ref, str(tmp_path / "gpt-oss")))
    plan = llm.model.plan.layers[0]
    assert (plan.activation, plan.activation_limit, plan.activation_alpha) == ("clamped_swiglu", 0.5, 1.2)
    assert (plan.moe.router, plan.moe.router_bias, plan.moe.expert_bias) == ("softmax_topk", True, True)
    assert [p.window for p in llm.model.plan.layers] == [4, None] and plan.sinks and plan.o_bias
    with torch.no_grad():
        want = ref(torch.tensor([PROMPT])).logits[0]  # [T, V]
        ours = llm.model(torch.tensor([PROMPT]))[0]
    assert (ours - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(activation="clamped_swiglu"), "activation_limit must be given for clamped_swiglu alone, got None"),
        (dict(activation_limit=7.0), "activation_limit must be given for clamped_swiglu alone, got 7.0 for silu"),
    ],
)
def test_a_clamped_swiglu_plan_needs_its_limit_and_no_other_does(values, message):
    with pytest.raises(ValueError, match=message):
        LayerPlan(**values)


def test_a_gguf_in_mxfp4_runs_on_its_blocks(tmp_path):
    """MXFP4 (gpt-oss's experts as published; here every matrix) kept as blocks equals the same file dequantized."""
    ref = hf_model("gpt_oss")
    path = write_family_gguf(ref, "gpt_oss", str(tmp_path / "mxfp4.gguf"), quant="MXFP4")
    blocks, dequantized = LLM(path, weights="native"), LLM(path, weights="dequantized")
    assert blocks.info()["weight_types"].get("MXFP4", 0) > 0
    with torch.no_grad():
        ours = blocks.model(torch.tensor([PROMPT]))[0]
        want = dequantized.model(torch.tensor([PROMPT]))[0]
    assert (ours - want).abs().max().item() <= 1e-4


@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
def test_the_native_step_declines_sinks_output_biases_and_yarns_attention_factor():
    plain = model_plan(tiny_llama(0).config)
    for edit, reason in (
        (dict(sinks=True), "attention sinks are not covered"),
        (dict(o_bias=True), "a bias on the attention's output is not covered"),
        (dict(activation="clamped_swiglu", activation_limit=7.0, activation_alpha=1.7), "clamped_swiglu is not"),
    ):
        layers = tuple(LayerPlan(**{**p.__dict__, **edit}) for p in plain.layers)
        assert reason in unsupported(quantized_copy(tiny_llama(0, plan=type(plain)(layers))))
    yarn = RopeScaling("yarn", 4.0, original_max_position_embeddings=64)
    assert unsupported(quantized_copy(tiny_llama(0, rope_scaling=yarn))) == (
        "YaRN's attention factor on the rotary tables is not covered"
    )
    assert unsupported(quantized_copy(tiny_llama(0, rope_scaling=RopeScaling("linear", 4.0)))) is None


def test_info_counts_a_gpt_oss_experts_biases_among_the_idle_parameters(tmp_path):
    ref = hf_model("gpt_oss")
    info = LLM(write_hf(ref, str(tmp_path / "gpt-oss"))).info()
    total = sum(p.numel() for p in ref.parameters())
    experts = sum(p.numel() for p in ref.model.layers[0].mlp.experts.parameters())  # 4 experts, biases included
    assert info["parameters"] == total
    assert info["active_parameters"] == total - 2 * experts * (4 - 2) // 4  # both layers skip 2 of 4
    for feature in ("attention sinks", "clamped SwiGLU (limit 7)", "rope scaling yarn x8"):
        assert feature in info["features"]
    assert "mixture of experts: top 2 of 4 (softmax_topk router, biases)" in info["features"]


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
