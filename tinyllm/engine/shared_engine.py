"""SharedEngine: the one long-lived Engine behind an LLM's generate, stream and scoring calls, stepped by
whichever caller waits on it. Each request's outputs go through the output router into its inbox, so streams
interleaved in one thread share steps and none loses another's outputs."""

from __future__ import annotations

from collections.abc import Iterator

from ..config import kv_dtype_name, parse_kv_dtype
from ..errors import TinyLLMError
from ..outputs import Generation, RequestOutput
from .engine import Engine, EngineConfig
from .model_parts import ModelParts
from .output_router import Failed, Inbox, OutputRouter

DEFAULT_CHUNK_BUDGET = 2048  # tokens per engine step when prefill_chunk is not given: most prompts in one


class SharedEngine:
    """The engine (made on first use, again when the KV dtype or the chunk budget changes while it is idle)
    and the inboxes of its live requests, by id, until read."""

    def __init__(self, parts: ModelParts):
        self.parts = parts
        self.engine: Engine | None = None
        self.key: tuple | None = None  # (KV dtype, chunk budget) the engine was made for
        self._router = OutputRouter()
        self._inboxes: dict[str, Inbox] = {}

    def get(self, kv_dtype, prefill_chunk) -> Engine:
        """The engine for these options, made again only when they change (and no stream is open)."""
        dtype = self.parts.model.dtype if kv_dtype is None else parse_kv_dtype(kv_dtype)
        if prefill_chunk is not None and (
            isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1
        ):
            raise TinyLLMError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
        key = (dtype, prefill_chunk or DEFAULT_CHUNK_BUDGET)
        if self.engine is None or self.key != key:
            if self.engine is not None and self._inboxes:
                raise TinyLLMError(
                    "kv_dtype and prefill_chunk cannot change while this LLM's streams are open "
                    "(finish or close them first)"
                )
            config = EngineConfig(kv_dtype=kv_dtype_name(dtype), max_num_batched_tokens=key[1])
            self.engine, self.key = Engine(self.parts, config), key
        return self.engine

    def generate(self, prompts: list, p, kv_dtype, prefill_chunk, spec) -> list[Generation]:
        """Run the prompts together to the end; their Generations in order."""
        engine = self.get(kv_dtype, prefill_chunk)
        rids = engine.add_requests(prompts, p, spec)
        for rid in rids:
            self._open(rid)
        try:
            for _ in self.outputs(engine, rids):
                pass
            return [engine.generation(rid) for rid in rids]
        finally:
            self.close(engine, rids)

    def stream(self, prompt, p, kv_dtype, prefill_chunk, spec, owner=None) -> TextStream:
        """One request's text pieces; `owner` (the LLM) is kept alive, with its tensor-parallel workers, while
        the stream is."""
        engine = self.get(kv_dtype, prefill_chunk)
        rid = engine.add_request(prompt, p, speculative=spec)  # validated now, not at the first next()
        self._open(rid)  # from now on its outputs are kept, whoever steps the engine
        return TextStream(self, engine, rid, owner)

    def _open(self, rid: str) -> None:
        self._inboxes[rid] = Inbox()
        self._router.open(rid, self._inboxes[rid])

    def outputs(self, engine: Engine, rids: list[str]) -> Iterator[RequestOutput]:
        """Step the engine until every request in rids has finished, yielding their outputs; outputs of
        other live requests (an interleaved stream) are kept for them."""
        live = set(rids)
        while live:
            for rid in rids:
                inbox = self._inboxes[rid]
                while inbox:
                    out = inbox.popleft()
                    if isinstance(out, Failed):  # the engine's fault
                        raise RuntimeError(f"request {rid} failed: {out.error}")
                    if out.error is not None:  # its grammar gave up: the caller's error
                        raise TinyLLMError(f"request {rid} failed: {out.error}")
                    if out.finished:
                        live.discard(rid)
                    yield out
            if not live:
                break
            if not engine.has_unfinished():
                raise RuntimeError(f"requests {sorted(live)} vanished from the engine")
            self._router.route(engine.step())

    def close(self, engine: Engine, rids: list[str]) -> None:
        """Abort what has not finished (a stream closed early, an error) and forget the requests."""
        for rid in rids:
            self._inboxes.pop(rid, None)
            self._router.close(rid)
            engine.abort(rid)
            engine.release(rid)


class TextStream:
    """The text pieces of one request on a shared engine. Closing it (or dropping it, even before the first
    piece) aborts the request and frees its KV blocks."""

    def __init__(self, shared: SharedEngine, engine: Engine, request_id: str, owner=None):
        self._shared, self._engine, self.request_id, self._owner = shared, engine, request_id, owner
        self._outputs = shared.outputs(engine, [request_id])
        self._closed = False

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        if self._closed:
            raise StopIteration
        try:
            for out in self._outputs:
                if out.text:
                    return out.text
        except BaseException:
            self.close()
            raise
        self.close()
        raise StopIteration

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outputs.close()
            self._shared.close(self._engine, [self.request_id])

    def __del__(self) -> None:
        self.close()
