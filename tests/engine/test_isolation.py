"""Per-request fault isolation in the engine step: an injected fault fails that request only."""

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.engine.engine import Engine

PARAMS = SamplingParams(temperature=0.8, seed=4, max_tokens=10, ignore_eos=True)


class Boom(RuntimeError):
    pass


class RaisingMatcher:
    """A stop matcher that breaks on the request's third piece of text."""

    def __init__(self):
        self.pushes = 0

    def push(self, text):
        self.pushes += 1
        if self.pushes == 3:
            raise Boom("the stop matcher broke")
        from tinyllm.text.stop import StopResult

        return StopResult(text, False)


class RaisingRng:
    def uniform(self, position, stream=0):
        raise Boom("the sampler broke")


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    return LLM.from_parts(
        tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=128), smollm_tokenizer
    )


def run(engine, faults: dict):
    ids = {name: engine.add_request([10 + i, 20, 30 + i], PARAMS, name) for i, name in enumerate(["a", "b", "c"])}
    for name, inject in faults.items():
        inject(engine.requests[ids[name]])
    outputs = {name: [] for name in ids}
    while engine.has_unfinished():
        for out in engine.step():
            outputs[out.request_id].append(out)
    return outputs


def test_a_fault_in_one_request_fails_it_alone(llm):
    clean = run(Engine(llm.parts, num_blocks=64), {})
    engine = Engine(llm.parts, num_blocks=64)

    def break_matcher(req):
        req.out.matcher = RaisingMatcher()

    def break_rng(req):
        req.rng = RaisingRng()

    faulty = run(engine, {"a": break_matcher, "b": break_rng})
    for name, why in (("a", "stop matcher"), ("b", "sampler")):
        last = faulty[name][-1]
        assert last.finished and last.finish_reason == "error" and why in last.error and "Boom" in last.error
        assert sum(o.finished for o in faulty[name]) == 1
    assert len([o for o in faulty["a"] if o.token_ids]) == 2  # it failed on its third token, not before
    text = "".join(o.text for o in faulty["c"])
    assert text == "".join(o.text for o in clean["c"]) and faulty["c"][-1].finish_reason == "length"
    assert engine.pool_stats().used == 0 and not engine.has_unfinished()


def test_through_the_async_engine_a_fault_reaches_only_its_own_requests_stream(llm, monkeypatch):
    import asyncio

    from tinyllm.engine.async_engine import Accepted, AsyncEngine, EngineFault, Failed, Sink

    engine = Engine(llm.parts, num_blocks=64)
    add = engine.add_request

    def add_and_break(prompt, params, request_id):  # the fault is injected into "b" as the engine adds it
        rid = add(prompt, params, request_id)
        if rid == "b":
            engine.requests[rid].out.matcher = RaisingMatcher()
        return rid

    monkeypatch.setattr(engine, "add_request", add_and_break)
    names = ["a", "b", "c", "d"]

    async def serve() -> dict:
        loop, queues = asyncio.get_running_loop(), {name: asyncio.Queue() for name in names}
        for i, name in enumerate(names):
            runner.add(name, [10 + i, 20, 30 + i], PARAMS, Sink(loop, queues[name]))

        async def drain(name):
            items = [await asyncio.wait_for(queues[name].get(), 10)]  # a stream left without an end fails
            while not isinstance(items[-1], Failed) and not getattr(items[-1], "finished", False):
                items.append(await asyncio.wait_for(queues[name].get(), 10))
            await asyncio.sleep(0.05)  # anything sent to this stream after its end would arrive by now
            return items + [queues[name].get_nowait() for _ in range(queues[name].qsize())]

        return dict(zip(names, await asyncio.gather(*(drain(n) for n in names))))

    runner = AsyncEngine(engine).start()
    try:
        got = asyncio.run(serve())
    finally:
        runner.shutdown()
    assert isinstance(got["b"][0], Accepted) and isinstance(got["b"][-1], Failed)
    assert got["b"][-1].request_id == "b" and isinstance(got["b"][-1].error, EngineFault)
    assert "stop matcher" in str(got["b"][-1].error) and sum(isinstance(x, Failed) for x in got["b"]) == 1
    for name in ("a", "c", "d"):  # the others run to their length with no Failed among their items
        assert isinstance(got[name][0], Accepted) and not any(isinstance(x, Failed) for x in got[name])
        assert got[name][-1].finish_reason == "length" and sum(len(o.token_ids) for o in got[name][1:]) == 10
