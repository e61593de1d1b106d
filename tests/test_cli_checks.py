"""cli_checks.check_room: the context rule (engine/prompt.py) with --max-tokens as the field, at its edges."""

import pytest

from tinyllm.cli_checks import check_room
from tinyllm.errors import TinyLLMError


def refused(*args) -> str:
    with pytest.raises(TinyLLMError) as err:
        check_room(*args)
    return str(err.value)


def test_max_tokens_fills_the_context_after_the_prompt_and_no_more():
    check_room(4, 6, 10)
    assert refused(4, 7, 10) == (
        "the prompt has 4 tokens and --max-tokens is 7, more than the model's context length of 10 tokens"
    )
    check_room(0, 10, 10)  # before a chat's first turn
    assert refused(0, 11, 10) == "--max-tokens is 11, more than the model's context length of 10 tokens"


def test_a_prompt_without_max_tokens_still_leaves_room_for_one_token():
    check_room(9, None, 10)
    assert refused(10, None, 10) == (
        "prompt has 10 tokens, but the model's context length is 10 (at most 9 leave room for one new token)"
    )
