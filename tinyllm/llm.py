"""LLM: the public entry point — a loaded model, its tokenizer, and generate/stream/chat.

Every request runs on one long-lived Engine that the LLM owns (engine/shared_engine.py: continuous batching,
paged KV cache, prefix sharing, speculative decoding): a single prompt is a one-element batch.
`cache="none"|"contiguous"` (or a cache object) runs the labelled reference loop (tinyllm.reference) instead,
the oracle the engine is tested against. An LLM is not thread-safe; streams of one LLM may be interleaved in
one thread (they share steps).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence

import torch

from .config import parse_dtype
from .distributed.config import ParallelConfig
from .distributed.driver import TensorParallel
from .distributed.worker import ModelSource
from .engine.engine import Engine
from .engine.model_parts import ModelParts
from .engine.prompt import prompt_ids_of
from .engine.shared_engine import SharedEngine
from .errors import TinyLLMError
from .grammar.constraint import Grammars
from .loading.loader import load
from .model.info import model_info
from .outputs import Score
from .reference import ENGINE_CACHE, ReferenceLoop
from .sampling.params import SamplingParams
from .speculative.proposer import SpeculativeConfig
from .text.reasoning import thinking_variables


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


def is_prompt_list(prompt) -> bool:
    """A list of prompts (texts or id lists), as opposed to one prompt given as a list of ids."""
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(x, (str, list, tuple)) for x in prompt)


def is_engine_cache(cache) -> bool:
    return isinstance(cache, str) and cache == ENGINE_CACHE


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
        parallel = ParallelConfig.of(tensor_parallel_size, parallel)
        sharded = parallel.tensor_parallel_size > 1  # the blocks stay to be cut
        loaded = load(model, parse_dtype(dtype), device, weights=weights, quantize=quantize, keep_blocks=sharded)
        self.path, self.format = loaded.path, loaded.format
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.config = loaded.config.within_context(ctx_size)
        self.eos_ids = loaded.eos_ids
        self.weight_types = loaded.weight_types
        source = ModelSource(loaded.path, parse_dtype(dtype), str(device), weights, quantize)
        self._start(parallel, source)

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
        parallel = ParallelConfig.of(tensor_parallel_size, parallel)
        llm = cls.__new__(cls)
        llm.path, llm.format = path, "memory"
        llm.config, llm.model, llm.tokenizer = model.config, model, tokenizer
        llm.eos_ids = tuple(tokenizer.stop_ids if eos_ids is None else eos_ids)
        llm.weight_types = {}
        llm._start(parallel, ModelSource(device=str(model.device), module=model))
        return llm

    def _start(self, parallel: ParallelConfig, source: ModelSource) -> None:
        """Shard the model over its ranks (with tensor parallelism), then make what every engine is built from."""
        self.tensor_parallel = None
        if parallel.tensor_parallel_size > 1:
            self.tensor_parallel = TensorParallel(parallel, self.model, source)
            weakref.finalize(self, self.tensor_parallel.close)  # a dropped LLM stops its workers
        self.grammars = Grammars(self.tokenizer, self.config.vocab_size, self.eos_ids)  # structured outputs
        self.parts = ModelParts(
            self.model, self.tokenizer, self.config, self.eos_ids, self.grammars, self.tensor_parallel
        )
        self._shared = SharedEngine(self.parts)  # generate, stream and scoring run on its engine
        self._reference = ReferenceLoop(self.parts)  # the oracle, for the other cache options

    def close(self) -> None:
        """Stop this LLM's tensor-parallel workers, if any (the LLM can generate no more); idempotent."""
        if getattr(self, "tensor_parallel", None) is not None:
            self.tensor_parallel.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
        p, spec = sampling_params(params, sampling), SpeculativeConfig.of(speculative)
        prompts = prompt if is_prompt_list(prompt) else [prompt]
        if is_engine_cache(cache):
            gens = self._shared.generate(prompts, p, kv_dtype, prefill_chunk, spec)
        else:
            gens = [self._reference.generate(x, p, cache, kv_dtype, prefill_chunk, spec) for x in prompts]
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
        p, spec = sampling_params(params, sampling), SpeculativeConfig.of(speculative)
        if is_engine_cache(cache):
            return self._shared.stream(prompt, p, kv_dtype, prefill_chunk, spec, owner=self)
        return self._reference.steps(prompt, p, cache, kv_dtype, prefill_chunk, spec)

    def chat(self, messages: list[dict], *, stream=False, tools: list[dict] | None = None, thinking=None, **kwargs):
        """Render `messages` (and the tools offered, for templates that list them) with the model's chat
        template and generate (or stream) the reply. Text in the messages is encoded as text, even where it
        spells a control token such as "<|im_end|>": only the template writes turns. A model that reasons thinks
        as its template says unless `thinking` is True or False; the Generation's `reasoning` is the thinking and
        its text the answer (a stream yields the reply as written, markers included)."""
        fmt = self.tokenizer.reasoning
        prompt = self.tokenizer.encode_chat(messages, True, tools, thinking_variables(fmt, thinking))
        if stream:
            return self.stream(prompt.ids, **kwargs)
        if fmt is not None:  # the engine sets the think span apart; stop strings match the answer only
            given = kwargs.get("params")
            kwargs = {**kwargs, "params": given.replace(reasoning=True)} if given else {**kwargs, "reasoning": True}
        return self.generate(prompt.ids, **kwargs)

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
        return self._shared.generate([ids], p, None, None, None)[0].prompt_logprobs

    # ---- embeddings
    def embed(self, texts: str | Sequence[int] | list, *, pooling: str = "mean", normalize: bool = True):
        """Final hidden states (after the final norm) pooled per text, "mean" or "last" token, L2-normalized
        unless normalize=False: a text (or id list) -> float32 [C], a list of them -> [N, C] (embedding.py)."""
        from .embedding import embed

        return embed(self, texts, pooling=pooling, normalize=normalize)

    def info(self) -> dict:
        """What the model is: shape, features, weights in memory, KV cost per token (model/info.py)."""
        source = {"path": self.path, "file_format": self.format, "weight_types": self.weight_types}
        return model_info(self.model, self.config, self.tokenizer, self.eos_ids, **source)
