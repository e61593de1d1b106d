"""engine/async_engine.py on a real Engine with faults injected: the observer hears each output and each failure
with the request's own record, a failure to add a request reaches that request's stream, and a group that goes
down while idle stops the engine with the group's own message."""

import asyncio
import time

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.async_engine import Accepted, AsyncEngine, EngineFault, Failed, Observer, Sink
from tinyllm.engine.engine import Engine
from tinyllm.errors import EngineDown
from tinyllm.text.stop import StopResult

PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


class BrokenMatcher:
    """A stop matcher that breaks on the request's second piece of text."""

    def __init__(self):
        self.pushes = 0

    def push(self, text):
        self.pushes += 1
        if self.pushes == 2:
            raise RuntimeError("the stop matcher broke")
        return StopResult(text, False)


class Recorder(Observer):
    def __init__(self):
        self.outputs, self.failures = [], []

    def on_output(self, live, output, now):
        self.outputs.append((output.request_id, live))

    def on_failed(self, live, error):
        self.failures.append((live, error))


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    return LLM.from_parts(
        tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=64), smollm_tokenizer
    )


def serve(runner: AsyncEngine, names: list[str]) -> dict:
    """Each request's items up to its end (a finished output or a Failed)."""

    async def scenario():
        loop, queues = asyncio.get_running_loop(), {name: asyncio.Queue() for name in names}
        for i, name in enumerate(names):
            runner.add(name, [10 + i, 20, 30], PARAMS, Sink(loop, queues[name]))

        async def drain(name):
            items = [await asyncio.wait_for(queues[name].get(), 10)]
            while not isinstance(items[-1], Failed) and not getattr(items[-1], "finished", False):
                items.append(await asyncio.wait_for(queues[name].get(), 10))
            return items

        return dict(zip(names, await asyncio.gather(*(drain(n) for n in names))))

    return asyncio.run(scenario())


def test_the_observer_hears_every_output_and_the_failure_with_its_requests_record(llm, monkeypatch):
    engine = Engine(llm.parts, num_blocks=32)
    add = engine.add_request

    def add_and_break(prompt, params, request_id):
        rid = add(prompt, params, request_id)
        if rid == "b":
            engine.requests[rid].out.matcher = BrokenMatcher()
        return rid

    monkeypatch.setattr(engine, "add_request", add_and_break)
    recorder = Recorder()
    runner = AsyncEngine(engine, recorder).start()
    try:
        got = serve(runner, ["a", "b"])
    finally:
        runner.shutdown()
    assert isinstance(got["b"][-1], Failed) and got["a"][-1].finish_reason == "length"
    heard = [rid for rid, _ in recorder.outputs]
    assert heard.count("a") == len(got["a"]) - 1  # every output after Accepted
    assert heard.count("b") == len(got["b"]) - 2  # neither Accepted nor the Failed
    lives = dict(recorder.outputs)  # each request id -> the record its outputs came with
    assert len(recorder.failures) == 1 and recorder.failures[0][0] is lives["b"]
    assert isinstance(recorder.failures[0][1], EngineFault) and "stop matcher" in str(recorder.failures[0][1])


def test_a_fault_while_adding_a_request_fails_that_request_and_the_engine_serves_on(llm, monkeypatch):
    engine = Engine(llm.parts, num_blocks=32)
    add = engine.add_request

    def add_or_break(prompt, params, request_id):
        if request_id == "b":
            raise ValueError("the tokenizer broke")
        return add(prompt, params, request_id)

    monkeypatch.setattr(engine, "add_request", add_or_break)
    runner = AsyncEngine(engine).start()
    try:
        got = serve(runner, ["a", "b"])
    finally:
        runner.shutdown()
    assert len(got["b"]) == 1 and got["b"][0].request_id == "b" and isinstance(got["b"][0].error, EngineFault)
    assert str(got["b"][0].error) == "adding the request failed: the tokenizer broke"
    assert isinstance(got["a"][0], Accepted) and got["a"][-1].finish_reason == "length"
    assert runner.error is None  # shut down, not stopped by itself


def test_a_group_that_goes_down_while_idle_stops_the_engine_with_its_message(llm, monkeypatch):
    engine = Engine(llm.parts, num_blocks=32)

    def check_group():
        raise EngineDown("rank 1 exited with signal 9")

    monkeypatch.setattr(engine, "check_group", check_group)
    runner = AsyncEngine(engine)
    runner.IDLE_CHECK_S = 0.01  # look at the group soon after starting idle
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while runner.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not runner.alive and runner.error == "rank 1 exited with signal 9"
    finally:
        runner.shutdown()
