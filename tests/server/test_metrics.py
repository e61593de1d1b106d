"""/metrics after real requests: every series is there, the counts match what was sent, the phases add up
to the end-to-end latency, and the prefix-cache hit counter moves exactly when a cached prefix was used."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

PHASES = (
    "tinyllm_e2e_request_latency_seconds",
    "tinyllm_request_queue_time_seconds",
    "tinyllm_request_prefill_time_seconds",
    "tinyllm_request_decode_time_seconds",
)
HISTOGRAMS = PHASES + ("tinyllm_time_to_first_token_seconds", "tinyllm_inter_token_latency_seconds")
COUNTERS = (
    "tinyllm_prefix_cache_queries",
    "tinyllm_prefix_cache_hits",
    "tinyllm_prompt_tokens",
    "tinyllm_generation_tokens",
)


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(4, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256), smollm_tokenizer
    )
    with ServerThread(create_app(llm, num_blocks=64, block_size=16)) as srv:
        yield srv.wait_ready().url


def scrape(url: str) -> dict:
    """{(sample name, labels as a sorted tuple): value} of every sample /metrics shows."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def complete(url: str, prompt: list[int], max_tokens: int) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "seed": 0}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def cached_tokens(usage: dict) -> int:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def test_series_exist_with_zero_counts_before_any_request(url):
    samples = scrape(url)
    for name in HISTOGRAMS:
        assert value(samples, f"{name}_count") == 0 and value(samples, f"{name}_bucket", le="+Inf") == 0
    for name in COUNTERS:
        assert value(samples, f"{name}_total") == 0


def test_counts_match_the_requests_and_hits_move_only_on_a_cached_prefix(url):
    prompt = [(7 * i) % 500 + 10 for i in range(40)]  # two full 16-token blocks and a partial one
    first = complete(url, prompt, 5)
    after_first = scrape(url)
    assert cached_tokens(first) == 0
    assert value(after_first, "tinyllm_prefix_cache_queries_total") == 40
    assert value(after_first, "tinyllm_prefix_cache_hits_total") == 0

    again = complete(url, prompt, 3)  # the same prompt: its full blocks come from the cache
    after_again = scrape(url)
    assert cached_tokens(again) > 0
    assert value(after_again, "tinyllm_prefix_cache_queries_total") == 80
    assert value(after_again, "tinyllm_prefix_cache_hits_total") == cached_tokens(again)

    other = complete(url, [3, 1, 4, 1, 5, 9, 2, 6], 2)  # nothing in common with the cached prompt
    samples = scrape(url)
    assert cached_tokens(other) == 0
    assert value(samples, "tinyllm_prefix_cache_queries_total") == 88
    assert value(samples, "tinyllm_prefix_cache_hits_total") == cached_tokens(again)
    assert value(samples, "tinyllm_generation_tokens_total") == 5 + 3 + 2
    for name in HISTOGRAMS[:-1]:  # one observation per request
        assert value(samples, f"{name}_count") == 3 and value(samples, f"{name}_bucket", le="+Inf") == 3
    assert value(samples, "tinyllm_inter_token_latency_seconds_count") == (5 - 1) + (3 - 1) + (2 - 1)
    assert value(samples, "tinyllm_requests_finished_total", finish_reason="length") == 3


def test_phases_add_up_to_the_end_to_end_latency(url):
    complete(url, [11, 12, 13, 14, 15], 4)
    s = scrape(url)
    e2e, queue, prefill, decode, ttft = (
        value(s, f"{name}_sum") for name in PHASES + ("tinyllm_time_to_first_token_seconds",)
    )
    assert min(queue, prefill, decode) >= 0 and e2e > 0
    assert e2e == pytest.approx(queue + prefill + decode, rel=1e-9, abs=1e-9)
    assert ttft == pytest.approx(queue + prefill, rel=1e-9, abs=1e-9)
