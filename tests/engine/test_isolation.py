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
