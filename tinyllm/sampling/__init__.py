"""The sampling stack: SamplingParams, the logits pipeline, seeded draws.

Order of operations (see filters.py and sampler.py): grammar mask (grammar/constraint.py) -> the
min_tokens hold-back (stop ids at -inf before min_tokens output tokens) -> logit bias ->
repetition penalty (prompt + generated ids) -> presence / frequency penalties (generated ids
only) -> temperature -> top-k -> tail-free -> typical -> top-p -> min-p (or mirostat in place of
these five, mirostat.py) -> inverse-CDF draw with the uniform for (seed, position).
Temperature 0 is greedy: the argmax of the penalised logits, lowest index on ties.

The names load on first use (PEP 562): SamplingParams' field table (params.py) is read by the command line,
which must answer `--help` without importing torch.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "MAX_LOGPROBS": "tinyllm.sampling.params",
    "RequestRng": "tinyllm.sampling.rng",
    "SampleResult": "tinyllm.sampling.sampler",
    "SamplingParams": "tinyllm.sampling.params",
    "StructuredOutput": "tinyllm.grammar.structured",
    "apply_filters": "tinyllm.sampling.filters",
    "apply_penalties": "tinyllm.sampling.filters",
    "apply_temperature": "tinyllm.sampling.filters",
    "min_p_filter": "tinyllm.sampling.filters",
    "process_logits": "tinyllm.sampling.filters",
    "request_rng": "tinyllm.sampling.rng",
    "sample": "tinyllm.sampling.sampler",
    "sample_batch": "tinyllm.sampling.sampler",
    "sampled_entropy": "tinyllm.sampling.sampler",
    "top_k_filter": "tinyllm.sampling.filters",
    "top_p_filter": "tinyllm.sampling.filters",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinyllm.sampling' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
