"""The nesting depth of JSON text found without parsing it equals the depth of the parsed value, for any JSON
(hypothesis builds values whose strings hold brackets, quotes and backslashes); the key under which a body
first nests too deep is the one named."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.server.wire.json_depth import deep_field, nests_deeper_than

tricky_text = st.text(alphabet='[]{}"\\,:ab é\n', max_size=6)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=30,
)


def depth(value) -> int:
    """The obvious recursive definition: containers nested in containers."""
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values, st.booleans(), st.booleans())
def test_the_scan_agrees_with_the_parsed_depth(value, ascii_only, as_bytes):
    text = json.dumps(value, ensure_ascii=ascii_only)
    raw = text.encode() if as_bytes else text
    d = depth(value)
    for limit in range(max(0, d - 2), d + 2):
        assert nests_deeper_than(raw, limit) == (d > limit), (text, limit)


def test_deep_bodies_far_past_the_recursion_limit():
    deep = b"[" * 100_000 + b"]" * 100_000
    assert nests_deeper_than(deep, 64) and not nests_deeper_than(deep, 100_000)
    assert not nests_deeper_than(json.dumps({"s": "[" * 100_000}), 2)  # brackets inside a string do not nest
    assert nests_deeper_than(b"[" * 70, 64)  # not JSON, but as deep as it claims


def test_the_deep_field_is_the_top_level_key_holding_the_deep_part():
    body = {"model": "x", "messages": [{"role": "user", "content": "[[[["}], "tools": [[[[[[[[1]]]]]]]], "n": 1}
    assert deep_field(json.dumps(body).encode(), 5) == "tools"
    assert deep_field(json.dumps({'we"ird': [[[[[[]]]]]]}).encode(), 5) == 'we"ird'
    assert deep_field(b"[[[[[[[[[]]]]]]]]]", 5) is None  # no key: the body itself
    assert deep_field(json.dumps(body).encode(), 50) is None  # not too deep at all
