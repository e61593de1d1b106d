"""Choices as one regex lexeme, with the real grammar engine on the default model's vocabulary: each choice,
whatever characters it holds (regex syntax, Lark's delimiters, quotes, newlines, non-ASCII), is accepted
exactly, and a text that is not a choice is not; 1,024 choices compile; limits are checked before anything is
built."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.constraint import Grammars
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.server.checks.structured import bounded, from_choices, from_schema
from tinyllm.server.wire.limits import MAX_CHOICE_BYTES, MAX_CHOICES, MAX_GRAMMAR_BYTES, MAX_JSON_DEPTH


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return Grammars(smollm_tokenizer, smollm_tokenizer.vocab_size, smollm_tokenizer.stop_ids)


def accepts(grammars, tokenizer, structured, text: str) -> bool:
    matcher = grammars.compile(structured).deep_copy()
    ids = tokenizer.encode(text, add_special_tokens=False)
    return matcher.consume_tokens(ids) and matcher.is_accepting()


choice_text = st.text(alphabet="ab/|\\()[]{}.*+?^$-#&~ \"'\n\té€x{41}", min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(choice_text, min_size=1, max_size=6, unique=True), st.data())
def test_each_choice_and_only_a_choice_is_accepted(grammars, smollm_tokenizer, choices, data):
    structured = from_choices(choices)
    picked = data.draw(st.sampled_from(choices))
    assert accepts(grammars, smollm_tokenizer, structured, picked)
    other = data.draw(choice_text.filter(lambda t: t not in choices))
    assert not accepts(grammars, smollm_tokenizer, structured, other)


def test_the_largest_allowed_list_compiles(grammars, smollm_tokenizer):
    choices = [f"option {i} (of {MAX_CHOICES})" for i in range(MAX_CHOICES)]
    structured = from_choices(choices)
    assert accepts(grammars, smollm_tokenizer, structured, choices[777])
    assert not accepts(grammars, smollm_tokenizer, structured, f"option {MAX_CHOICES} (of {MAX_CHOICES})")


@pytest.mark.parametrize(
    "build, value, says",
    [
        (from_choices, ["x"] * (MAX_CHOICES + 1), f"limit of {MAX_CHOICES}"),
        (from_choices, ["x" * 1000] * 66, f"limit of {MAX_CHOICE_BYTES}"),
        (from_choices, [], "non-empty list"),
        (from_schema, "[" * 5000 + "]" * 5000, f"{MAX_JSON_DEPTH} levels"),
        (from_schema, '{"description": "' + "x" * MAX_GRAMMAR_BYTES + '"}', f"limit of {MAX_GRAMMAR_BYTES}"),
        (from_schema, {"description": "x" * MAX_GRAMMAR_BYTES}, f"limit of {MAX_GRAMMAR_BYTES}"),
        (bounded(StructuredOutput.regex), "a" * (MAX_GRAMMAR_BYTES + 1), f"limit of {MAX_GRAMMAR_BYTES}"),
        (bounded(StructuredOutput.grammar), "start: " + '"a" ' * MAX_GRAMMAR_BYTES, f"limit of {MAX_GRAMMAR_BYTES}"),
    ],
)
def test_over_the_limits_is_refused_before_anything_compiles(build, value, says):
    with pytest.raises(TinyLLMError, match=says.replace("(", r"\(")):
        build(value)
