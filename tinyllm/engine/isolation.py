"""Per-request fault isolation in an engine step: one request's sampler row, detokenizer or stop matcher
raising fails that request only; the other requests of the step go on as if it had not been there.

A failed request finishes with status FINISHED_ERROR (finish reason "error") and its blocks go back to the
pool; its output carries the error's text for the caller (the server answers it with a 500 or an error event;
a 400 when the request's own grammar failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ..grammar.constraint import GrammarError
from ..sampling.sampler import SampleResult, sample_batch
from .request import Request

log = logging.getLogger("tinyllm.engine")
T = TypeVar("T")


def _draw(rows, reqs: list[Request]) -> list[SampleResult]:
    return sample_batch(
        rows,
        [r.params for r in reqs],
        [r.prompt_ids for r in reqs],
        [r.output_ids for r in reqs],
        [r.rng for r in reqs],
        [len(r.output_ids) for r in reqs],
        [r.constraint for r in reqs],
        [r.mirostat_mu() for r in reqs],
    )


def draw_rows(rows, reqs: list[Request]) -> tuple[dict[str, list[SampleResult]], dict[str, Exception]]:
    """One token per request from logits rows [B, V], drawn together; if the batch fails, each row is drawn
    alone so only the rows that fail again are lost. Returns results and failures by request id."""
    try:
        return {r.request_id: [d] for r, d in zip(reqs, _draw(rows, reqs))}, {}
    except Exception:
        pass
    results, failures = {}, {}
    for i, req in enumerate(reqs):
        drawn, error = isolated(req, lambda i=i, req=req: _draw(rows[i : i + 1], [req]))  # [1, V]
        if error is None:
            results[req.request_id] = drawn
        else:
            failures[req.request_id] = error
    return results, failures


def isolated(req: Request, work: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """work()'s value, or the exception it raised (logged with the request's id)."""
    try:
        return work(), None
    except GrammarError as exc:  # the request's own grammar: one line, no traceback
        log.warning("request %s: %s", req.request_id, exc)
        return None, exc
    except Exception as exc:
        log.exception("request %s failed while processing its output", req.request_id)
        return None, exc


def describe(error: Exception) -> tuple[str, str | None]:
    """What to tell the caller about a failed request, and the error's kind ("grammar": the request's own
    grammar failed, see grammar/constraint.py; None: the engine's fault)."""
    if isinstance(error, GrammarError):
        return str(error), "grammar"
    return f"the request failed while processing its output ({type(error).__name__}: {error})", None
