"""Each Ollama option alone, through the path a request takes (options -> the OpenAI request -> the engine's
SamplingParams), changes exactly the SamplingParams field it names and nothing else; options that ask for
nothing change nothing; unknown options and the runner's settings are ignored and noted for the log, as Ollama
does; bad values and sampling this server does not do are a 400 naming the option."""

import dataclasses

import pytest

from tinyllm.sampling.params import SamplingParams
from tinyllm.server.checks.sampling_params import chat_params, completion_params, per_choice
from tinyllm.server.ollama.options import sampling_of
from tinyllm.server.ollama.protocol import ChatBody, GenerateBody
from tinyllm.server.ollama.requests import chat_request, raw_request
from tinyllm.server.wire.errors import APIError

CONTEXT = 1024  # the model's context in these tests
HI = [{"role": "user", "content": "hi"}]


def chat_sampling(options: dict | None) -> SamplingParams:
    """The SamplingParams a chat with these options samples with (seed 0 where the request sets none)."""
    sampling = sampling_of(options, CONTEXT)
    req = chat_request(ChatBody(model="tiny", options=options), sampling, HI)
    values, names = chat_params(req)
    return per_choice(values, names, req.seed or 0, 1)[0]


def raw_sampling(options: dict | None) -> SamplingParams:
    """The same for a raw generate, which goes through the completions route's fields."""
    sampling = sampling_of(options, CONTEXT)
    req = raw_request(GenerateBody(model="tiny", raw=True, options=options), sampling, [1, 2, 3], 50)
    values, names = completion_params(req)
    return per_choice(values, names, req.seed or 0, 1)[0]


def changed(params: SamplingParams, base: SamplingParams) -> dict:
    return {
        f.name: getattr(params, f.name)
        for f in dataclasses.fields(params)
        if getattr(params, f.name) != getattr(base, f.name)
    }


ALONE = [
    ({"temperature": 0.25}, {"temperature": 0.25}),
    ({"top_k": 7}, {"top_k": 7}),
    ({"top_p": 0.5}, {"top_p": 0.5}),
    ({"min_p": 0.125}, {"min_p": 0.125}),
    ({"typical_p": 0.7}, {"typical_p": 0.7}),
    ({"tfs_z": 0.95}, {"tfs_z": 0.95}),
    ({"mirostat": 2}, {"mirostat": 2}),
    ({"mirostat_tau": 3.5}, {"mirostat_tau": 3.5}),
    ({"mirostat_eta": 0.25}, {"mirostat_eta": 0.25}),
    ({"repeat_penalty": 1.25}, {"repetition_penalty": 1.25}),
    ({"presence_penalty": 0.75}, {"presence_penalty": 0.75}),
    ({"frequency_penalty": -0.5}, {"frequency_penalty": -0.5}),
    ({"seed": 42}, {"seed": 42}),
    ({"repeat_last_n": 64}, {"penalty_last_n": 64}),
]


@pytest.mark.parametrize("options, expected", ALONE, ids=[next(iter(o)) for o, _ in ALONE])
@pytest.mark.parametrize("sampled", [chat_sampling, raw_sampling], ids=["chat", "raw"])
def test_each_sampling_option_alone_sets_its_own_field_and_no_other(sampled, options, expected):
    assert changed(sampled(options), sampled(None)) == expected


def test_stop_num_predict_and_an_integer_typed_penalty():
    base = chat_sampling(None)
    assert changed(chat_sampling({"stop": "\n\n"}), base) == {"stop": ("\n\n",)}
    assert changed(chat_sampling({"stop": ["a", "b"]}), base) == {"stop": ("a", "b")}
    assert changed(chat_sampling({"num_predict": 9}), base) == {"max_tokens": 9}
    assert changed(chat_sampling({"repeat_penalty": 2}), base) == {"repetition_penalty": 2.0}
    assert base.max_tokens is None and base.temperature == 1.0  # the OpenAI route's defaults, not Ollama's


@pytest.mark.parametrize("value", [-1, -2])
def test_num_predict_without_limit_and_seed_minus_one_set_nothing(value):
    assert changed(chat_sampling({"num_predict": value}), chat_sampling(None)) == {}
    assert sampling_of({"num_predict": value}, CONTEXT).fields == {"max_tokens": None}
    assert sampling_of({"seed": -1}, CONTEXT).fields == {"seed": None}  # a fresh seed, chosen by the route


def test_num_ctx_is_the_requests_context_and_no_sampling_field():
    sampling = sampling_of({"num_ctx": 100}, CONTEXT)
    assert (sampling.fields, sampling.num_ctx) == ({}, 100)
    assert sampling_of({"num_ctx": CONTEXT}, CONTEXT).num_ctx == CONTEXT
    assert sampling_of(None, CONTEXT).num_ctx is None
    assert changed(chat_sampling({"num_ctx": 100}), chat_sampling(None)) == {}


NEUTRAL = [
    {"penalize_newline": True},
    {"temperature": None},  # null means not set
]


@pytest.mark.parametrize("options", NEUTRAL, ids=[",".join(o) for o in NEUTRAL])
def test_options_that_ask_for_nothing_are_accepted_and_change_nothing(options):
    sampling = sampling_of(options, CONTEXT)
    penalties = {k: v for k, v in options.items() if k.endswith("penalty")}
    assert sampling.num_ctx is None
    assert set(sampling.fields) == {"repetition_penalty" if k == "repeat_penalty" else k for k in penalties}


REFUSED = [
    ({"typical_p": 1.5}, "options.typical_p", "options.typical_p must be in (0, 1]"),
    ({"tfs_z": 0}, "options.tfs_z", "options.tfs_z must be in (0, 1], got 0.0"),
    ({"mirostat": 3}, "options.mirostat", "options.mirostat must be 0 (off), 1 or 2, got 3"),
    ({"mirostat": 1.0}, "options.mirostat", "options.mirostat must be an integer, got 1.0"),
    ({"mirostat": 2, "mirostat_tau": 0}, "options.mirostat_tau", "options.mirostat_tau must be a finite number > 0"),
    ({"mirostat_eta": -1}, "options.mirostat_eta", "options.mirostat_eta must be a finite number > 0, got -1.0"),
    ({"penalize_newline": False}, "options.penalize_newline", "penalize_newline False"),
    ({"repeat_last_n": -2, "repeat_penalty": 1.1}, "options.repeat_last_n", "options.repeat_last_n must be -1"),
    ({"repeat_last_n": 2.5}, "options.repeat_last_n", "options.repeat_last_n must be an integer"),
    ({"temperature": "hot"}, "options.temperature", "options.temperature must be a number, got 'hot'"),
    ({"temperature": True}, "options.temperature", "options.temperature must be a number"),
    ({"top_k": 2.5}, "options.top_k", "options.top_k must be an integer, got 2.5"),
    ({"stop": [1]}, "options.stop", "options.stop must be a string or a list of strings"),
    ({"num_predict": 0}, "options.num_predict", "got 0"),
    ({"num_predict": -3}, "options.num_predict", "got -3"),
    ({"num_ctx": 0}, "options.num_ctx", "must be a positive number of tokens, got 0"),
    ({"seed": "x"}, "options.seed", "options.seed must be an integer"),
    ({"top_p": 1.5}, "options.top_p", "options.top_p must be in (0, 1]"),
    ({"repeat_penalty": 0}, "options.repeat_penalty", "options.repeat_penalty"),
]


@pytest.mark.parametrize("options, param, message", REFUSED, ids=[str(o) for o, _, _ in REFUSED])
def test_other_options_and_bad_values_are_a_400_naming_the_option(options, param, message):
    with pytest.raises(APIError) as err:
        sampling_of(options, CONTEXT)
    assert err.value.status == 400 and err.value.param == param
    assert message in err.value.message


@pytest.mark.parametrize("option", ["temperature", "top_k", "repeat_penalty", "stop", "num_predict", "seed"])
def test_embeddings_take_no_sampling_option(option):
    with pytest.raises(APIError, match=f"options.{option} does nothing for embeddings"):
        sampling_of({option: 1}, CONTEXT, generating=False)
    assert sampling_of({"num_ctx": 10}, CONTEXT, generating=False).num_ctx == 10


def test_unknown_options_and_the_runners_settings_are_ignored_and_noted():
    options = {"foo": 1, "num_thread": 4, "num_gpu": 1, "use_mmap": False, "numa": True, "temperature": 0.5}
    sampling = sampling_of(options, CONTEXT)
    assert sampling.fields == {"temperature": 0.5} and sampling.num_ctx is None
    assert sampling.notes == (
        "options num_thread, num_gpu, use_mmap, numa are set when the server starts: ignored",
        "options foo are not options this server knows: ignored",
    )
    assert changed(chat_sampling(options), chat_sampling(None)) == {"temperature": 0.5}
    assert sampling_of({"temperature": 0.5}, CONTEXT).notes == ()
    two = sampling_of({"foo": 1, "bar": 2}, CONTEXT).notes
    assert two == ("options foo, bar are not options this server knows: ignored",)


def test_a_context_past_the_models_is_the_models_and_noted():
    sampling = sampling_of({"num_ctx": 99999}, CONTEXT)
    assert sampling.num_ctx == CONTEXT
    assert sampling.notes == (f"options.num_ctx 99999 is more than the model's context length: {CONTEXT} is used",)


def test_repeat_last_n_zero_turns_every_penalty_off_and_minus_one_looks_at_all():
    on = {"repeat_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.25}
    assert changed(chat_sampling({**on, "repeat_last_n": 0}), chat_sampling(None)) == {}
    whole = changed(chat_sampling({**on, "repeat_last_n": -1}), chat_sampling(None))
    assert whole == {"repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.25}
    assert changed(raw_sampling({**on, "repeat_last_n": 33}), raw_sampling(None)) == {**whole, "penalty_last_n": 33}


def test_ollamas_generate_request_with_options_example_is_accepted():
    """The options of Ollama's API documentation's "generate request (with options)" example."""
    options = {
        "num_keep": 5, "seed": 42, "num_predict": 100, "top_k": 20, "top_p": 0.9, "min_p": 0.0, "typical_p": 0.7,
        "repeat_last_n": 33, "temperature": 0.8, "repeat_penalty": 1.2, "presence_penalty": 1.5,
        "frequency_penalty": 1.0, "penalize_newline": True, "stop": ["\n", "user:"], "numa": False,
        "num_ctx": 1024, "num_batch": 2, "num_gpu": 1, "main_gpu": 0, "use_mmap": True, "num_thread": 8,
    }  # fmt: skip
    params = chat_sampling(options)
    notes = sampling_of(options, CONTEXT).notes
    assert notes == ("options num_keep, numa, num_batch, num_gpu, main_gpu, use_mmap, num_thread are set when the "
                     "server starts: ignored",)  # fmt: skip
    assert params.typical_p == 0.7
    assert (params.penalty_last_n, params.repetition_penalty, params.max_tokens, params.seed) == (33, 1.2, 100, 42)


def test_the_values_that_turn_mirostat_and_tail_free_sampling_off_change_nothing():
    for options in ({"mirostat": 0}, {"tfs_z": 1}, {"tfs_z": 1.0}):
        assert changed(chat_sampling(options), chat_sampling(None)) == {}
    # Ollama's defaults for tau and eta, sent with mirostat off: the same sampling
    off = chat_sampling({"mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1})
    assert changed(off, chat_sampling(None)) == {} and not off.uses_mirostat
    on = chat_sampling({"mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.5, "tfs_z": 0.9})
    assert (on.mirostat, on.mirostat_tau, on.mirostat_eta, on.tfs_z, on.uses_mirostat) == (1, 4.0, 0.5, 0.9, True)


@pytest.mark.parametrize("option", ["num_predict", "num_ctx", "seed", "top_k"])
def test_integer_options_name_themselves_when_not_integers(option):
    with pytest.raises(APIError) as err:
        sampling_of({option: "many"}, CONTEXT)
    assert err.value.param == f"options.{option}"
    assert err.value.message == f"options.{option} must be an integer, got 'many'"


def test_the_smallest_context_is_one_token():
    assert sampling_of({"num_ctx": 1}, CONTEXT).num_ctx == 1
    with pytest.raises(APIError, match="options.num_ctx must be a positive number of tokens, got 0"):
        sampling_of({"num_ctx": 0}, CONTEXT)


def test_an_embeddings_sampling_option_is_a_400_naming_it():
    with pytest.raises(APIError) as err:
        sampling_of({"top_p": 0.5}, CONTEXT, generating=False)
    assert err.value.param == "options.top_p"
    assert err.value.message == "options.top_p does nothing for embeddings; leave it out"


def test_the_largest_seed_is_accepted():
    assert changed(chat_sampling({"seed": 2**63 - 1}), chat_sampling(None)) == {"seed": 2**63 - 1}
    with pytest.raises(APIError, match=r"options.seed must be None or an integer in \[0, 2\*\*63\)"):
        sampling_of({"seed": 2**63}, CONTEXT)
