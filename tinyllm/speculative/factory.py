"""Build a proposer from a SpeculativeConfig for one sequence; draft models come from loading/."""

from __future__ import annotations

from ..errors import TinyLLMError
from .draft_model import DraftModelProposer, self_draft
from .ngram import NgramProposer
from .proposer import SpeculativeConfig

_PROBE = "Hello, world! 123"


class DraftModels:
    """The draft models an engine uses, each loaded once (on the target's device and dtype) and checked to
    share the target's tokenizer."""

    def __init__(self, target, tokenizer):
        self.target, self.tokenizer = target, tokenizer
        self._loaded: dict[str, object] = {}

    def get(self, config: SpeculativeConfig):
        """The draft model: the target's first layers, or a separate model."""
        if config.draft_layers is not None:
            return self_draft(self.target, config.draft_layers)
        if config.draft_model not in self._loaded:
            from ..loading.loader import load

            draft = load(config.draft_model, self.target.dtype, self.target.device)
            if draft.tokenizer.vocab_size != self.tokenizer.vocab_size or draft.tokenizer.encode(
                _PROBE
            ) != self.tokenizer.encode(_PROBE):
                raise TinyLLMError(f"draft model {config.draft_model!r} does not share the target's tokenizer")
            self._loaded[config.draft_model] = draft.model
        return self._loaded[config.draft_model]


def make_proposer(config: SpeculativeConfig, drafts: DraftModels, max_len: int | None = None):
    if config.method == "ngram":
        return NgramProposer(config.max_ngram, config.min_ngram)
    return DraftModelProposer(drafts.get(config), max_len=max_len)
