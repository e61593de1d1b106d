"""Model-free walks through a grammar: random tokens the grammar engine's mask allows, on the real SmolLM2
vocabulary, so a property of every text a constraint can produce is tested without running a model."""

import random

import numpy as np
import pytest

STOP_IDS = (0, 2)


@pytest.fixture(scope="session")
def ll_tokenizer(smollm_tokenizer):
    import llguidance

    return llguidance.LLTokenizer(smollm_tokenizer.hf.to_str(), n_vocab=smollm_tokenizer.vocab_size, eos_token=[0, 2])


@pytest.fixture(scope="session")
def ll_matcher(ll_tokenizer):
    """matcher(structured) -> a fresh llguidance matcher for a json_object / json_schema / regex constraint,
    compiled as the engine compiles JSON (no free whitespace)."""
    import llguidance

    def build(structured):
        if structured.kind == "regex":
            grammar = llguidance.LLMatcher.grammar_from_regex(structured.spec)
        else:
            options = {"whitespace_flexible": False}
            grammar = llguidance.LLMatcher.grammar_from_json_schema(structured.schema_text, defaults=options)
        matcher = llguidance.LLMatcher(ll_tokenizer, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return matcher

    return build


@pytest.fixture(scope="session")
def walk(ll_tokenizer, smollm_tokenizer):
    """walk(matcher, seed, p_stop, max_steps) -> (bytes, finished): from the matcher's start, at each step a stop
    id with probability p_stop when the grammar allows one (always when nothing else is allowed), else a token
    drawn uniformly from the other allowed ones. `finished`: it ended on a stop id within max_steps."""
    vocab_size = smollm_tokenizer.vocab_size

    def run(matcher, seed: int, p_stop: float, max_steps: int = 200):
        rng, matcher, ids = random.Random(seed), matcher.deep_copy(), []
        for _ in range(max_steps):
            bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
            allowed = np.flatnonzero(bits[:vocab_size]).tolist()  # [n]
            stops = [t for t in allowed if t in STOP_IDS]
            others = [t for t in allowed if t not in STOP_IDS]
            assert allowed, f"the grammar allows nothing after {ll_tokenizer.decode_bytes(ids)!r}"
            if stops and (not others or rng.random() < p_stop):
                assert matcher.is_accepting()
                return ll_tokenizer.decode_bytes(ids), True
            token = rng.choice(others)
            assert matcher.consume_token(token)
            ids.append(token)
        return ll_tokenizer.decode_bytes(ids), False

    return run
