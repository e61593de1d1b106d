"""engine/prompt.py's context rule at its edges: a prompt of context - 1 tokens leaves room for one new token
and one more is refused; prompt + max_tokens == context fits and one more is refused; the message names the
field, the error carries the field to blame. The engine and the reference loop hold every prompt to it."""

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, TinyLLMError
from tinyllm.engine.prompt import NoRoom, check_room


def refused(*args, **kwargs) -> NoRoom:
    with pytest.raises(NoRoom) as err:
        check_room(*args, **kwargs)
    return err.value


def test_a_prompt_must_leave_room_for_one_new_token():
    check_room(9, 10)
    err = refused(10, 10, "input")
    assert (
        str(err) == "input has 10 tokens, but the model's context length is 10 (at most 9 leave room for one new token)"
    )
    assert err.field == "input" and isinstance(err, TinyLLMError)


def test_max_tokens_may_run_to_the_last_position_and_no_further():
    check_room(4, 10, max_tokens=6)
    err = refused(4, 10, max_tokens=7, max_tokens_field="--max-tokens")
    assert (
        str(err) == "the prompt has 4 tokens and --max-tokens is 7, more than the model's context length of 10 tokens"
    )
    assert err.field == "--max-tokens"
    check_room(0, 10, max_tokens=10)
    err = refused(0, 10, max_tokens=11)
    assert str(err) == "max_tokens is 11, more than the model's context length of 10 tokens"
    assert err.field == "max_tokens"


def test_the_prompt_is_blamed_before_max_tokens():
    assert refused(10, 10, "messages", max_tokens=20).field == "messages"


def test_a_context_the_request_set_is_named_and_blamed():
    check_room(7, 8, "messages", context_field="options.num_ctx")
    err = refused(8, 8, "messages", context_field="options.num_ctx")
    assert str(err) == "messages has 8 tokens, but options.num_ctx is 8 (at most 7 leave room for one new token)"
    assert err.field == "options.num_ctx"
    err = refused(4, 8, max_tokens=5, max_tokens_field="options.num_predict", context_field="options.num_ctx")
    assert str(err) == "the prompt has 4 tokens and options.num_predict is 5, more than options.num_ctx of 8 tokens"
    assert err.field == "options.num_predict"


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=16)
    return LLM.from_parts(model, smollm_tokenizer)


@pytest.mark.parametrize("cache", ["paged", "contiguous"])  # the engine, the reference loop
def test_a_prompt_one_short_of_the_context_gets_one_token_and_a_full_one_is_refused(llm, cache):
    g = llm.generate([7] * 15, cache=cache, temperature=0, ignore_eos=True)
    assert len(g.ids) == 1 and g.finish_reason == "length"
    with pytest.raises(TinyLLMError) as err:
        llm.generate([7] * 16, cache=cache, temperature=0)
    assert str(err.value) == (
        "prompt has 16 tokens, but the model's context length is 16 (at most 15 leave room for one new token)"
    )
