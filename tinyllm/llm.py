"""LLM: the public entry point — a loaded model, its tokenizer, and generate/stream/chat.

Every request runs on one long-lived Engine that the LLM owns (continuous batching, paged KV cache, prefix
sharing, speculative decoding): a single prompt is a one-element batch. `cache="none"|"contiguous"` (or a
cache object) runs the labelled reference loop (tinyllm.reference) instead, the oracle the engine is tested
against. An LLM is not thread-safe; streams of one LLM may be interleaved in one thread (they share steps).
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Iterator, Sequence

import torch

from .cache.q8_kv import bytes_per_value
from .config import KV_DTYPES, ModelConfig, kv_dtype_name, parse_dtype, parse_kv_dtype
from .distributed.config import ParallelConfig
from .distributed.driver import TensorParallel
from .distributed.worker import ModelSource
from .engine.engine import Engine, EngineConfig
from .engine.model_parts import ModelParts
from .engine.output_router import Failed, Inbox, OutputRouter
from .engine.prompt import prompt_ids_of
from .errors import TinyLLMError
from .loading.loader import load
from .outputs import Generation, RequestOutput, Score
from .reference import iter_generate
from .sampling.constraint import Grammars
from .sampling.params import SamplingParams
from .speculative.factory import DraftModels, make_proposer
from .speculative.proposer import SpeculativeConfig

ENGINE_CACHE = "paged"
DEFAULT_CHUNK_BUDGET = 2048  # tokens per engine step when prefill_chunk is not given: most prompts in one


def speculative_config(speculative) -> SpeculativeConfig | None:
    """None, a SpeculativeConfig, a method name ("ngram" / "draft"), or a dict of SpeculativeConfig fields."""
    if speculative is None or isinstance(speculative, SpeculativeConfig):
        return speculative
    if isinstance(speculative, str):
        return SpeculativeConfig(method=speculative)
    if isinstance(speculative, dict):
        try:
            return SpeculativeConfig(**speculative)
        except TypeError as exc:
            raise TinyLLMError(f"unknown speculative option: {exc}") from None
    raise TinyLLMError(f"speculative must be None, a method name or a SpeculativeConfig, got {speculative!r}")


def sampling_params(params: SamplingParams | None, sampling: dict) -> SamplingParams:
    """`params=SamplingParams(...)` or the same fields as keywords, not both."""
    if params is not None and sampling:
        raise TinyLLMError(f"pass either params= or sampling keywords, not both (got {sorted(sampling)})")
    if params is not None:
        if not isinstance(params, SamplingParams):
            raise TinyLLMError(f"params must be a SamplingParams, got {type(params).__name__}")
        return params
    try:
        return SamplingParams(**sampling)
    except TypeError as exc:
        raise TinyLLMError(f"unknown sampling parameter: {exc}") from None
    except ValueError as exc:
        raise TinyLLMError(str(exc)) from None


def parallel_config(tensor_parallel_size: int, parallel: ParallelConfig | None) -> ParallelConfig:
    if parallel is None:
        return ParallelConfig(tensor_parallel_size)
    if tensor_parallel_size not in (1, parallel.tensor_parallel_size):
        raise TinyLLMError(
            f"tensor_parallel_size={tensor_parallel_size} disagrees with parallel.tensor_parallel_size="
            f"{parallel.tensor_parallel_size}"
        )
    return parallel


def is_prompt_list(prompt) -> bool:
    """A list of prompts (texts or id lists), as opposed to one prompt given as a list of ids."""
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(x, (str, list, tuple)) for x in prompt)


class LLM:
    """A model ready to generate. `LLM()` loads the default model; `LLM(path)` a .gguf file or HF folder."""

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device = "cpu",
        weights: str | None = None,
        quantize: str | None = None,
        tensor_parallel_size: int = 1,
        parallel: ParallelConfig | None = None,
        ctx_size: int | None = None,
    ):
        """weights: "native" keeps GGUF block formats as blocks, "native-int8" too with activations quantized
        to 8 bits per 32 (faster, not equal to the reference), "native-int24" to three 8-bit limbs (within
        float32's rounding, faster where memory bounds decode), "dequantized" expands them to float (the
        reference); default native on the CPU. quantize: "int8" | "int4" quantizes a float model at load.
        tensor_parallel_size: split the model over that many processes (or `parallel`: where they meet,
        how long a silent one is waited for); close() stops them. ctx_size: run the model below its trained
        context (prompt and answer together stay within ctx_size tokens)."""
        parallel = parallel_config(tensor_parallel_size, parallel)
        sharded = parallel.tensor_parallel_size > 1  # the blocks stay to be cut
        loaded = load(model, parse_dtype(dtype), device, weights=weights, quantize=quantize, keep_blocks=sharded)
        self.path, self.format = loaded.path, loaded.format
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.config = within_context(loaded.config, ctx_size)
        self.eos_ids = loaded.eos_ids
        self.weight_types = loaded.weight_types
        source = ModelSource(loaded.path, parse_dtype(dtype), str(device), weights, quantize)
        self._start_parallel(parallel, source)
        self._init_engine_state()

    @classmethod
    def from_parts(
        cls,
        model,
        tokenizer,
        eos_ids=None,
        path: str = "<memory>",
        *,
        tensor_parallel_size: int = 1,
        parallel: ParallelConfig | None = None,
    ) -> LLM:
        """An LLM around a model and tokenizer already in memory (tests, custom models). With tensor
        parallelism the model is sent whole to the local ranks, then sharded in place."""
        parallel = parallel_config(tensor_parallel_size, parallel)
        llm = cls.__new__(cls)
        llm.path, llm.format = path, "memory"
        llm.config, llm.model, llm.tokenizer = model.config, model, tokenizer
        llm.eos_ids = tuple(tokenizer.stop_ids if eos_ids is None else eos_ids)
        llm.weight_types = {}
        llm._start_parallel(parallel, ModelSource(device=str(model.device), module=model))
        llm._init_engine_state()
        return llm

    def _start_parallel(self, parallel: ParallelConfig, source: ModelSource) -> None:
        self.tensor_parallel = None
        if parallel.tensor_parallel_size > 1:
            self.tensor_parallel = TensorParallel(parallel, self.model, source)
            weakref.finalize(self, self.tensor_parallel.close)  # a dropped LLM stops its workers

    def close(self) -> None:
        """Stop this LLM's tensor-parallel workers, if any (the LLM can generate no more); idempotent."""
        if getattr(self, "tensor_parallel", None) is not None:
            self.tensor_parallel.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _init_engine_state(self) -> None:
        self._engine: Engine | None = None
        self._engine_key: tuple | None = None
        self._router = OutputRouter()  # the engine's outputs to the requests they belong to
        self._inboxes: dict[str, Inbox] = {}  # outputs of this LLM's live requests, by id, until read
        self._drafts = DraftModels(self.model, self.tokenizer)  # for the reference loop
        self.grammars = Grammars(self.tokenizer, self.config.vocab_size, self.eos_ids)  # structured outputs
        # what every engine of this LLM is built from, once the model is sharded (with tensor parallelism)
        self.parts = ModelParts(
            self.model, self.tokenizer, self.config, self.eos_ids, self.grammars, self.tensor_parallel
        )

    def engine(self, **options) -> Engine:
        """A new continuous-batching Engine of your own over this model (options: see EngineConfig)."""
        return Engine(self.parts, **options)

    # ---- generation
    def generate(
        self,
        prompt: str | Sequence[int] | list,
        *,
        cache: str | object = ENGINE_CACHE,
        kv_dtype: str | torch.dtype | None = None,
        prefill_chunk: int | None = None,
        speculative=None,
        params: SamplingParams | None = None,
        **sampling,
    ):
        """One prompt (text or ids) -> Generation; a list of prompts -> list[Generation], run together.
        `speculative` ("ngram", "draft" or a SpeculativeConfig) drafts tokens and verifies them in one
        forward; the output is the same. `cache="none"|"contiguous"` runs the reference loop instead."""
        p, spec = sampling_params(params, sampling), speculative_config(speculative)
        prompts = prompt if is_prompt_list(prompt) else [prompt]
        if isinstance(cache, str) and cache == ENGINE_CACHE:
            gens = self._engine_generate(prompts, p, kv_dtype, prefill_chunk, spec)
        else:
            gens = [self._reference_generate(x, p, cache, kv_dtype, prefill_chunk, spec) for x in prompts]
        return gens if is_prompt_list(prompt) else gens[0]

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        cache: str | object = ENGINE_CACHE,
        kv_dtype: str | torch.dtype | None = None,
        prefill_chunk: int | None = None,
        speculative=None,
        params: SamplingParams | None = None,
        **sampling,
    ) -> Iterator[str]:
        """Yield text pieces as they become final (never text that a stop string later cuts). Closing the
        iterator early aborts the request and frees its KV blocks."""
        p, spec = sampling_params(params, sampling), speculative_config(speculative)
        if isinstance(cache, str) and cache == ENGINE_CACHE:
            return self._engine_stream(prompt, p, kv_dtype, prefill_chunk, spec)
        return self._reference_steps(prompt, p, cache, kv_dtype, prefill_chunk, spec)

    def chat(self, messages: list[dict], *, stream: bool = False, tools: list[dict] | None = None, **kwargs):
        """Render `messages` (and the tools offered, for templates that list them) with the model's chat
        template and generate (or stream) the reply. Text in the messages is encoded as text, even where it
        spells a control token such as "<|im_end|>": only the template writes turns."""
        ids = self.tokenizer.encode_chat(messages, add_generation_prompt=True, tools=tools).ids
        return self.stream(ids, **kwargs) if stream else self.generate(ids, **kwargs)

    # ---- scoring
    def logprobs(self, text: str | Sequence[int]) -> list:
        """Each token's logprob after the tokens before it ([None, TokenLogprob, ...]; the first has none)."""
        ids = prompt_ids_of(self.tokenizer, text)
        return self._prompt_logprobs(ids, 0)

    def score(self, prompt: str | Sequence[int], continuation: str | Sequence[int]) -> Score:
        """The logprob of `continuation` after `prompt`, each encoded on its own and joined (as lm-eval does)."""
        head = prompt_ids_of(self.tokenizer, prompt)
        tail = (
            self.tokenizer.encode(continuation, add_special_tokens=False)
            if isinstance(continuation, str)
            else list(continuation)
        )
        if not tail:
            raise TinyLLMError("continuation must have at least one token, got none")
        scored = self._prompt_logprobs(head + tail, 1)[len(head) :]
        return Score(sum(lp.logprob for lp in scored), all(lp.top[0][0] == lp.token for lp in scored), len(tail))

    def _prompt_logprobs(self, ids: list[int], top_n: int) -> list:
        p = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True, prompt_logprobs=top_n)
        return self._engine_generate([ids], p, None, None, None)[0].prompt_logprobs

    # ---- embeddings
    def embed(self, texts: str | Sequence[int] | list, *, pooling: str = "mean", normalize: bool = True):
        """Final hidden states (after the final norm) pooled per text, "mean" or "last" token, L2-normalized
        unless normalize=False: a text (or id list) -> float32 [C], a list of them -> [N, C] (embedding.py)."""
        from .embedding import embed

        return embed(self, texts, pooling=pooling, normalize=normalize)

    # ---- the engine path
    def _shared_engine(self, kv_dtype, prefill_chunk) -> Engine:
        """The LLM's engine, rebuilt only when the KV dtype or the chunk budget changes (and it is idle)."""
        dtype = self.model.dtype if kv_dtype is None else parse_kv_dtype(kv_dtype)
        if prefill_chunk is not None and (
            isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1
        ):
            raise TinyLLMError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
        key = (dtype, prefill_chunk or DEFAULT_CHUNK_BUDGET)
        if self._engine is None or self._engine_key != key:
            if self._engine is not None and self._inboxes:
                raise TinyLLMError(
                    "kv_dtype and prefill_chunk cannot change while this LLM's streams are open "
                    "(finish or close them first)"
                )
            name = kv_dtype_name(dtype)
            self._engine = Engine(self.parts, EngineConfig(kv_dtype=name, max_num_batched_tokens=key[1]))
            self._engine_key = key
        return self._engine

    def _engine_generate(self, prompts: list, p, kv_dtype, prefill_chunk, spec) -> list[Generation]:
        engine = self._shared_engine(kv_dtype, prefill_chunk)
        rids = engine.add_requests(prompts, p, spec)
        for rid in rids:
            self._open(rid)
        try:
            for _ in self._outputs(engine, rids):
                pass
            return [engine.generation(rid) for rid in rids]
        finally:
            self._close(engine, rids)

    def _engine_stream(self, prompt, p, kv_dtype, prefill_chunk, spec) -> Iterator[str]:
        engine = self._shared_engine(kv_dtype, prefill_chunk)
        rid = engine.add_request(prompt, p, speculative=spec)  # validated now, not at the first next()
        self._open(rid)  # from now on its outputs are kept, whoever steps the engine
        return TextStream(self, engine, rid)

    def _open(self, rid: str) -> None:
        self._inboxes[rid] = Inbox()
        self._router.open(rid, self._inboxes[rid])

    def _outputs(self, engine: Engine, rids: list[str]) -> Iterator[RequestOutput]:
        """Step the engine until every request in rids has finished, yielding their outputs; outputs of
        other live requests of this LLM (an interleaved stream) are kept for them."""
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

    def _close(self, engine: Engine, rids: list[str]) -> None:
        """Abort what has not finished (a stream closed early, an error) and forget the requests."""
        for rid in rids:
            self._inboxes.pop(rid, None)
            self._router.close(rid)
            engine.abort(rid)
            engine.release(rid)

    # ---- the reference loop
    def _reference_steps(self, prompt, p, cache, kv_dtype, prefill_chunk, spec):
        if self.tensor_parallel is not None:
            raise TinyLLMError(
                f"cache={cache!r} runs the reference loop on one process; a tensor-parallel LLM "
                f"runs on its engine (cache={ENGINE_CACHE!r})"
            )
        proposer, k = None, 0
        if spec is not None:
            proposer, k = make_proposer(spec, self._drafts), spec.num_draft_tokens
        dtype = self.model.dtype if kv_dtype is None else parse_kv_dtype(kv_dtype)
        return iter_generate(
            self.model,
            self.tokenizer,
            prompt,
            p,
            cache=cache,
            kv_dtype=dtype,
            eos_ids=self.eos_ids,
            prefill_chunk=prefill_chunk,
            proposer=proposer,
            num_draft_tokens=k,
            grammars=self.grammars,
        )

    def _reference_generate(self, prompt, p, cache, kv_dtype, prefill_chunk, spec) -> Generation:
        steps = self._reference_steps(prompt, p, cache, kv_dtype, prefill_chunk, spec)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def info(self) -> dict:
        c = self.config
        from .model.features import idle_expert_parameters, model_features
        from .model.quant_linear import activations, quant_weights, weight_summary

        n_params = sum(p.numel() for p in self.model.parameters())
        n_params += sum(w.shape[0] * w.shape[1] for w in quant_weights(self.model))
        memory = weight_summary(self.model)
        return {
            "path": self.path,
            "format": self.format,
            "architecture": c.architecture,
            "family": c.family,
            "features": model_features(c),
            "parameters": n_params,
            "active_parameters": n_params - idle_expert_parameters(c),  # a token's: all but the experts it skips
            "layers": c.num_layers,
            "heads": c.num_heads,
            "kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "hidden_size": c.hidden_size,
            "vocab_size": c.vocab_size,
            "context_length": c.context_length,
            "rope_theta": c.rope_theta,
            "tied_embeddings": c.tie_word_embeddings,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "weight_types": self.weight_types,
            "weights_in_memory": memory,
            "weight_bytes": sum(m["bytes"] for m in memory.values()),
            **activations(self.model),
            "kv_bytes_per_token": c.kv_bytes_per_token(self.model.dtype.itemsize),  # in the default kv_dtype
            "kv_bytes_per_token_by_kv_dtype": {
                name: c.kv_bytes_per_token(bytes_per_value(dtype)) for name, dtype in KV_DTYPES.items()
            },
            "tokenizer": self.tokenizer.kind,
            "eos_ids": list(self.eos_ids),
        }


def within_context(config: ModelConfig, ctx_size: int | None) -> ModelConfig:
    """The config a model runs under: its trained context, or less (ctx_size)."""
    if ctx_size is None:
        return config
    if isinstance(ctx_size, bool) or not isinstance(ctx_size, int) or not 1 <= ctx_size <= config.context_length:
        raise TinyLLMError(
            f"ctx_size must be an integer from 1 to the model's trained context of {config.context_length}, "
            f"got {ctx_size!r}"
        )
    return dataclasses.replace(config, max_position_embeddings=ctx_size)


class TextStream:
    """The text pieces of one request on an LLM's engine. Closing it (or dropping it, even before the first
    piece) aborts the request and frees its KV blocks."""

    def __init__(self, llm: LLM, engine: Engine, request_id: str):
        self._llm, self._engine, self.request_id = llm, engine, request_id
        self._outputs = llm._outputs(engine, [request_id])
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
            self._llm._close(self._engine, [self.request_id])

    def __del__(self) -> None:
        self.close()
