"""Build a proposer from a SpeculativeConfig for one sequence of an LLM."""
from __future__ import annotations

from ..errors import TinyLLMError
from .draft_model import DraftModelProposer, self_draft
from .ngram import NgramProposer
from .proposer import SpeculativeConfig


def draft_model_for(config: SpeculativeConfig, llm):
    """The draft model: the target's first layers, or a separate model (loaded once per LLM)."""
    if config.draft_layers is not None:
        return self_draft(llm.model, config.draft_layers)
    cached = getattr(llm, "_draft_models", {})
    if config.draft_model not in cached:
        from ..llm import LLM

        draft = LLM(config.draft_model)
        if draft.tokenizer.vocab_size != llm.tokenizer.vocab_size or \
                draft.tokenizer.encode("Hello, world! 123") != llm.tokenizer.encode("Hello, world! 123"):
            raise TinyLLMError(f"draft model {config.draft_model!r} does not share the target's tokenizer")
        cached[config.draft_model] = draft.model
        llm._draft_models = cached
    return cached[config.draft_model]


def make_proposer(config: SpeculativeConfig, llm, max_len: int | None = None):
    if config.method == "ngram":
        return NgramProposer(config.max_ngram, config.min_ngram)
    return DraftModelProposer(draft_model_for(config, llm), max_len=max_len)
