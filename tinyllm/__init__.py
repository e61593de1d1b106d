"""tinyllm: an exact, streaming LLM inference engine for Llama-family models, in PyTorch."""
from .cache.kv_cache import KVCache
from .cache.latent_cache import LatentCache
from .config import ModelConfig
from .errors import TinyLLMError
from .generate import cache_dims, generate
from .generation import Generation, TokenLogprob
from .engine.engine import Engine, EngineConfig, RequestOutput
from .llm import LLM
from .sampling.params import SamplingParams
from .text.detokenizer import IncrementalDecoder
from .speculative.proposer import SpeculativeConfig
from .text.stop import StopMatcher

__all__ = ["LLM", "Engine", "EngineConfig", "RequestOutput", "SpeculativeConfig", "Generation", "TokenLogprob", "SamplingParams", "KVCache", "LatentCache", "IncrementalDecoder",
           "StopMatcher", "ModelConfig", "TinyLLMError", "generate", "cache_dims"]
__version__ = "0.1.0"
