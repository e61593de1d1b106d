"""The default model against the reference implementation (HF transformers' LlamaForCausalLM, same GGUF)."""

import os

import pytest
import torch

pytestmark = pytest.mark.slow

PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):\n    "]


@pytest.fixture(scope="module")
def llm():
    from tinyllm import LLM

    return LLM(weights="dequantized")  # the reference path; native blocks are checked against it


@pytest.fixture(scope="module")
def reference(default_model_path):
    from transformers import LlamaForCausalLM

    folder, name = os.path.split(default_model_path)
    return LlamaForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


def compare(ours, ref, tol):
    diff = (ours - ref).abs().max().item()
    assert diff < tol, diff
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 1e-3
    assert torch.equal(ours.argmax(-1)[clear], ref.argmax(-1)[clear])


def test_logits_equal_reference_on_short_prompts(llm, reference):
    for text in PROMPTS + ["héllo wörld 🙂 — 東京 12345"]:
        ids = torch.tensor([llm.tokenizer.encode(text)])
        assert ids.shape[1] < 64
        with torch.no_grad():
            compare(llm.model(ids), reference(ids).logits, 1e-4)


def test_logits_equal_reference_on_a_long_prompt(llm, reference):
    text = " ".join(f"Sentence {i} tells of a river, a bridge and {i * 7} travellers." for i in range(30))
    ids = torch.tensor([llm.tokenizer.encode(text)[:400]])
    assert ids.shape[1] == 400
    with torch.no_grad():
        compare(llm.model(ids), reference(ids).logits, 5e-4)


def test_greedy_generate_equals_reference(llm, reference):
    eos = set(llm.eos_ids)
    for text in PROMPTS:
        ids = llm.tokenizer.encode(text)
        with torch.no_grad():
            out = reference.generate(
                torch.tensor([ids]), max_new_tokens=32, do_sample=False, eos_token_id=sorted(eos), pad_token_id=2
            )[0, len(ids) :].tolist()
        ref_ids = out[: next((i for i, t in enumerate(out) if t in eos), len(out))]
        g = llm.generate(text, max_tokens=32, temperature=0)
        assert g.ids == ref_ids
        assert g.finish_reason == ("stop" if len(ref_ids) < 32 else "length")
        assert g.text == llm.tokenizer.decode(g.ids)
