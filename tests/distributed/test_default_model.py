"""The default model (9 heads, 3 KV heads, Q4_1 blocks) over 3 gloo ranks: each rank keeps whole Q4_1 blocks
(576 / 3 = 192 and 1536 / 3 = 512 columns, multiples of 32) and one KV head; greedy text equals one process."""

import pytest

from tinyllm import LLM
from tinyllm.kernels import QuantWeight
from tinyllm.model.quant_linear import QuantLinear

PROMPT = "The three primary colors are"


@pytest.mark.slow
def test_three_ranks_give_the_greedy_text_of_one(default_model_path):
    want = LLM(default_model_path).generate(PROMPT, max_tokens=32, temperature=0, ignore_eos=True)
    llm = LLM(default_model_path, tensor_parallel_size=3)
    try:
        layer = llm.model.model.layers[0]
        assert isinstance(layer.self_attn.o_proj.inner, QuantLinear)  # sharded along whole blocks
        assert isinstance(layer.mlp.down_proj.inner.parts[0], QuantWeight)
        assert layer.self_attn.num_heads == 3 and layer.self_attn.num_kv_heads == 1
        got = llm.generate(PROMPT, max_tokens=32, temperature=0, ignore_eos=True)
        assert got.ids == want.ids and got.text == want.text
    finally:
        llm.close()
    assert not any(w.is_alive() for w in llm.tensor_parallel.workers)
