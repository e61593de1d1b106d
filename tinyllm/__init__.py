"""tinyllm: an exact, streaming LLM inference engine for Llama-family models, in PyTorch."""

from .cache.kv_cache import KVCache
from .cache.latent_cache import LatentCache
from .config import ModelConfig
from .engine.engine import Engine, EngineConfig
from .errors import TinyLLMError
from .llm import LLM
from .outputs import Generation, RequestOutput, TokenLogprob
from .reference import cache_dims, generate
from .sampling.params import SamplingParams
from .sampling.structured import StructuredOutput
from .speculative.proposer import SpeculativeConfig
from .text.detokenizer import IncrementalDecoder
from .text.stop import StopMatcher

__all__ = [
    "LLM",
    "Engine",
    "EngineConfig",
    "RequestOutput",
    "SpeculativeConfig",
    "Generation",
    "TokenLogprob",
    "SamplingParams",
    "StructuredOutput",
    "KVCache",
    "LatentCache",
    "IncrementalDecoder",
    "StopMatcher",
    "ModelConfig",
    "TinyLLMError",
    "generate",
    "cache_dims",
]
__version__ = "0.1.0"
