"""LLM: the public entry point — a loaded model, its tokenizer, and generate/stream/chat."""
from __future__ import annotations

import os
from typing import Iterator, Sequence

import torch

from .errors import TinyLLMError
from .generate import iter_generate
from .generation import Generation
from .loading.loader import load
from .sampling.params import SamplingParams
from .speculative.proposer import SpeculativeConfig

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_dtype(value: str | torch.dtype, what: str = "dtype") -> torch.dtype:
    if isinstance(value, torch.dtype) and value in DTYPES.values():
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise TinyLLMError(f"{what} must be one of {', '.join(DTYPES)}, got {value!r}")


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
        return params
    try:
        return SamplingParams(**sampling)
    except TypeError as exc:
        raise TinyLLMError(f"unknown sampling parameter: {exc}") from None
    except ValueError as exc:
        raise TinyLLMError(str(exc)) from None


class LLM:
    """A model ready to generate. `LLM()` loads the default model; `LLM(path)` a .gguf file or HF folder."""

    def __init__(self, model: str | os.PathLike | None = None, *, dtype: str | torch.dtype = "float32",
                 device: str | torch.device = "cpu", weights: str | None = None, quantize: str | None = None):
        """weights: "native" keeps GGUF block formats as blocks, "dequantized" expands them to float (the
        reference); default native on the CPU. quantize: "int8" | "int4" quantizes a float model at load."""
        loaded = load(model, parse_dtype(dtype), device, weights=weights, quantize=quantize)
        self.path, self.format = loaded.path, loaded.format
        self.config, self.model, self.tokenizer = loaded.config, loaded.model, loaded.tokenizer
        self.eos_ids = loaded.eos_ids
        self.weight_types = loaded.weight_types

    @classmethod
    def from_parts(cls, model, tokenizer, eos_ids=None, path: str = "<memory>") -> "LLM":
        """An LLM around a model and tokenizer already in memory (tests, custom models)."""
        llm = cls.__new__(cls)
        llm.path, llm.format = path, "memory"
        llm.config, llm.model, llm.tokenizer = model.config, model, tokenizer
        llm.eos_ids = tuple(tokenizer.stop_ids if eos_ids is None else eos_ids)
        llm.weight_types = {}
        return llm

    def engine(self, **options):
        """A continuous-batching Engine over this model (options: max_num_seqs, max_num_batched_tokens,
        block_size, num_blocks, kv_memory_bytes, kv_dtype, enable_prefix_caching)."""
        from .engine.engine import Engine

        return Engine(self, **options)

    def generate(self, prompt: str | Sequence[int] | list, *, cache="contiguous", kv_dtype="float32",
                 prefill_chunk: int | None = None, speculative=None, params: SamplingParams | None = None,
                 **sampling):
        """One prompt (text or ids) -> Generation; a list of prompts -> list[Generation], run together
        through the continuous-batching engine. `speculative` ("ngram", "draft" or a SpeculativeConfig)
        drafts tokens and verifies them in one forward; the output is the same."""
        p = sampling_params(params, sampling)
        spec = speculative_config(speculative)
        if isinstance(prompt, list) and prompt and all(isinstance(x, (str, list, tuple)) for x in prompt):
            return self.engine(kv_dtype=kv_dtype, speculative=spec, num_blocks=self._blocks_for(prompt, p)).generate(prompt, p)
        return self._run(prompt, p, cache, kv_dtype, prefill_chunk, spec)

    def _blocks_for(self, prompts: list, p: SamplingParams, block_size: int = 16) -> int:
        """KV blocks enough to run every prompt at once (at most the engine's default memory)."""
        context = self.config.context_length
        lengths = [len(x) if not isinstance(x, str) else len(self.tokenizer.encode(x)) for x in prompts]
        total = sum(-(-min(context, n + (p.max_tokens or context)) // block_size) for n in lengths)
        itemsize_bytes = self.config.kv_bytes_per_token(4) * block_size
        return max(1, min(total, (1 << 30) // itemsize_bytes))

    def stream(self, prompt: str | Sequence[int], *, cache="contiguous", kv_dtype="float32",
               prefill_chunk: int | None = None, speculative=None, params: SamplingParams | None = None,
               **sampling) -> Iterator[str]:
        """Yield text pieces as they become final (never text that a stop string later cuts)."""
        p = sampling_params(params, sampling)
        yield from self._steps(prompt, p, cache, kv_dtype, prefill_chunk, speculative_config(speculative))

    def chat(self, messages: list[dict], *, stream: bool = False, **kwargs):
        """Render `messages` with the model's chat template and generate (or stream) the reply."""
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        return self.stream(ids, **kwargs) if stream else self.generate(ids, **kwargs)

    def _steps(self, prompt, p, cache, kv_dtype, prefill_chunk, spec: SpeculativeConfig | None = None):
        proposer, k = None, 0
        if spec is not None:
            from .speculative.factory import make_proposer

            proposer, k = make_proposer(spec, self), spec.num_draft_tokens
        return iter_generate(self.model, self.tokenizer, prompt, p, cache=cache,
                             kv_dtype=parse_dtype(kv_dtype, "kv_dtype"), eos_ids=self.eos_ids,
                             prefill_chunk=prefill_chunk, proposer=proposer, num_draft_tokens=k)

    def _run(self, prompt, p, cache, kv_dtype, prefill_chunk, spec=None) -> Generation:
        steps = self._steps(prompt, p, cache, kv_dtype, prefill_chunk, spec)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def info(self) -> dict:
        c = self.config
        from .model.quant_linear import quant_weights, weight_summary

        n_params = sum(p.numel() for p in self.model.parameters())
        n_params += sum(w.shape[0] * w.shape[1] for w in quant_weights(self.model))
        memory = weight_summary(self.model)
        return {
            "path": self.path, "format": self.format, "architecture": c.architecture,
            "parameters": n_params, "layers": c.num_layers, "heads": c.num_heads, "kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim, "hidden_size": c.hidden_size, "vocab_size": c.vocab_size,
            "context_length": c.context_length, "rope_theta": c.rope_theta,
            "tied_embeddings": c.tie_word_embeddings, "dtype": str(self.model.dtype).removeprefix("torch."),
            "weight_types": self.weight_types, "weights_in_memory": memory,
            "weight_bytes": sum(m["bytes"] for m in memory.values()), "kv_bytes_per_token": c.kv_bytes_per_token(4),
            "tokenizer": self.tokenizer.kind, "eos_ids": list(self.eos_ids),
        }
