"""The yielding JSON parse reads what json.loads reads, bounds the depth as it goes, and lets other threads run
while it parses (json.loads holds the GIL for a whole body)."""

import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.server.transport.yielding_json import TooDeep, loads_yielding

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


def test_depth_is_bounded_as_it_parses():
    assert loads_yielding(b'{"a": [[{"b": []}]]}', 5) == {"a": [[{"b": []}]]}
    with pytest.raises(TooDeep):
        loads_yielding(b'{"a": [[{"b": [[]]}]]}', 5)
    with pytest.raises(TooDeep):  # unclosed and far deeper than Python's recursion limit
        loads_yielding(b"[" * 100_000, 64)


def test_other_threads_run_while_a_big_body_parses():
    # json.loads would hold the GIL through the whole parse: the watcher could not run at all inside it.
    raw = json.dumps({"prompt": [[]] * 50_000, "ids": [1] * 50_000}).encode()
    parsing, runs, result = threading.Event(), [], []

    def parse() -> None:
        parsing.set()
        result.append(loads_yielding(raw, 64))
        parsing.clear()

    worker = threading.Thread(target=parse)
    worker.start()
    parsing.wait(10)
    while parsing.is_set():
        runs.append(1)
        threading.Event().wait(0.001)
    worker.join()
    assert result[0] == json.loads(raw)
    assert len(runs) >= 10
