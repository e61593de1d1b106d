"""A completions request's fields into SamplingParams keywords (server/checks/sampling_params.py), called directly:
echo with max_tokens=0, the logprobs of the prompt, and a bad value's 400 naming the field as the request did."""

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.server.checks.sampling_params import _as_api_error, completion_params, per_choice
from tinyllm.server.wire.errors import APIError
from tinyllm.server.wire.protocol import CompletionRequest


def values_of(**sent) -> dict:
    values, names = completion_params(CompletionRequest.model_validate({"prompt": "x", **sent}))
    assert names == {}
    return values


@pytest.mark.parametrize(
    "sent, values",
    [
        ({}, {"max_tokens": 16, "logprobs": None, "prompt_logprobs": None}),
        ({"max_tokens": 0, "echo": True}, {"max_tokens": 1, "logprobs": None, "prompt_logprobs": None}),
        ({"max_tokens": 0, "echo": False}, {"max_tokens": 0, "logprobs": None, "prompt_logprobs": None}),
        ({"max_tokens": 1, "echo": True}, {"max_tokens": 1, "logprobs": None, "prompt_logprobs": None}),
        ({"max_tokens": 5, "echo": True, "logprobs": 3}, {"max_tokens": 5, "logprobs": 3, "prompt_logprobs": 3}),
        ({"max_tokens": 5, "logprobs": 3}, {"max_tokens": 5, "logprobs": 3, "prompt_logprobs": None}),
        ({"prompt_logprobs": 2}, {"max_tokens": 16, "logprobs": None, "prompt_logprobs": 2}),
        ({"echo": True, "logprobs": 1, "prompt_logprobs": 4}, {"max_tokens": 16, "logprobs": 1, "prompt_logprobs": 4}),
        ({"echo": True, "logprobs": 4, "prompt_logprobs": 1}, {"max_tokens": 16, "logprobs": 4, "prompt_logprobs": 4}),
    ],
)
def test_echo_scores_the_prompt_with_the_logprobs_asked_for(sent, values):
    assert values_of(**sent) == values


def refused(values: dict, names: dict) -> APIError:
    with pytest.raises(APIError) as err:
        per_choice(values, names, 0, 2)
    assert err.value.status == 400
    return err.value


def test_a_bad_value_is_a_400_naming_the_field_as_the_request_did():
    err = refused({"top_p": 1.5}, {})
    assert (err.message, err.param) == ("top_p must be in (0, 1], got 1.5", "top_p")
    err = refused({"max_tokens": 0}, {"max_tokens": "max_completion_tokens"})
    assert (err.message, err.param) == (
        "max_completion_tokens must be None or an integer >= 1, got 0",
        "max_completion_tokens",
    )
    assert [p.seed for p in per_choice({"top_p": 0.5}, {}, 7, 2)] == [7, 8]


def test_an_error_that_names_no_field_is_a_400_as_it_is():
    err = _as_api_error(TinyLLMError("these values cannot be combined"), {"top_p": "nucleus"})
    assert (err.status, err.message, err.param) == (400, "these values cannot be combined", None)
