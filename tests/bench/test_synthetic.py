"""Synthetic GGUF files with a model's shapes (bench/synthetic.py): the float16 file our loader reads back with
the shape it was given and the default model's tokenizer; `synthetic:SHAPE:FORMAT` names checked; the bench
kernels' shape table of a file."""

from __future__ import annotations

import pytest

from tinyllm.bench import synthetic
from tinyllm.bench.kernels import model_shapes

TINY = synthetic.Shape("qwen2", 2, 64, 4, 2, 128, 49152 + 40, 10000.0, qkv_bias=True, context=256)


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("synthetic") / "tiny-F16.gguf")
    synthetic.write_f16(TINY, path)
    return path


@pytest.mark.slow
def test_the_file_loads_with_its_shape_and_the_default_tokenizer(tiny_file):
    from tinyllm import LLM

    llm = LLM(tiny_file)
    c = llm.config
    assert (c.family, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads) == ("qwen2", 2, 64, 4, 2)
    assert (c.intermediate_size, c.vocab_size, c.rope_theta) == (128, TINY.vocab, 10000.0)
    assert llm.model.model.layers[0].self_attn.qkv_proj.bias is not None
    assert llm.tokenizer.decode(llm.tokenizer.encode("Hello world")) == "Hello world"
    out = llm.generate([1, 2, 3], max_tokens=3, temperature=0.0)
    assert len(out.ids) == 3 and out.finish_reason == "length"


@pytest.mark.slow
def test_kernels_take_the_file_s_matrices(tiny_file):
    assert model_shapes(tiny_file) == []  # float16 matrices: no block format to time


@pytest.mark.parametrize("tied", [True, False])
def test_kernels_count_each_block_matrix_once_a_token_and_a_tied_head_once_more(tmp_path, tied):
    from helpers.model_files import random_tiny_llama, write_gguf

    model = random_tiny_llama(tie_word_embeddings=tied)
    c = model.config
    path = str(tmp_path / "q8.gguf")
    write_gguf(model, path, quant_types={"weight": "Q8_0"})
    kv, q = c.num_kv_heads * c.head_dim, c.num_heads * c.head_dim
    expect = {}
    for n, k in [(q, c.hidden_size), (kv, c.hidden_size), (kv, c.hidden_size), (c.hidden_size, q)]:
        expect[("Q8_0", n, k)] = expect.get(("Q8_0", n, k), 0) + c.num_layers
    for n, k in [(c.intermediate_size, c.hidden_size)] * 2 + [(c.hidden_size, c.intermediate_size)]:
        expect[("Q8_0", n, k)] = expect.get(("Q8_0", n, k), 0) + c.num_layers
    head = ("Q8_0", c.vocab_size, c.hidden_size)  # the head's matrix: the embedding's when tied, else its own
    expect[head] = expect.get(head, 0) + 1
    assert {(f, n, k): u for f, n, k, u in model_shapes(path)} == expect


@pytest.mark.parametrize(
    "name", ["synthetic:llama-3.2-1b", "synthetic:llama-9b:Q4_K_M", "synthetic:llama-3.2-1b:Q3_K", "synthetic:"]
)
def test_a_bad_name_says_what_is_expected(name):
    with pytest.raises(ValueError, match="expected synthetic:SHAPE:FORMAT with SHAPE one of llama-3.2-1b"):
        synthetic.parse(name)


def test_names():
    assert synthetic.parse("synthetic:qwen2.5-0.5b:Q8_0") == ("qwen2.5-0.5b", "Q8_0")
    assert synthetic.is_synthetic("synthetic:llama-3.2-1b:Q4_0") and not synthetic.is_synthetic("model.gguf")
    assert not synthetic.is_synthetic(None)


@pytest.mark.slow
def test_a_mixture_of_experts_file_loads_with_its_experts_on_the_native_step(tmp_path):
    from tinyllm import LLM
    from tinyllm.bench.synthetic_moe import write_q8_0
    from tinyllm.bench.synthetic_vocab import vocabulary
    from tinyllm.model.native.lowering import unsupported

    shape = synthetic.Shape(
        "qwen3moe", 2, 64, 2, 1, 96, 49152, 1e6, context=256, head_dim=64, experts=4, top_k=2, expert_ffn=32
    )
    path = str(tmp_path / "moe-Q8_0.gguf")
    write_q8_0(shape, path, vocabulary(shape.vocab))
    llm = LLM(path)
    c = llm.config
    assert (c.family, c.num_layers, c.hidden_size, c.head_dim, c.num_kv_heads) == ("qwen3_moe", 2, 64, 64, 1)
    assert (c.experts.num_experts, c.experts.top_k, c.experts.intermediate_size) == (4, 2, 32)
    assert llm.info()["weight_types"] == {"Q8_0": 1 + 2 * 7, "F32": 2 * 5 + 1}  # expert stacks; norms, routers
    assert unsupported(llm.model) is None
    assert len(llm.generate([1, 2, 3], max_tokens=3, temperature=0.0).ids) == 3
