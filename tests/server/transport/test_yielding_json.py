"""The yielding JSON parse reads what json.loads reads, bounds the depth as it goes, and never hands C more than
a run of a big body at once (json.loads holds the GIL for a whole body)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.server.transport.yielding_json import RUN_CHARS, TooDeep, loads_yielding

LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@settings(max_examples=40, deadline=None)
@given(VALUES, st.sampled_from(["utf-8", "utf-16", "utf-32"]), st.booleans())
def test_it_reads_what_json_loads_reads(value, encoding, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode(encoding)
    assert loads_yielding(raw, 64) == json.loads(raw)


@pytest.mark.parametrize("raw", [b'{"a": [1, 2', b"[1,]", b"\xff\xfe\xfd", b"", b'{"a" 1}'])
def test_text_that_is_not_json_is_a_value_error_as_with_json_loads(raw):
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(ValueError):
        loads_yielding(raw, 64)


def test_long_arrays_read_in_runs_equal_json_loads_where_commas_and_brackets_hide_in_strings():
    tricky = ["a,b", "},{", "],[", 'x"y', "\\", "", 1.5, [1, {"k": "v},"}], {"a": [1, "],"]}]
    raw = json.dumps({"x": tricky * 3000, "y": [tricky] * 500, "z": list(range(30_000))}).encode()
    assert len(raw) > 4 * RUN_CHARS
    assert loads_yielding(raw, 64) == json.loads(raw)


def test_depth_is_bounded_as_it_parses():
    assert loads_yielding(b'{"a": [[{"b": []}]]}', 5) == {"a": [[{"b": []}]]}
    with pytest.raises(TooDeep):
        loads_yielding(b'{"a": [[{"b": [[]]}]]}', 5)
    with pytest.raises(TooDeep):  # unclosed and far deeper than Python's recursion limit
        loads_yielding(b"[" * 100_000, 64)
    with pytest.raises(TooDeep):  # deep inside a run that json.loads would read at once
        loads_yielding(json.dumps([[1, 2]] * 1000 + [[[[[[1]]]]]] + [1] * 10).encode(), 5)


def test_no_call_into_c_reads_more_than_a_run_of_a_big_body(monkeypatch):
    # json.loads holds the GIL for all it is given: here it is given runs of at most RUN_CHARS characters, and
    # the rest is the Python scanner, between whose values the interpreter lets other threads run.
    raw = json.dumps({"prompt": [[]] * 100_000, "ids": [1] * 200_000, "messages": [{"role": "user"}] * 10_000})
    real, sizes = json.loads, []

    def loads(text, *args, **kwargs):
        sizes.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", loads)
    assert loads_yielding(raw.encode(), 64) == real(raw)
    assert sizes and max(sizes) <= RUN_CHARS + 2 and sum(sizes) > 0.9 * len(raw)
