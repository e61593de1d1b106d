"""Constrained decoding on llguidance: a StructuredOutput compiled against the model's vocabulary, and one
matcher per request that says which tokens may come next.

Terms: `Grammars` owns the grammar engine's view of the vocabulary (built once, in the background when the
server starts) and a small cache of compiled grammars, so a request prepared ahead (the server compiles in
a worker thread) costs the engine thread only a copy. A `Constraint` is one request's matcher. It is a
function of the generated ids: `allowed(history)` brings the matcher to `history` — consuming new tokens,
or rolling back past ones that are no longer there (rejected speculative drafts) — and returns the mask.
So speculative verification (history + drafts[:i]), preemption (the output ids are kept, and so is the
matcher) and the reference loop all get the right state without telling the constraint anything.

Grammar work never runs on the engine thread's critical path: the engine asks for the next masks with
`prefetch` as soon as a token is accepted, a grammar thread computes them (llguidance drops the GIL) while
the model runs everyone's forward, and the scheduler leaves a request out of a step until its masks are
ready (`is_ready`). A slow grammar thus delays only its own request. Each mask is bounded twice: the
matcher's own work limits (`LIMITS`: lexer fuel and Earley items per token) and a wall-clock budget
(`MASK_BUDGET_S`); past either, or when the grammar rejects what it allowed (it gave up), the request fails
alone with a GrammarError.

The stop ids (EOS and end-of-turn) are allowed exactly when the grammar accepts the text so far.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np
import torch
from torch import Tensor

from tinyllm.errors import TinyLLMError
from tinyllm.grammar.structured import StructuredOutput

_CACHE_SIZE = 64  # compiled grammars kept per vocabulary
# JSON is written compactly (', ' and ': ' separators, no free whitespace): free whitespace lets a model
# wander through spaces and newlines forever; a schema's own "x-guidance" options still override this.
_JSON_OPTIONS = {"whitespace_flexible": False}
COMPILE_BUDGET_S = 10.0  # wall-clock time one grammar may take to compile (and give its first mask)
MASK_BUDGET_S = 5.0  # wall-clock time one token's mask may take once its computation has started
_ERROR_CHARS = 300  # of a grammar engine's message in an error (it may quote the client's grammar)


class GrammarError(TinyLLMError):
    """A request's grammar failed: it cannot compile, it gave up during generation, or it ran past its
    budget. The request's own fault: it fails alone (a 400 or an error event in the server)."""


def _limits():
    # llguidance's defaults bound a token's work (lexer fuel 200k, 50k Earley items, rows of 2k items);
    # its messages must not carry the parser's state and the whole grammar.
    return _llguidance().LLParserLimits(verbose_errors=False)


def _llguidance():
    # Imported on first use: unconstrained requests never load the grammar engine.
    import llguidance

    return llguidance


def _short(message: str) -> str:
    text = " ".join(str(message).replace("<non-verbose/>", "").split())
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + f"... ({len(text) - _ERROR_CHARS} more)"


def grammar_text(structured: StructuredOutput) -> str:
    """The llguidance grammar for a StructuredOutput."""
    matcher = _llguidance().LLMatcher
    if structured.kind in ("json_object", "json_schema"):
        return matcher.grammar_from_json_schema(structured.schema_text, defaults=_JSON_OPTIONS)
    if structured.kind == "regex":
        return matcher.grammar_from_regex(structured.spec)
    text = structured.spec
    if "::=" in text:  # GBNF (llama.cpp's grammar format); Lark uses ':'
        from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            text = gbnf_to_lark(text)
        except Exception as exc:  # the converter raises plain exceptions on bad GBNF
            raise GrammarError(f"the grammar cannot be compiled: {_short(exc)}") from None
    return matcher.grammar_from_lark(text)


class Grammars:
    """Compiles StructuredOutputs for one tokenizer and vocabulary; thread-safe. Compiling and masks run
    on threads of its own (`compile_threads`, `mask_threads`), never on the caller's event loop."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: Sequence[int]):
        self.tokenizer, self.vocab_size, self.stop_ids = tokenizer, int(vocab_size), tuple(stop_ids)
        self._lock = threading.Lock()
        self._vocabulary_lock = threading.Lock()
        self._ll_tokenizer = None
        self._compiled: OrderedDict[StructuredOutput, object] = OrderedDict()
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._key_guard = None

    def _pool(self, name: str) -> ThreadPoolExecutor:
        with self._lock:
            if name not in self._pools:
                workers = max(2, min(4, os.cpu_count() or 2))
                self._pools[name] = ThreadPoolExecutor(workers, thread_name_prefix=f"tinyllm-grammar-{name}")
            return self._pools[name]

    def _vocabulary(self):
        with self._vocabulary_lock:
            if self._ll_tokenizer is None:
                llg = _llguidance()
                self._ll_tokenizer = llg.LLTokenizer(
                    self.tokenizer.hf.to_str(), n_vocab=self.vocab_size, eos_token=list(self.stop_ids) or None
                )
            return self._ll_tokenizer

    def warm_up(self) -> Future:
        """Build the grammar engine's token table on a grammar thread now (the server does this at start),
        so the first structured request does not wait for it."""
        return self._pool("compile").submit(self._vocabulary)

    def compile(self, structured: StructuredOutput):
        """The compiled matcher at its start (a template to copy); GrammarError naming the problem. Runs on
        a grammar thread within COMPILE_BUDGET_S; the caller waits (the server calls it off its loop)."""
        with self._lock:
            if structured in self._compiled:
                self._compiled.move_to_end(structured)
                return self._compiled[structured]
        job = self._pool("compile").submit(self._compile_cached, structured)
        try:
            return job.result(timeout=COMPILE_BUDGET_S)
        except FutureTimeout:
            raise GrammarError(
                f"{structured.describe()} took longer than {COMPILE_BUDGET_S:g} s to compile; simplify it"
            ) from None

    def _compile(self, structured: StructuredOutput):
        vocabulary = self._vocabulary()
        grammar = grammar_text(structured)
        llg = _llguidance()
        matcher = llg.LLMatcher(vocabulary, grammar, log_level=0, limits=_limits())  # drops the GIL
        if not matcher.is_error():
            # The first mask finds what compiling alone does not: a language with no sentence at all
            # (`[^\s\S]`) or a first step past the work limits. The template keeps its start state.
            probe = matcher.deep_copy()
            probe.compute_bitmask()
            if probe.is_error():
                error = _short(probe.get_error())
                if "NoExtension" in error:  # llguidance's word for "no token can ever follow"
                    raise GrammarError(f"{structured.describe()} matches no text at all, so nothing can be generated")
                raise GrammarError(
                    f"{structured.describe()} cannot be used: its first token is past the limits ({error})"
                )
        if matcher.is_error():
            raise GrammarError(f"{structured.describe()} cannot be compiled: {_short(matcher.get_error())}")
        return matcher

    def constraint(self, structured: StructuredOutput | None, *, wait: bool = True) -> Constraint | None:
        """A fresh per-request matcher, or None for an unconstrained request. A grammar not compiled yet is
        compiled now (GrammarError if it cannot be), or with `wait=False` on a grammar thread while the
        request waits for its first masks (and fails alone if it cannot be)."""
        if structured is None:
            return None
        with self._lock:
            template = self._compiled.get(structured)
        if template is not None or wait:
            matcher = (template or self.compile(structured)).deep_copy()
        else:
            matcher = self._pool("compile").submit(lambda: self._compile_cached(structured).deep_copy())
        guard = self._guard_state() if structured.kind in ("json_object", "json_schema") else None
        return Constraint(matcher, self.vocab_size, self._pool("mask"), guard)

    def _compile_cached(self, structured: StructuredOutput):
        matcher = self._compile(structured)
        with self._lock:
            self._compiled[structured] = matcher
            while len(self._compiled) > _CACHE_SIZE:
                self._compiled.popitem(last=False)
        return matcher

    def _guard_state(self):
        """A duplicate-key guard for one JSON request (no key twice in one object), or None."""
        try:
            from tinyllm.grammar.json_keys import DuplicateKeyGuard
        except ImportError:
            return None
        with self._lock:
            guard = self._key_guard
        if guard is None:
            vocabulary = self._vocabulary()
            guard = DuplicateKeyGuard([vocabulary.decode_bytes([i]) for i in range(self.vocab_size)])
            with self._lock:
                self._key_guard = guard
        return guard.new_state()


class Constraint:
    """One request's matcher, kept in step with the ids it is asked about (see the module docstring).
    `matcher` is an llguidance LLMatcher (or anything with its consume/rollback/mask methods), or a Future of
    one still compiling; `pool`, when
    given, runs prefetched masks; `guard`, when given, forbids tokens beyond the grammar (a JSON object's
    repeated key)."""

    def __init__(self, matcher, vocab_size: int, pool: ThreadPoolExecutor | None = None, guard=None):
        self._matcher, self.vocab_size, self._pool, self._guard = matcher, vocab_size, pool, guard
        self._consumed: list[int] = []
        self._lock = threading.Lock()  # the matcher: one computation at a time
        self._job: Future | None = None  # the latest prefetch: {history: mask}
        self._job_keys: frozenset = frozenset()
        self._job_started: list[float] = []  # when the latest prefetch began computing (empty: not yet)

    # ---- prefetching (the engine)
    def prefetch(self, histories: Sequence[Sequence[int]]) -> None:
        """Start computing the masks after each of `histories` on a grammar thread (no-op without a pool)."""
        if self._pool is None:
            return
        keys = [tuple(h) for h in histories]
        if self._job is not None and set(keys) <= self._job_keys:
            return
        self._job_started = started = []
        self._job_keys = frozenset(keys)
        self._job = self._pool.submit(self._compute, keys, started)

    def _compute(self, keys: list[tuple], started: list[float]) -> dict[tuple, Tensor]:
        with self._lock:
            started.append(time.monotonic())
            masks: dict[tuple, Tensor] = {}
            for before, key in zip([None, *keys], keys):
                if before in masks and key[:-1] == before and not masks[before][key[-1]]:
                    break  # a draft the grammar forbids: verification never asks past it
                masks[key] = self._mask_now(key)
            return masks

    def is_ready(self) -> bool:
        """Whether the latest prefetched masks are computed (or failed): the request may be sampled."""
        return self._job is None or self._job.done()

    def failure(self) -> Exception | None:
        """Why the latest prefetch failed (a GrammarError when the grammar is at fault), or why it must be
        given up (past MASK_BUDGET_S); None if neither."""
        job, started = self._job, self._job_started
        if job is None:
            return None
        if job.done():
            return job.exception()
        if started and time.monotonic() - started[0] > MASK_BUDGET_S:
            return GrammarError(f"the grammar took longer than {MASK_BUDGET_S:g} s to find the tokens allowed next")
        return None

    def pending(self) -> Future | None:
        """The prefetch still computing, if any (the engine waits on it when nothing else can run)."""
        job = self._job
        return job if job is not None and not job.done() else None

    # ---- masks
    def _sync(self, history: Sequence[int]) -> None:
        if isinstance(self._matcher, Future):  # compiled on a grammar thread: its GrammarError is this request's
            self._matcher = self._matcher.result()
        history, consumed = list(history), self._consumed
        if history[: len(consumed)] == consumed:
            common = len(consumed)
        else:  # the first id where they differ: everything after it is rolled back
            limit = min(len(consumed), len(history))
            common = next((i for i in range(limit) if consumed[i] != history[i]), limit)
        if common < len(self._consumed):
            if not self._matcher.rollback(len(self._consumed) - common):
                raise GrammarError(f"the grammar could not roll back: {_short(self._matcher.get_error())}")
            del self._consumed[common:]
        new = history[common:]
        if new:
            if not self._matcher.consume_tokens(new):
                raise GrammarError(f"the grammar gave up on the generated text: {_short(self._matcher.get_error())}")
            self._consumed += new

    def _mask_now(self, history: Sequence[int]) -> Tensor:
        self._sync(history)
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)  # [ceil(V / 32) * 4]
        if self._matcher.is_error():
            raise GrammarError(f"the grammar gave up on the generated text: {_short(self._matcher.get_error())}")
        mask = np.unpackbits(bits, bitorder="little")[: self.vocab_size].astype(np.bool_)  # [V]
        if self._guard is not None:
            forbidden = list(self._guard.forbidden(history))
            kept = mask[forbidden].copy()
            mask[forbidden] = False
            if not mask.any():  # the schema leaves only a repeated key (its names used up): the grammar decides
                mask[forbidden] = kept
        return torch.from_numpy(mask)  # [V]

    def allowed(self, history: Sequence[int]) -> Tensor:
        """Which tokens may follow `history` (the generated ids so far): bool [V]."""
        key, job = tuple(history), self._job
        if job is not None and key in self._job_keys:
            try:
                mask = job.result(timeout=MASK_BUDGET_S).get(key)
            except FutureTimeout:
                raise GrammarError(
                    f"the grammar took longer than {MASK_BUDGET_S:g} s to find the tokens allowed next"
                ) from None
            if mask is not None:
                return mask
        with self._lock:
            return self._mask_now(history)

    def mask_logits(self, logits: Tensor, history: Sequence[int]) -> Tensor:
        """logits [V] with every token the grammar forbids after `history` at -inf (a new tensor)."""
        allowed = self.allowed(history).to(logits.device)  # [V]
        if allowed.shape[0] != logits.shape[-1]:
            raise RuntimeError(f"the grammar covers {allowed.shape[0]} tokens, the logits {logits.shape[-1]}")
        return logits.masked_fill(~allowed, float("-inf"))  # [V]
