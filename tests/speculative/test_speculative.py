"""Speculative decoding: same tokens as plain decoding, caches rolled back exactly, stops inside drafts."""

import math
import random

import pytest
import torch

from helpers.tiny_models import ScriptedModel, tiny_llama
from tinyllm import KVCache, SamplingParams, TinyLLMError, generate
from tinyllm.cache.block_table import blocks_for
from tinyllm.cache.paged_cache import PagedKVCache
from tinyllm.reference import cache_dims
from tinyllm.sampling.filters import process_logits
from tinyllm.speculative.draft_model import DraftModelProposer, self_draft
from tinyllm.speculative.ngram import NgramProposer
from tinyllm.speculative.proposer import SpeculativeConfig

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def model(smollm_tokenizer):
    return tiny_llama(41, vocab_size=smollm_tokenizer.vocab_size, num_layers=4)


def repetitive_prompt():
    return [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]


class FixedProposer:
    """Proposes a fixed token k times (wrong almost always), or a script (always right)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, ids, k):
        return (self.tokens(ids) if callable(self.tokens) else [self.tokens] * k)[:k]

    def rollback(self, n):
        pass


def test_ngram_proposer_drafts_what_followed_the_latest_match():
    p = NgramProposer(max_ngram=3)
    assert p.propose([1, 2, 3, 9, 9, 1, 2, 3, 4, 1, 2, 3], 3) == [4, 1, 2]  # latest match of [1, 2, 3]
    assert p.propose([1, 2, 3, 4, 5], 2) == []
    assert p.propose([5, 6, 0, 9, 5, 6], 2) == [0, 9]  # falls back to a 2-gram
    assert p.propose([7, 1, 8, 1], 2) == []  # a 1-gram match is not enough by default
    one = NgramProposer(max_ngram=3, min_ngram=1)
    assert one.propose([7, 1, 8, 1], 2) == [8, 1]
    assert one.propose([4, 4], 5) == [4]


def scan(ids: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The proposer's rule by a plain scan: the latest earlier occurrence of the longest suffix n-gram."""
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == ids[len(ids) - n :]:
                return ids[start + n : start + n + k]
    return []


@pytest.mark.parametrize("max_ngram, min_ngram", [(3, 2), (4, 1), (2, 2)])
def test_ngram_index_equals_a_scan_as_the_sequence_grows_and_changes(max_ngram, min_ngram):
    rng = random.Random(max_ngram * 10 + min_ngram)
    for _ in range(20):
        p = NgramProposer(max_ngram, min_ngram)
        ids = []
        for step in range(60):
            ids = ids + [rng.randrange(4) for _ in range(rng.choice([1, 1, 2, 3]))]
            if step == 30:
                ids = ids[:10] + [7, 7]  # not a continuation: the index starts over
            k = rng.randrange(1, 6)
            assert p.propose(ids, k) == scan(ids, k, max_ngram, min_ngram), (ids, k)


@pytest.mark.parametrize("cache", ["contiguous", "paged", "none"])
@pytest.mark.parametrize("kind", ["ngram", "self_draft", "reject_all", "accept_all"])
def test_greedy_speculative_equals_plain(model, smollm_tokenizer, cache, kind):
    proposer = {
        "ngram": lambda: NgramProposer(),
        "self_draft": lambda: DraftModelProposer(self_draft(model, 2)),
        "reject_all": lambda: FixedProposer(0),
        "accept_all": lambda: DraftModelProposer(model),
    }[kind]()
    plain = generate(model, smollm_tokenizer, repetitive_prompt(), GREEDY, cache=cache)
    spec = generate(
        model, smollm_tokenizer, repetitive_prompt(), GREEDY, cache=cache, proposer=proposer, num_draft_tokens=4
    )
    assert spec.ids == plain.ids and spec.text == plain.text
    s = spec.stats
    if kind == "reject_all":
        assert s["accepted"] == 0 and s["drafted"] > 0
    if kind == "accept_all":
        assert s["acceptance_rate"] == 1.0 and s["tokens_per_target_forward"] > 3
    assert s["tokens_per_target_forward"] >= 1.0


def test_caches_after_a_speculative_run_equal_a_plain_run(model, smollm_tokenizer):
    dims = cache_dims(model)[:3]
    for make in (lambda: KVCache(*dims, 64), lambda: PagedKVCache.for_one_sequence(*dims, 64, block_size=4)):
        a, b = make(), make()
        generate(model, smollm_tokenizer, repetitive_prompt(), GREEDY, cache=a)
        generate(model, smollm_tokenizer, repetitive_prompt(), GREEDY, cache=b, proposer=FixedProposer(0))
        assert a.seq_len() == b.seq_len()
        n = a.seq_len()
        for layer in range(dims[0]):
            ka = a.update(layer, torch.zeros(1, dims[1], 0, dims[2]), torch.zeros(1, dims[1], 0, dims[2]))[0]
            kb = b.update(layer, torch.zeros(1, dims[1], 0, dims[2]), torch.zeros(1, dims[1], 0, dims[2]))[0]
            assert ka.shape[2] == n and torch.allclose(ka, kb, atol=1e-5, rtol=0)
        if isinstance(b, PagedKVCache):
            assert len(b.block_table) == blocks_for(n, 4)  # rejected drafts' blocks were released


def test_seeded_speculative_sampling_is_reproducible_and_equals_plain(model, smollm_tokenizer):
    for seed in range(4):
        p = SamplingParams(temperature=1.0, top_k=20, seed=seed, max_tokens=16, ignore_eos=True)
        plain = generate(model, smollm_tokenizer, repetitive_prompt(), p)
        for proposer in (NgramProposer(), DraftModelProposer(self_draft(model, 1))):
            spec = generate(model, smollm_tokenizer, repetitive_prompt(), p, proposer=proposer)
            assert spec.ids == plain.ids
            assert [x.logprob for x in spec.logprobs] == pytest.approx([x.logprob for x in plain.logprobs], abs=1e-5)


@pytest.mark.slow
def test_first_speculative_tokens_follow_the_target_distribution(model, smollm_tokenizer):
    """Chi-square: the first verified token (position 1: a draft accepted, or the residual draw after a
    rejection) is distributed as the target says, given the first token."""
    prompt = repetitive_prompt()
    p = SamplingParams(temperature=1.5, top_k=6, max_tokens=2, ignore_eos=True)

    def target_logits(ids):
        with torch.no_grad():
            return process_logits(model(torch.tensor([ids]))[0, -1], p, prompt, ids[len(prompt) :])

    draft = FixedProposer(lambda ids: [int(target_logits(ids).argmax())])  # the likeliest: often accepted
    seconds: dict[int, dict[int, int]] = {}
    for seed in range(500):
        g = generate(model, smollm_tokenizer, prompt, p.replace(seed=seed), proposer=draft, num_draft_tokens=1)
        seconds.setdefault(g.ids[0], {}).setdefault(g.ids[1], 0)
        seconds[g.ids[0]][g.ids[1]] += 1
    first, counts = max(seconds.items(), key=lambda kv: sum(kv[1].values()))
    n = sum(counts.values())
    probs = torch.softmax(target_logits(prompt + [first]), -1)
    kept = [i for i in range(probs.shape[0]) if probs[i] > 0]
    assert n > 100 and set(counts) <= set(kept)
    chi2 = sum((counts.get(i, 0) - n * float(probs[i])) ** 2 / (n * float(probs[i])) for i in kept)
    dof = len(kept) - 1
    critical = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3  # p = 0.001, Wilson-Hilferty
    assert chi2 < critical, (chi2, critical, counts)


def test_eos_and_stop_strings_inside_an_accepted_run(smollm_tokenizer):
    tok = smollm_tokenizer
    words = tok.encode(" one two three four five six")
    prompt = tok.encode("Hi")
    script = words[:3] + [2] + words[3:]
    model = ScriptedModel(script, len(prompt), vocab_size=tok.vocab_size)
    oracle = FixedProposer(lambda ids: script[len(ids) - len(prompt) :])
    g = generate(
        model, tok, prompt, GREEDY.replace(ignore_eos=False), eos_ids=(2,), proposer=oracle, num_draft_tokens=6
    )
    assert g.ids == words[:3] and g.finish_reason == "stop" and g.text == tok.decode(words[:3])
    model2 = ScriptedModel(words, len(prompt), vocab_size=tok.vocab_size)
    oracle2 = FixedProposer(lambda ids: words[len(ids) - len(prompt) :])
    pieces = []
    g = generate(
        model2, tok, prompt, GREEDY.replace(stop=["thr"]), proposer=oracle2, num_draft_tokens=6, on_text=pieces.append
    )
    assert g.text == " one two " and "".join(pieces) == g.text and g.finish_reason == "stop"
    assert g.ids == words[:3]  # the token holding the stop string ends it; nothing after it leaks
    g = generate(model2, tok, prompt, GREEDY.replace(max_tokens=4), proposer=oracle2, num_draft_tokens=6)
    assert g.ids == words[:4] and g.finish_reason == "length"


def test_self_draft_and_config_checks(model):
    with pytest.raises(TinyLLMError, match="draft_layers"):
        self_draft(model, 4)
    d = self_draft(model, 2)
    assert d.config.num_layers == 2 and d.lm_head is model.lm_head
    with pytest.raises(TinyLLMError, match="method"):
        SpeculativeConfig(method="medusa")
    with pytest.raises(TinyLLMError, match="exactly one"):
        SpeculativeConfig(method="draft")
    with pytest.raises(TinyLLMError, match="num_draft_tokens"):
        SpeculativeConfig(num_draft_tokens=0)
