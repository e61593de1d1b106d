"""The sampling stack: SamplingParams, the logits pipeline, seeded draws.

Order of operations (see filters.py and sampler.py): grammar mask (grammar/constraint.py) -> the
min_tokens hold-back (stop ids at -inf before min_tokens output tokens) -> logit bias ->
repetition penalty (prompt + generated ids) -> presence / frequency penalties (generated ids
only) -> temperature -> top-k -> tail-free -> typical -> top-p -> min-p (or mirostat in place of
these five, mirostat.py) -> inverse-CDF draw with the uniform for (seed, position).
Temperature 0 is greedy: the argmax of the penalised logits, lowest index on ties.
"""

from tinyllm.grammar.structured import StructuredOutput
from tinyllm.sampling.filters import (
    apply_filters,
    apply_penalties,
    apply_temperature,
    min_p_filter,
    process_logits,
    top_k_filter,
    top_p_filter,
)
from tinyllm.sampling.params import MAX_LOGPROBS, SamplingParams
from tinyllm.sampling.rng import RequestRng, request_rng
from tinyllm.sampling.sampler import SampleResult, sample, sample_batch, sampled_entropy

__all__ = [
    "MAX_LOGPROBS",
    "RequestRng",
    "SampleResult",
    "SamplingParams",
    "StructuredOutput",
    "apply_filters",
    "apply_penalties",
    "apply_temperature",
    "min_p_filter",
    "process_logits",
    "request_rng",
    "sample",
    "sample_batch",
    "sampled_entropy",
    "top_k_filter",
    "top_p_filter",
]
