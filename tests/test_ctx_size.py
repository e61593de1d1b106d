"""--ctx-size / LLM(ctx_size=N): a model run below its trained context. Prompt and answer stay within N tokens
on every path (the LLM, the CLI's checks, the server's limits and its KV pool), and the logits are the model's own."""

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM, TinyLLMError
from tinyllm.cli import build_parser
from tinyllm.server.cli import engine_options


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ctx") / "tiny.gguf")
    write_gguf(random_tiny_llama(31), path)
    return path


def test_a_smaller_context_bounds_prompt_and_answer_and_keeps_the_logits(tiny_gguf):
    full, small = LLM(tiny_gguf), LLM(tiny_gguf, ctx_size=24)
    assert full.config.context_length > 24 and small.config.context_length == small.info()["context_length"] == 24
    ids = list(range(5, 25))  # 20 tokens: 4 positions left
    out = small.generate(ids, max_tokens=50, ignore_eos=True, temperature=0, logprobs=1)
    assert len(out.ids) == 4 and out.finish_reason == "length"
    same = full.generate(ids, max_tokens=4, ignore_eos=True, temperature=0, logprobs=1)
    assert out.ids == same.ids and [lp.logprob for lp in out.logprobs] == [lp.logprob for lp in same.logprobs]
    with pytest.raises(TinyLLMError, match="context"):
        small.generate(list(range(5, 30)), max_tokens=1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 10**9])
def test_a_ctx_size_outside_the_trained_context_is_refused_naming_it(tiny_gguf, bad):
    with pytest.raises(TinyLLMError, match=r"ctx_size must be an integer from 1 to the model's trained context of \d+"):
        LLM(tiny_gguf, ctx_size=bad)


def test_the_servers_kv_pool_follows_ctx_size_unless_its_size_is_given():
    parse = build_parser().parse_args
    options = engine_options(parse(["serve", "--ctx-size", "100", "--block-size", "16"]))
    assert options["num_blocks"] == 7 and "kv_memory_bytes" not in options  # 100 tokens: 7 blocks of 16
    options = engine_options(parse(["serve", "--ctx-size", "100", "--kv-memory-gb", "0.5"]))
    assert options["kv_memory_bytes"] == 1 << 29 and "num_blocks" not in options
    assert engine_options(parse(["serve"]))["kv_memory_bytes"] == 1 << 30
    assert parse(["generate", "Hi", "--ctx-size", "64"]).ctx_size == parse(["chat", "--ctx-size", "64"]).ctx_size == 64
    with pytest.raises(SystemExit):
        parse(["generate", "Hi", "--ctx-size", "0"])
