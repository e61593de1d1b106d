"""GGUF files of a mixture of experts written by llama.cpp's own converter (convert_hf_to_gguf.py) from a tiny
transformers Qwen3-MoE folder: the 3-D expert stacks (`blk.N.ffn_{gate,up,down}_exps`), the router
(`ffn_gate_inp`) and the `qwen3moe.expert_*` keys load into the model the folder loads into: F32 to the same
logits, F16 and Q8_0 to the folder's weights within each format's rounding, Q8_0 experts kept as blocks equal
to the same file expanded to float. The same for a tiny gpt-oss folder (`gpt-oss`: stacks de-interleaved into gate
and up, expert and router biases, attention sinks, YaRN keys) at F32 and F16. Skips where the converter is absent
(.ci/run fetches it)."""

import pytest
import torch

from helpers.family_models import hf_model, write_hf
from helpers.llama_cpp_convert import convert, converter_dir
from tinyllm import LLM
from tinyllm.loading.gguf_file import open_gguf
from tinyllm.model.quant_linear import QuantLinear

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(converter_dir() is None, reason="llama.cpp's converter is absent (see .ci/run)"),
]
PROMPT = [5, 77, 140, 9, 33, 201, 18, 64, 250, 7, 99, 120, 41]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("converted")
    folder = write_hf(hf_model("qwen3_moe"), str(root / "moe"))
    options = {kind: ["--outtype", kind] for kind in ("f32", "f16", "q8_0")}
    outputs = {kind: str(root / f"moe-{kind}.gguf") for kind in options}
    convert(folder, {outputs[kind]: opts for kind, opts in options.items()})
    return folder, outputs, LLM(folder)


def logits(llm) -> torch.Tensor:
    with torch.no_grad():
        return llm.model(torch.tensor([PROMPT]))[0]  # [T, V]


def test_the_converters_f32_file_gives_the_folders_logits(files):
    folder, outputs, ref = files
    g = open_gguf(outputs["f32"])
    assert g.architecture == "qwen3moe"
    assert [int(d) for d in g.tensors["blk.0.ffn_gate_exps.weight"].shape] == [64, 32, 4]  # [C, I, E], ggml order
    llm = LLM(outputs["f32"], weights="dequantized")
    assert llm.config.experts == ref.config.experts  # renormalised: llama.cpp's rule for qwen3moe files
    assert (logits(llm) - logits(ref)).abs().max().item() <= 1e-5


def rounded_names(file_state: dict, folder_state: dict, rounded) -> set[str]:
    """The parameters the file holds rounded (checked against `rounded(folder weight) -> bound`); the others
    must be the folder's exactly."""
    names = set()
    for name, want in folder_state.items():
        got = file_state[name]
        if not torch.equal(got, want):
            assert ((got - want).abs() <= rounded(want)).all(), name
            names.add(name)
    return names


def test_the_f16_file_holds_the_folders_weights_rounded_to_half(files):
    folder, outputs, ref = files
    state = LLM(outputs["f16"], weights="dequantized").model.state_dict()
    exact_f16 = rounded_names(state, ref.model.state_dict(), lambda w: (w.half().float() - w).abs())
    assert "model.layers.2.mlp.experts.3.down_proj.weight" in exact_f16
    assert "model.layers.0.mlp.experts.1.gate_up_proj.weight" in exact_f16


def _q8_0_bound(w: torch.Tensor) -> torch.Tensor:
    """Q8_0's error per weight: half a step of its block's scale d = amax/127, plus d's rounding to float16
    times the largest code (127 · d · 2^-11)."""
    blocks = w.reshape(-1, 32)  # [nb, 32]
    d = blocks.abs().amax(dim=1, keepdim=True) / 127  # [nb, 1]
    return (d * (0.5 + 127 / 2048) * (1 + 1e-6)).expand_as(blocks).reshape(w.shape)


def test_the_q8_0_file_runs_its_experts_on_their_blocks(files):
    folder, outputs, ref = files
    native, expanded = LLM(outputs["q8_0"], weights="native"), LLM(outputs["q8_0"], weights="dequantized")
    expert = native.model.model.layers[1].mlp.experts[2]
    assert isinstance(expert.gate_up_proj, QuantLinear) and expert.gate_up_proj.parts[0].fmt == "Q8_0"
    rounded = rounded_names(expanded.model.state_dict(), ref.model.state_dict(), _q8_0_bound)
    assert "model.layers.1.mlp.experts.2.down_proj.weight" in rounded
    assert (logits(native) - logits(expanded)).abs().max().item() <= 1e-4


@pytest.fixture(scope="module")
def gpt_oss_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("converted-gpt-oss")
    folder = write_hf(hf_model("gpt_oss"), str(root / "gpt-oss"))
    outputs = {kind: str(root / f"gpt-oss-{kind}.gguf") for kind in ("f32", "f16")}
    convert(folder, {path: ["--outtype", kind] for kind, path in outputs.items()})
    return outputs, LLM(folder)


def test_the_converters_gpt_oss_f32_file_gives_the_folders_logits(gpt_oss_files):
    outputs, ref = gpt_oss_files
    g = open_gguf(outputs["f32"])
    assert g.architecture == "gpt-oss" and g.metadata["gpt-oss.rope.scaling.type"] == "yarn"
    assert [int(d) for d in g.tensors["blk.0.ffn_gate_exps.bias"].shape] == [32, 4]  # [I, E], ggml order
    llm = LLM(outputs["f32"], weights="dequantized")
    assert llm.config.rope_scaling == ref.config.rope_scaling  # YaRN, its ramp not truncated (the family's rule)
    assert llm.config.experts == ref.config.experts and llm.config.layer_kinds == ("sliding", "full")
    assert (logits(llm) - logits(ref)).abs().max().item() <= 1e-5


def test_the_gpt_oss_f16_file_holds_the_folders_weights_rounded_to_half(gpt_oss_files):
    outputs, ref = gpt_oss_files
    state = LLM(outputs["f16"], weights="dequantized").model.state_dict()
    exact_f16 = rounded_names(state, ref.model.state_dict(), lambda w: (w.half().float() - w).abs())
    assert "model.layers.1.mlp.experts.3.gate_up_proj.weight" in exact_f16
    assert "model.layers.0.mlp.experts.2.down_proj.weight" in exact_f16
    assert "model.layers.0.self_attn.sinks" not in exact_f16  # vectors stay float32
