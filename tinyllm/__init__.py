"""tinyllm: an exact, streaming LLM inference engine for Llama-family models, in PyTorch.

The public names load on first use (PEP 562), so that `tinyllm --help` and the command line's user errors
answer without importing torch."""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "LLM": "tinyllm.llm",
    "Engine": "tinyllm.engine.engine",
    "EngineConfig": "tinyllm.engine.engine",
    "RequestOutput": "tinyllm.outputs",
    "SpeculativeConfig": "tinyllm.speculative.proposer",
    "Generation": "tinyllm.outputs",
    "TokenLogprob": "tinyllm.outputs",
    "SamplingParams": "tinyllm.sampling.params",
    "StructuredOutput": "tinyllm.grammar.structured",
    "KVCache": "tinyllm.cache.kv_cache",
    "LatentCache": "tinyllm.cache.latent_cache",
    "IncrementalDecoder": "tinyllm.text.detokenizer",
    "StopMatcher": "tinyllm.text.stop",
    "ModelConfig": "tinyllm.config",
    "TinyLLMError": "tinyllm.errors",
    "generate": "tinyllm.reference",
    "cache_dims": "tinyllm.reference",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinyllm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
