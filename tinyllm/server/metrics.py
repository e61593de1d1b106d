"""Prometheus metrics for one app, in a registry of its own (not the process-global one), so that
several apps (tests, benchmarks) can live in one process without clashing names.

Latencies are observed on the engine thread when an output leaves the engine: that is when the
token exists for the server, before the HTTP layer adds its own delay. A request's phases come from the
engine's own stamps (RequestTimes), measured from its arrival (when the handler handed it to the engine
thread), so that for every request that ends with "stop" or "length":

    e2e = queue (arrival -> first scheduled) + prefill (-> first token) + decode (-> finished)
    time to first token = queue + prefill

Aborted and failed requests are counted by finish reason but have no phases.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..engine.async_engine import EngineState, Live, Observer

CONTENT_TYPE = CONTENT_TYPE_LATEST

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_PHASE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
_COMPLETED = ("stop", "length")


class ServerMetrics(Observer):
    def __init__(self):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.running = Gauge("tinyllm_requests_running", "Sequences in the running batch", registry=r)
        self.waiting = Gauge("tinyllm_requests_waiting", "Sequences waiting to be scheduled", registry=r)
        self.blocks_total = Gauge("tinyllm_kv_blocks_total", "KV cache blocks in the pool", registry=r)
        self.blocks_used = Gauge("tinyllm_kv_blocks_used", "KV cache blocks held by sequences", registry=r)
        self.blocks_cached = Gauge(
            "tinyllm_kv_blocks_cached", "Free KV blocks still holding a reusable prompt prefix", registry=r
        )
        self.prompt_tokens = Counter("tinyllm_prompt_tokens", "Prompt tokens prefilled", registry=r)
        self.generation_tokens = Counter("tinyllm_generation_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "tinyllm_time_to_first_token_seconds",
            "From the request's arrival at the engine to its first sampled token",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "tinyllm_inter_token_latency_seconds", "Time between a sequence's tokens", buckets=_ITL_BUCKETS, registry=r
        )
        self.prefix_queries = Counter(
            "tinyllm_prefix_cache_queries", "Prompt tokens looked up in the prefix cache", registry=r
        )
        self.prefix_hits = Counter(
            "tinyllm_prefix_cache_hits", "Prompt tokens whose KV came from the prefix cache", registry=r
        )
        self._add_phases(r)
        self.finished = Counter(
            "tinyllm_requests_finished", "Sequences finished, by finish reason", ["finish_reason"], registry=r
        )
        for reason in ("stop", "length", "abort", "error"):
            self.finished.labels(reason)  # export zeros, so dashboards see every series from the start

    def _add_phases(self, r: CollectorRegistry) -> None:
        def phase(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, buckets=_PHASE_BUCKETS, registry=r)

        self.e2e = phase("tinyllm_e2e_request_latency_seconds", "From a request's arrival to its end")
        self.queue = phase("tinyllm_request_queue_time_seconds", "From arrival to first being scheduled")
        self.prefill = phase(
            "tinyllm_request_prefill_time_seconds", "From first being scheduled to the first sampled token"
        )
        self.decode = phase("tinyllm_request_decode_time_seconds", "From the first sampled token to the end")

    # ---- Observer: called on the engine thread
    def on_output(self, live: Live, output, now: float) -> None:
        aborted = output.finish_reason == "abort"
        if live.first_output is None and not aborted:
            live.first_output = now
            first_token = live.times.first_token if live.times is not None else None
            self.ttft.observe((first_token or now) - live.arrival)
            self.prompt_tokens.inc(output.prompt_tokens)
            self.prefix_queries.inc(output.prompt_tokens)
            self.prefix_hits.inc(output.num_cached_tokens)
        n = len(output.token_ids)
        if n:
            if live.last_token is not None:
                gap = (now - live.last_token) / n
                for _ in range(n):
                    self.itl.observe(gap)
            live.last_token = now
            self.generation_tokens.inc(n)
        if output.finished:
            self.finished.labels(output.finish_reason or "stop").inc()
            if output.finish_reason in _COMPLETED and live.times is not None:
                self._observe_phases(live.arrival, live.times, now)

    def _observe_phases(self, arrival: float, times, now: float) -> None:
        scheduled = times.first_scheduled or arrival
        first = times.first_token or now
        end = times.finished or now
        self.queue.observe(scheduled - arrival)
        self.prefill.observe(first - scheduled)
        self.decode.observe(end - first)
        self.e2e.observe(end - arrival)

    def on_state(self, state: EngineState) -> None:
        self.running.set(state.running)
        self.waiting.set(state.waiting)
        self.blocks_total.set(state.blocks_total)
        self.blocks_used.set(state.blocks_used)
        self.blocks_cached.set(state.blocks_cached)

    def on_failed(self, live: Live, error: Exception) -> None:
        self.finished.labels("error").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
