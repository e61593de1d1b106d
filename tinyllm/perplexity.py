"""Perplexity of a text under a model, scored in windows of a fixed number of tokens.

Terms: the text is encoded once, as a prompt is (BOS first only if the model adds one), into n tokens. Window
k covers tokens [k * stride, min(k * stride + context, n)); windows stop at the first that reaches the end.
A token is scored in the first window that holds it together with at least one token before it, so every
token but the first is scored exactly once: in window k the scored tokens are those at positions
>= max(end of window k - 1, start of window k + 1), and the rest of the window is context only.

    stride == context (default):  [ctx|scored......][ctx|scored......][ctx|scored..]
    stride <  context:            [ctx|scored.........]
                                         [context.....|scored]
                                                [context.....|scored]

The perplexity is exp of the mean negative log-likelihood over all scored tokens; each token's logprob is
the log-softmax of the model's own logits (no sampling settings apply), from the engine's prompt logprobs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import TinyLLMError
from .sampling.params import SamplingParams

DEFAULT_CONTEXT = 512
BATCH_TOKENS = 2048  # window tokens sent to the engine at once: a few windows share each step


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) of the text, of which [first_scored, end) are scored."""

    start: int
    end: int
    first_scored: int

    @property
    def num_scored(self) -> int:
        return self.end - self.first_scored


@dataclass
class WindowScore:
    window: Window
    nll: float  # the sum of the scored tokens' negative logprobs, in nats

    @property
    def mean_nll(self) -> float:
        return self.nll / self.window.num_scored


@dataclass
class PerplexityResult:
    num_tokens: int
    context: int
    stride: int
    windows: list[WindowScore] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def num_scored(self) -> int:
        return sum(w.window.num_scored for w in self.windows)

    @property
    def mean_nll(self) -> float:
        return math.fsum(w.nll for w in self.windows) / self.num_scored

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll)

    def to_json(self) -> dict:
        return {
            "tokens": self.num_tokens,
            "tokens_scored": self.num_scored,
            "context": self.context,
            "stride": self.stride,
            "mean_nll": self.mean_nll,
            "perplexity": self.perplexity,
            "seconds": self.seconds,
            "windows": [
                {
                    "start": w.window.start,
                    "end": w.window.end,
                    "first_scored": w.window.first_scored,
                    "tokens_scored": w.window.num_scored,
                    "nll": w.nll,
                    "mean_nll": w.mean_nll,
                }
                for w in self.windows
            ],
        }


def window_size(context: int | None, model_context: int) -> int:
    """The window length: `context` if given, else min(512, what the model holds). The engine keeps room for
    one new token after a prompt, so a window holds at most model_context - 1 tokens."""
    limit = model_context - 1
    size = min(DEFAULT_CONTEXT, limit) if context is None else context
    if size < 2:
        raise TinyLLMError(f"context must be at least 2 tokens (one of context, one scored), got {size}")
    if size > limit:
        raise TinyLLMError(
            f"context {size} is more than the model can score at once ({limit} tokens: its "
            f"context of {model_context} less one)"
        )
    return size


def make_windows(num_tokens: int, context: int, stride: int) -> list[Window]:
    """The windows over num_tokens tokens (see the module docstring); windows with nothing to score are left
    out (a last window of one token when stride == context)."""
    if not 1 <= stride <= context:
        raise TinyLLMError(f"stride must be between 1 and the context ({context}), got {stride}")
    if num_tokens < 2:
        raise TinyLLMError(f"the text has {num_tokens} token(s); perplexity needs at least 2")
    windows, scored_to = [], 0
    for start in range(0, num_tokens, stride):
        end = min(start + context, num_tokens)
        first = max(scored_to, start + 1)
        if first < end:
            windows.append(Window(start, end, first))
        scored_to = end
        if end == num_tokens:
            break
    return windows


def perplexity(
    llm,
    ids: list[int],
    context: int | None = None,
    stride: int | None = None,
    on_window: Callable[[WindowScore, int], None] | None = None,
    kv_dtype: str | None = None,
) -> PerplexityResult:
    """Score the token ids in windows with llm's engine (its KV cache in kv_dtype, default the model's dtype:
    each window's keys and values are read back as stored); on_window(score, number of windows) is called as
    each window is scored."""
    size = window_size(context, llm.config.context_length)
    step = size if stride is None else stride
    windows = make_windows(len(ids), size, step)
    result = PerplexityResult(len(ids), size, step)
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True, prompt_logprobs=0)
    per_batch = max(1, BATCH_TOKENS // size)
    began = time.perf_counter()
    for i in range(0, len(windows), per_batch):
        batch = windows[i : i + per_batch]
        gens = llm.generate([ids[w.start : w.end] for w in batch], params=params, kv_dtype=kv_dtype)
        for w, gen in zip(batch, gens):
            scored = gen.prompt_logprobs[w.first_scored - w.start :]
            score = WindowScore(w, -math.fsum(lp.logprob for lp in scored))
            result.windows.append(score)
            if on_window is not None:
                on_window(score, len(windows))
    result.seconds = time.perf_counter() - began
    return result
