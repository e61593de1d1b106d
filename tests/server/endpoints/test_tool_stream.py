"""A streamed choice with tools, cut into any pieces, sends the same content and calls as the whole answer:
held-back text is never lost, never sent twice, and what may start a call is not sent as prose."""

import json

from hypothesis import given
from hypothesis import strategies as st

from tinyllm.server.checks.tools import ToolRequest
from tinyllm.server.endpoints.tool_stream import ToolCallStream, call_deltas
from tinyllm.text.tool_calls import FORMATS, HERMES

CALLS = [{"name": "f", "arguments": {"x": "a b"}}, {"name": "g", "arguments": {}}]


def _answers():
    """Texts a model may write in each format: prose, calls, prose then calls, broken calls, near-misses."""
    out = []
    for fmt in FORMATS:
        call = fmt.write(CALLS)
        out += [(fmt, t) for t in ("Plain prose.  ", call, "  Let me check.\n " + call, call[:-3], "x" + fmt.open)]
    return out


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(answer=st.sampled_from(_answers()), cuts=st.lists(st.integers(0, 400), max_size=12), forced=st.booleans())
def test_streamed_pieces_join_to_the_whole_answer(answer, cuts, forced):
    fmt, text = answer
    tools = ToolRequest((), "required" if forced else "auto", True, fmt)
    whole = tools.parse(text)
    content = whole.content if whole.calls else text
    stream, sent = ToolCallStream(tools), ""
    for piece in _cut(text, cuts):
        sent += stream.feed(piece)
        assert content.startswith(sent)  # nothing sent as prose turns out to be part of a call
    rest, parsed = stream.finish()
    assert parsed == whole
    assert sent + rest == content


def test_call_deltas_name_first_then_arguments():
    tools = ToolRequest((), "auto", True, HERMES)
    deltas = call_deltas(tools.parse(HERMES.write(CALLS)))
    dumped = [d[0].model_dump() for d in deltas]
    assert dumped[0] == {
        "index": 0,
        "id": dumped[0]["id"],
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    assert dumped[1] == {"index": 0, "function": {"arguments": json.dumps({"x": "a b"})}}
    assert [d["index"] for d in dumped] == [0, 0, 1, 1] and dumped[0]["id"] != dumped[2]["id"]


def test_parallel_false_keeps_the_first_call():
    tools = ToolRequest((), "auto", False, HERMES)
    assert [c.name for c in tools.parse(HERMES.write(CALLS)).calls] == ["f"]
