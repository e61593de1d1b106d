"""SamplingParams: every field validated, normalised, and re-validated by replace()."""

import dataclasses
import math

import pytest

from tinyllm.sampling import SamplingParams

BAD_VALUES = [
    ("temperature", -0.1),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", True),
    ("temperature", "1.0"),
    ("temperature", None),
    ("top_k", -2),
    ("top_k", 1.5),
    ("top_k", True),
    ("top_k", "3"),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("top_p", -0.1),
    ("top_p", math.nan),
    ("top_p", False),
    ("min_p", -0.1),
    ("min_p", 1.01),
    ("min_p", math.nan),
    ("min_p", True),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.0),
    ("repetition_penalty", math.nan),
    ("repetition_penalty", math.inf),
    ("repetition_penalty", True),
    ("repetition_penalty", 1e-50),
    ("repetition_penalty", 1e-4),
    ("repetition_penalty", 1e4),
    ("presence_penalty", 2.01),
    ("presence_penalty", -2.5),
    ("presence_penalty", math.nan),
    ("presence_penalty", True),
    ("frequency_penalty", 2.5),
    ("frequency_penalty", -2.01),
    ("frequency_penalty", math.nan),
    ("frequency_penalty", False),
    ("seed", -1),
    ("seed", 2**63),
    ("seed", 1.0),
    ("seed", True),
    ("seed", "7"),
    ("max_tokens", 0),
    ("max_tokens", -5),
    ("max_tokens", 2.0),
    ("max_tokens", True),
    ("stop", ""),
    ("stop", [""]),
    ("stop", ["ok", ""]),
    ("stop", [1]),
    ("stop", 5),
    ("stop", b"x"),
    ("stop", None),
    ("stop_token_ids", [-1]),
    ("stop_token_ids", [1.0]),
    ("stop_token_ids", [True]),
    ("stop_token_ids", 3),
    ("stop_token_ids", "12"),
    ("stop_token_ids", None),
    ("ignore_eos", 1),
    ("ignore_eos", "yes"),
    ("ignore_eos", None),
    ("logprobs", -1),
    ("logprobs", 21),
    ("logprobs", 1.0),
    ("logprobs", True),
    ("min_tokens", -1),
    ("min_tokens", 1.0),
    ("min_tokens", True),
    ("min_tokens", None),
    ("min_tokens", 257),  # more than the default max_tokens (256)
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_every_bad_value_is_rejected_naming_its_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        SamplingParams(**{field: value})


MESSAGES = [  # one bad value a field: the whole sentence a caller reads
    ("temperature", -1.0, "temperature must be a finite number >= 0, got -1.0"),
    ("top_k", -2, "top_k must be an integer >= 1, or 0 / -1 to disable, got -2"),
    ("top_p", 1.5, "top_p must be in (0, 1], got 1.5"),
    ("typical_p", 0.0, "typical_p must be in (0, 1], got 0.0"),
    ("min_p", 1.5, "min_p must be in [0, 1], got 1.5"),
    ("tfs_z", 2.0, "tfs_z must be in (0, 1], got 2.0"),
    ("mirostat", 3, "mirostat must be 0 (off), 1 or 2, got 3"),
    ("mirostat_tau", 0.0, "mirostat_tau must be a finite number > 0, got 0.0"),
    ("mirostat_eta", -1.0, "mirostat_eta must be a finite number > 0, got -1.0"),
    ("repetition_penalty", 0.0, "repetition_penalty must be in [0.001, 1000], got 0.0"),
    ("presence_penalty", 2.5, "presence_penalty must be in [-2, 2], got 2.5"),
    ("frequency_penalty", -3.0, "frequency_penalty must be in [-2, 2], got -3.0"),
    ("penalty_last_n", 0, "penalty_last_n must be None or an integer >= 1, got 0"),
    ("seed", -1, "seed must be None or an integer in [0, 2**63), got -1"),
    ("max_tokens", 0, "max_tokens must be None or an integer >= 1, got 0"),
    ("min_tokens", -1, "min_tokens must be an integer >= 0, got -1"),
    ("stop", 5, "stop must be a non-empty string or a list of them, got 5"),
    ("stop_token_ids", [-1], "stop_token_ids must be a list of integers >= 0, got [-1]"),
    ("ignore_eos", 1, "ignore_eos must be a bool, got 1"),
    ("logprobs", 21, "logprobs must be None or an integer in [0, 20], got 21"),
    ("prompt_logprobs", -1, "prompt_logprobs must be None or an integer in [0, 20], got -1"),
]


@pytest.mark.parametrize(("field", "value", "message"), MESSAGES)
def test_message_names_field_and_value(field, value, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**{field: value})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0.0),
        ("temperature", 100.0),
        ("top_k", 1),
        ("top_p", 1.0),
        ("top_p", 1e-9),
        ("min_p", 0.0),
        ("min_p", 1.0),
        ("repetition_penalty", 1e-3),
        ("presence_penalty", -2.0),
        ("presence_penalty", 2.0),
        ("frequency_penalty", -2.0),
        ("frequency_penalty", 2.0),
        ("seed", 0),
        ("seed", 2**63 - 1),
        ("max_tokens", 1),
        ("max_tokens", None),
        ("logprobs", 0),
        ("logprobs", 20),
        ("logprobs", None),
        ("ignore_eos", True),
        ("min_tokens", 0),
        ("min_tokens", 256),
    ],
)
def test_boundary_values_are_accepted(field, value):
    assert getattr(SamplingParams(**{field: value}), field) == value


def test_defaults():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (1.0, 0, 1.0, 0.0)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.0, 0.0, 0.0)
    assert (p.seed, p.max_tokens, p.stop, p.stop_token_ids) == (None, 256, (), ())
    assert p.ignore_eos is False and p.logprobs is None and not p.is_greedy


def test_stop_string_becomes_a_one_tuple():
    assert SamplingParams(stop="x").stop == ("x",)
    assert SamplingParams(stop=["a", "bc"]).stop == ("a", "bc")
    assert SamplingParams(stop=("a",)).stop == ("a",)


def test_lists_are_normalised_to_tuples_and_params_are_hashable():
    p = SamplingParams(stop=["a"], stop_token_ids=[3, 4])
    assert p.stop_token_ids == (3, 4) and isinstance(p.stop_token_ids, tuple)
    assert hash(p) == hash(SamplingParams(stop=("a",), stop_token_ids=(3, 4)))


def test_top_k_minus_one_means_disabled():
    assert SamplingParams(top_k=-1).top_k == 0
    assert SamplingParams(top_k=-1) == SamplingParams(top_k=0)


def test_integers_are_accepted_as_floats():
    p = SamplingParams(temperature=1, top_p=1, presence_penalty=-2)
    assert isinstance(p.temperature, float) and isinstance(p.top_p, float)
    assert isinstance(p.presence_penalty, float)


def test_is_greedy_below_the_greedy_temperature():
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=0.0, top_k=5, seed=3).is_greedy
    assert SamplingParams(temperature=1e-50).is_greedy and SamplingParams(temperature=9.9e-6).is_greedy
    assert not SamplingParams(temperature=1e-5).is_greedy


def test_replace_changes_one_field_and_validates_again():
    p = SamplingParams(temperature=0.5, seed=7, stop="x")
    q = p.replace(top_p=0.9)
    assert q.top_p == 0.9 and q.temperature == 0.5 and q.seed == 7 and q.stop == ("x",)
    assert p.top_p == 1.0  # the original is untouched
    assert p.replace(stop="y").stop == ("y",)
    assert p.replace(top_k=-1).top_k == 0
    with pytest.raises(ValueError, match="^top_p must be"):
        p.replace(top_p=1.5)
    with pytest.raises(ValueError, match="^temprature"):
        p.replace(temprature=0.1)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SamplingParams().temperature = 0.0  # type: ignore[misc]


def test_min_tokens_is_checked_against_max_tokens_naming_both():
    with pytest.raises(ValueError) as info:
        SamplingParams(max_tokens=4, min_tokens=5)
    assert str(info.value) == "min_tokens must be at most max_tokens (4), got 5"
    assert SamplingParams(max_tokens=None, min_tokens=10_000).min_tokens == 10_000  # no budget: any count
    assert SamplingParams().min_tokens == 0
