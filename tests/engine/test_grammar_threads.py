"""Grammar work off the engine's critical path: a constrained request whose masks are slow sits out steps
while a plain request beside it gets a token every step; a grammar past its budget, or one that gives up
mid-generation, fails its own request alone with a GrammarError ("grammar" kind); compiling and masks run on
grammar threads, never on the thread that steps the engine. Mechanism, not the clock: the fake matcher
blocks on an event the test controls, and the budget is patched small."""

import threading

import numpy as np
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, StructuredOutput
from tinyllm.engine.engine import Engine
from tinyllm.errors import TinyLLMError
from tinyllm.grammar import constraint as constraint_module
from tinyllm.grammar.constraint import Constraint, GrammarError

PLAIN = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


class GatedMatcher:
    """Allows every token; each mask waits until the test opens the gate (a grammar that takes as long as
    the test wants), and records which thread computed it."""

    def __init__(self, vocab_size: int, gate: threading.Event):
        self.vocab_size, self.gate, self.threads = vocab_size, gate, []
        self.error = ""

    def consume_tokens(self, ids):
        return True

    def rollback(self, n):
        return True

    def is_error(self):
        return bool(self.error)

    def get_error(self):
        return self.error

    def compute_bitmask(self):
        self.threads.append(threading.current_thread().name)
        self.gate.wait(timeout=30)
        words = (self.vocab_size + 31) // 32
        return np.full(words * 4, 0xFF, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(21, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512)
    return LLM.from_parts(model, smollm_tokenizer)


def with_matcher(monkeypatch, engine: Engine, matcher) -> None:
    """The engine's constrained requests get `matcher` (on the engine's own grammar threads)."""
    pool, vocab_size = engine.grammars._pool("mask"), engine.model_config.vocab_size
    fake = lambda s, **_: None if s is None else Constraint(matcher, vocab_size, pool)
    monkeypatch.setattr(engine.grammars, "constraint", fake)


SLOW = SamplingParams(temperature=0.0, max_tokens=4, structured=StructuredOutput.regex("[a-z]+"))


def test_a_slow_grammar_delays_only_its_own_request(llm, monkeypatch):
    engine = Engine(llm.parts)
    gate = threading.Event()
    matcher = GatedMatcher(llm.config.vocab_size, gate)
    with_matcher(monkeypatch, engine, matcher)
    slow = engine.add_request([5, 90, 310, 7], SLOW)
    plain = engine.add_request([44, 12, 900], PLAIN)
    tokens = {slow: 0, plain: 0}
    for _ in range(8):  # the slow grammar's first mask never finishes while the gate is shut
        for out in engine.step():
            tokens[out.request_id] += len(out.token_ids)
    assert tokens[plain] == 8 and tokens[slow] == 0  # the plain request got a token every step
    assert engine.requests[slow].num_computed == 0  # not even admitted: its first masks are not ready
    gate.set()
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += len(out.token_ids)
    assert tokens == {slow: 4, plain: 12}
    assert engine.generation(slow).finish_reason == "length"
    assert matcher.threads and all(name.startswith("tinyllm-grammar-mask") for name in matcher.threads)


def test_the_slow_request_gets_the_same_tokens_as_without_the_wait(llm, monkeypatch):
    fast = Engine(llm.parts)
    with_matcher(monkeypatch, fast, GatedMatcher(llm.config.vocab_size, gate := threading.Event()))
    gate.set()
    expected = fast.generate([[5, 90, 310, 7]], SLOW)[0].ids
    engine = Engine(llm.parts)
    gate = threading.Event()
    with_matcher(monkeypatch, engine, GatedMatcher(llm.config.vocab_size, gate))
    rid = engine.add_request([5, 90, 310, 7], SLOW)
    for _ in range(3):
        engine.step()
    gate.set()
    while engine.has_unfinished():
        engine.step()
    assert engine.generation(rid).ids == expected


def test_a_grammar_past_its_budget_fails_alone(llm, monkeypatch):
    monkeypatch.setattr(constraint_module, "MASK_BUDGET_S", 0.05)
    engine = Engine(llm.parts)
    gate = threading.Event()
    with_matcher(monkeypatch, engine, GatedMatcher(llm.config.vocab_size, gate))
    slow = engine.add_request([5, 90, 310, 7], SLOW)
    plain = engine.add_request([44, 12, 900], PLAIN)
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    gate.set()
    failed = [o for o in outputs if o.request_id == slow]
    assert failed[-1].finish_reason == "error" and failed[-1].error_kind == "grammar"
    assert "took longer than 0.05 s" in failed[-1].error
    assert engine.generation(plain).finish_reason == "length" and len(engine.generation(plain).ids) == 12


def test_a_grammar_that_gives_up_mid_generation_fails_alone(llm):
    # 20,000 alternatives in one rule: the first mask is fine, consuming the first token passes llguidance's
    # 2,000 items a row, and the grammar gives up
    grammar = StructuredOutput.grammar("start: " + " | ".join(f'"w{i}"' for i in range(20000)))
    engine = Engine(llm.parts)
    gave_up = engine.add_request([5, 90, 310, 7], SamplingParams(temperature=0.0, max_tokens=8, structured=grammar))
    plain = engine.add_request([44, 12, 900], PLAIN)
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    last = [o for o in outputs if o.request_id == gave_up][-1]
    assert last.finish_reason == "error" and last.error_kind == "grammar"
    assert last.error.startswith("the grammar gave up on the generated text")
    assert len(last.error) < 400  # the grammar engine's state and the whole grammar are not in it
    assert engine.generation(plain).finish_reason == "length"
    with pytest.raises(TinyLLMError, match="gave up"):  # LLM's own calls: the caller's error
        llm.generate([5, 90, 310, 7], max_tokens=8, structured=grammar)


def test_compiling_runs_on_a_grammar_thread(llm, monkeypatch):
    seen = []
    real = constraint_module.grammar_text
    monkeypatch.setattr(
        constraint_module, "grammar_text", lambda s: seen.append(threading.current_thread().name) or real(s)
    )
    llm.grammars.compile(StructuredOutput.regex("[0-9]{3}-[a-z]{9}"))
    assert seen and seen[0].startswith("tinyllm-grammar-compile")


def test_an_engine_that_compiles_in_the_background_never_compiles_on_its_own_thread(llm, monkeypatch):
    seen = []
    real = constraint_module.grammar_text
    monkeypatch.setattr(
        constraint_module, "grammar_text", lambda s: seen.append(threading.current_thread().name) or real(s)
    )
    engine = Engine(llm.parts, compile_grammars_on_add=False)
    good = SamplingParams(temperature=0.0, max_tokens=6, structured=StructuredOutput.regex("[a-c]{2,5}x"))
    bad = SamplingParams(temperature=0.0, max_tokens=6, structured=StructuredOutput.regex("a("))
    ok, broken = engine.add_request([5, 90, 310, 7], good), engine.add_request([44, 12, 900], bad)
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert seen and all(name.startswith("tinyllm-grammar-compile") for name in seen)
    assert engine.generation(ok).finish_reason == "stop" and engine.generation(ok).text.endswith("x")
    last = [o for o in outputs if o.request_id == broken][-1]
    assert last.error_kind == "grammar" and last.error.startswith("the regex cannot be compiled")


def test_a_language_with_no_sentence_is_refused_when_compiled(llm):
    with pytest.raises(GrammarError, match="matches no text at all"):
        llm.grammars.compile(StructuredOutput.regex(r"[^\s\S]"))


def test_warm_up_builds_the_token_table_off_the_caller(llm, smollm_tokenizer):
    from tinyllm.grammar.constraint import Grammars

    grammars = Grammars(smollm_tokenizer, llm.config.vocab_size, llm.eos_ids)
    job = grammars.warm_up()
    assert job.result(timeout=60) is grammars._vocabulary()


class HeldAfterFirst(GatedMatcher):
    """Its first mask is ready at once; every later one waits on the gate: a request that is already running
    when its grammar becomes slow."""

    def compute_bitmask(self):
        if not self.threads:
            self.threads.append(threading.current_thread().name)
            words = (self.vocab_size + 31) // 32
            return np.full(words * 4, 0xFF, dtype=np.uint8).tobytes()
        return super().compute_bitmask()


def test_a_running_request_whose_next_mask_is_held_back_sits_out_while_the_others_decode(llm, monkeypatch):
    engine = Engine(llm.parts)
    gate = threading.Event()
    with_matcher(monkeypatch, engine, HeldAfterFirst(llm.config.vocab_size, gate))
    slow = engine.add_request([5, 90, 310, 7], SLOW)
    plain = engine.add_request([44, 12, 900], PLAIN)
    tokens = {slow: 0, plain: 0}
    for _ in range(6):
        for out in engine.step():
            tokens[out.request_id] += len(out.token_ids)
    assert tokens == {slow: 1, plain: 6}  # slow sampled its first token, then waits for its second mask
    assert engine.requests[slow].num_computed == 4  # running, its prompt computed, not its first token
    gate.set()
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += len(out.token_ids)
    assert tokens == {slow: 4, plain: 12} and engine.generation(slow).finish_reason == "length"
