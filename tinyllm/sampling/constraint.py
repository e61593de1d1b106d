"""Constrained decoding on llguidance: a StructuredOutput compiled against the model's vocabulary, and one
matcher per request that says which tokens may come next.

Terms: `Grammars` owns the grammar engine's view of the vocabulary (built once, on first use: ~1 s for a
49k vocabulary) and a small cache of compiled grammars, so a request prepared ahead (the server compiles
in a worker thread) costs the engine thread only a copy. A `Constraint` is one request's matcher. It is a
function of the generated ids: `allowed(history)` first brings the matcher to `history` — consuming new
tokens, or rolling back past ones that are no longer there (rejected speculative drafts) — and then returns
the mask. So speculative verification (history + drafts[:i]), preemption (the output ids are kept, and so
is the matcher) and the reference loop all get the right state without telling the constraint anything.

The stop ids (EOS and end-of-turn) are allowed exactly when the grammar accepts the text so far.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.structured import StructuredOutput

_CACHE_SIZE = 64  # compiled grammars kept per vocabulary
# JSON is written compactly (', ' and ': ' separators, no free whitespace): free whitespace lets a model
# wander through spaces and newlines forever; a schema's own "x-guidance" options still override this.
_JSON_OPTIONS = {"whitespace_flexible": False}


def _llguidance():
    # Imported on first use: unconstrained requests never load the grammar engine.
    import llguidance

    return llguidance


def grammar_text(structured: StructuredOutput) -> str:
    """The llguidance grammar for a StructuredOutput."""
    matcher = _llguidance().LLMatcher
    if structured.kind == "json_object":
        return matcher.grammar_from_json_schema('{"type": "object"}', defaults=_JSON_OPTIONS)
    if structured.kind == "json_schema":
        return matcher.grammar_from_json_schema(structured.spec, defaults=_JSON_OPTIONS)
    if structured.kind == "regex":
        return matcher.grammar_from_regex(structured.spec)
    text = structured.spec
    if "::=" in text:  # GBNF (llama.cpp's grammar format); Lark uses ':'
        from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            text = gbnf_to_lark(text)
        except Exception as exc:  # the converter raises plain exceptions on bad GBNF
            raise TinyLLMError(f"the grammar cannot be compiled: {exc}") from None
    return matcher.grammar_from_lark(text)


class Grammars:
    """Compiles StructuredOutputs for one tokenizer and vocabulary; thread-safe."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: Sequence[int]):
        self.tokenizer, self.vocab_size, self.stop_ids = tokenizer, int(vocab_size), tuple(stop_ids)
        self._lock = threading.Lock()
        self._ll_tokenizer = None
        self._compiled: OrderedDict[StructuredOutput, object] = OrderedDict()

    def _vocabulary(self):
        if self._ll_tokenizer is None:
            llg = _llguidance()
            self._ll_tokenizer = llg.LLTokenizer(
                self.tokenizer.hf.to_str(), n_vocab=self.vocab_size, eos_token=list(self.stop_ids) or None
            )
        return self._ll_tokenizer

    def compile(self, structured: StructuredOutput):
        """The compiled matcher at its start (a template to copy); TinyLLMError naming the problem."""
        with self._lock:
            if structured in self._compiled:
                self._compiled.move_to_end(structured)
                return self._compiled[structured]
            vocabulary = self._vocabulary()
        grammar = grammar_text(structured)  # compiled outside the lock: the engine releases the GIL
        matcher = _llguidance().LLMatcher(vocabulary, grammar, log_level=0)
        if matcher.is_error():
            raise TinyLLMError(f"{structured.describe()} cannot be compiled: {' '.join(matcher.get_error().split())}")
        with self._lock:
            self._compiled[structured] = matcher
            while len(self._compiled) > _CACHE_SIZE:
                self._compiled.popitem(last=False)
        return matcher

    def constraint(self, structured: StructuredOutput | None) -> Constraint | None:
        """A fresh per-request matcher, or None for an unconstrained request."""
        if structured is None:
            return None
        return Constraint(self.compile(structured).deep_copy(), self.vocab_size)


class Constraint:
    """One request's matcher, kept in step with the ids it is asked about (see the module docstring)."""

    def __init__(self, matcher, vocab_size: int):
        self._matcher, self.vocab_size = matcher, vocab_size
        self._consumed: list[int] = []

    def _sync(self, history: Sequence[int]) -> None:
        history, consumed = list(history), self._consumed
        if history[: len(consumed)] == consumed:
            common = len(consumed)
        else:  # the first id where they differ: everything after it is rolled back
            limit = min(len(consumed), len(history))
            common = next((i for i in range(limit) if consumed[i] != history[i]), limit)
        if common < len(self._consumed):
            if not self._matcher.rollback(len(self._consumed) - common):
                raise RuntimeError(f"the grammar matcher could not roll back: {self._matcher.get_error()}")
            del self._consumed[common:]
        new = history[common:]
        if new:
            if not self._matcher.consume_tokens(new):
                raise RuntimeError(f"the grammar rejected generated tokens {new}: {self._matcher.get_error()}")
            self._consumed += new

    def allowed(self, history: Sequence[int]) -> Tensor:
        """Which tokens may follow `history` (the generated ids so far): bool [V]."""
        self._sync(history)
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)  # [ceil(V / 32) * 4]
        mask = np.unpackbits(bits, bitorder="little")[: self.vocab_size]  # [V]
        return torch.from_numpy(mask.astype(np.bool_))  # [V]

    def mask_logits(self, logits: Tensor, history: Sequence[int]) -> Tensor:
        """logits [V] with every token the grammar forbids after `history` at -inf (a new tensor)."""
        allowed = self.allowed(history).to(logits.device)  # [V]
        if allowed.shape[0] != logits.shape[-1]:
            raise RuntimeError(f"the grammar covers {allowed.shape[0]} tokens, the logits {logits.shape[-1]}")
        return logits.masked_fill(~allowed, float("-inf"))  # [V]
