"""Ollama's streamed answer (server/ollama/answer.py `_lines`) from given engine outputs: a piece per output with
text (or logprobs asked for), an output the request's own fault ended as an `error` line, and an answer the server
ends while shutting down as a last `done` object with done_reason "length", its counts, `context` and the error."""

import asyncio
import json
import re
import time

from tinyllm.engine.async_engine import SHUTTING_DOWN, EngineStopped
from tinyllm.outputs import RequestOutput, TokenLogprob
from tinyllm.sampling.params import SamplingParams
from tinyllm.server.ollama.answer import Job, Shape, Tracked, _lines
from tinyllm.server.wire.logprobs import TokenTexts

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Group:
    """Stands in for a RequestGroup: the outputs the engine gave, then how the stream ended."""

    def __init__(self, outputs: list, end: Exception | None = None):
        self.given, self.end, self.closed = outputs, end, False

    async def outputs(self):
        for output in self.given:
            yield 0, output
        if self.end is not None:
            raise self.end

    def close(self):
        self.closed = True


def lines(group: Group, shape: Shape) -> list[str]:
    job = Job([1, 2], SamplingParams(), None, "prompt", returns_context=True)

    async def run():
        return [line async for line in _lines(group, Tracked(0, 0, 2), job, shape, 0.0, 0.0)]

    got = asyncio.run(run())
    assert group.closed and all(line.endswith("\n") and line.count("\n") == 1 for line in got)
    return got


def piece(line: str) -> dict:
    obj = json.loads(line)
    assert obj.pop("created_at").endswith("Z")
    return obj


def test_an_error_the_request_caused_ends_the_stream_with_an_error_line():
    ended = RequestOutput("r", "", [], [], finished=True, finish_reason="error", error="the grammar failed")
    got = lines(Group([RequestOutput("r", "Hé", [7], [], completion_tokens=1), ended]), Shape("m", False, None, False))
    assert got[0].count("Hé") == 1  # written as is, not \u-escaped
    assert [piece(got[0]), json.loads(got[1])] == [
        {"model": "m", "response": "Hé", "done": False},
        {"error": "the grammar failed"},
    ]


def test_the_server_stopping_ends_the_answer_done_with_length_and_the_error():
    got = lines(
        Group([RequestOutput("r", "a", [7], [], completion_tokens=1)], EngineStopped(SHUTTING_DOWN)),
        Shape("m", True, None, False),
    )
    assert len(got) == 2
    last = piece(got[1])
    durations = {k: last.pop(k) for k in ("total_duration", "prompt_eval_duration", "eval_duration")}
    assert all(isinstance(v, int) and v >= 0 for v in durations.values())
    assert last == {
        "model": "m",
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "length",
        "load_duration": 0,
        "prompt_eval_count": 2,
        "eval_count": 1,
        "context": [1, 2, 7],
        "error": SHUTTING_DOWN,
    }


def test_an_output_without_text_is_a_piece_only_when_logprobs_are_asked(smollm_tokenizer):
    lp = TokenLogprob(token=7, logprob=-0.5)
    outputs = [RequestOutput("r", "", [7], [lp], completion_tokens=1),
               RequestOutput("r", "", [], [], finished=True, finish_reason="stop", completion_tokens=1)]  # fmt: skip
    unasked = lines(Group(outputs), Shape("m", False, TokenTexts(smollm_tokenizer), False))
    assert [piece(line)["done"] for line in unasked] == [True]
    asked = lines(Group(outputs), Shape("m", False, TokenTexts(smollm_tokenizer), True))
    first = piece(asked[0])
    assert (first["response"], first["done"], len(first["logprobs"])) == ("", False, 1)
    assert first["logprobs"][0]["logprob"] == -0.5 and piece(asked[1])["done"] is True


def test_a_choice_keeps_its_ids_and_the_times_of_its_first_and_last_tokens():
    choice = Tracked(0, 0, 2)
    choice.update(RequestOutput("r", "", [], [], completion_tokens=0))
    assert (choice.first_token, choice.end, choice.ids) == (None, None, [])
    before = time.perf_counter()
    choice.update(RequestOutput("r", "a", [7], [], completion_tokens=1))
    first = choice.first_token
    assert before <= first <= time.perf_counter() and choice.end is None
    choice.update(RequestOutput("r", "b", [8], [], finished=True, finish_reason="stop", completion_tokens=2))
    assert choice.first_token == first and first <= choice.end <= time.perf_counter() and choice.ids == [7, 8]


def test_the_last_object_times_the_answer_from_its_choice():
    choice = Tracked(0, 0, 2, finish_reason="stop", completion_tokens=3)
    choice.first_token, choice.end = 2.0, 5.0
    job = Job([1, 2], SamplingParams(), None, "prompt", returns_context=False)
    assert Shape("m", False, None, False).done(job, choice, 1.5, 0.5) == {
        "done_reason": "stop",
        "total_duration": 4_500_000_000,
        "load_duration": 0,
        "prompt_eval_count": 2,
        "prompt_eval_duration": 500_000_000,
        "eval_count": 3,
        "eval_duration": 3_000_000_000,
    }


def test_a_piece_has_logprobs_only_when_asked(smollm_tokenizer):
    lp = [TokenLogprob(token=7, logprob=-0.5)]
    texts = TokenTexts(smollm_tokenizer)
    unasked = Shape("m", False, texts, False).piece("a", lp)
    assert STAMP.fullmatch(unasked.pop("created_at")) and unasked == {"model": "m", "response": "a", "done": False}
    asked = Shape("m", False, texts, True).piece("a", lp)
    assert set(asked) == {"model", "created_at", "response", "logprobs", "done"}
    token = smollm_tokenizer.decode([7])
    assert asked["logprobs"] == [{"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}]


def test_an_unexpected_failure_ends_the_stream_with_an_error_line():
    got = lines(Group([RequestOutput("r", "a", [7], [], completion_tokens=1)], RuntimeError("boom")),
                Shape("m", False, None, False))  # fmt: skip
    assert [piece(got[0]), json.loads(got[1])] == [
        {"model": "m", "response": "a", "done": False},
        {"error": "internal error (RuntimeError)"},
    ]
