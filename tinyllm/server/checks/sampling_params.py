"""From an API request to the engine's SamplingParams, one per choice.

Defaults follow OpenAI: temperature 1; without max_tokens a completion gets 16 tokens and a chat
choice may run to the end of the context. A request without a seed gets a fresh random one here, at the
boundary, and the response returns it, so any answer can be reproduced by sending that seed back. Choice i
of a prompt samples with seed + i, so the n choices of one request differ while each stays reproducible.
"""

from __future__ import annotations

import secrets
from dataclasses import fields

from ...errors import TinyLLMError
from ...sampling.logit_bias import check_logit_bias_ids
from ...sampling.params import SamplingParams, names_on
from ...text.stop_automaton import compile_stops
from ..wire.errors import APIError, bad_request
from ..wire.protocol import ChatCompletionRequest, CompletionRequest
from .admission import check_stops

# Fresh seeds stay below 2**31: exact in every JSON parser, and seed + i stays a valid seed.
FRESH_SEED_LIMIT = 2**31
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions
_PARAM_FIELDS = {f.name for f in fields(SamplingParams)}
# SamplingParams field -> the request field that sets it as it is (temperature, top_p, ...: its field table's)
_PLAIN = names_on("openai")
# a field the request spells another way (none yet) -> its request name, for error messages
_WIRE_NAMES = {name: wire for name, wire in _PLAIN.items() if name != wire}


def fresh_seed() -> int:
    return secrets.randbelow(FRESH_SEED_LIMIT)


def _common(req) -> dict:
    if req.stream_options is not None and not req.stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    values = {name: getattr(req, wire) for name, wire in _PLAIN.items()}  # the others below
    values["min_tokens"] = req.min_tokens or None  # vLLM's: stop ids and strings wait for this many tokens
    values.update(penalty_window(req.repeat_last_n))
    values["stop"] = check_stops(req.stop) if req.stop is not None else None
    values["logit_bias"] = _logit_bias(req.logit_bias) if req.logit_bias else None
    # None means "not set": leave SamplingParams' default (which matches OpenAI's) in place.
    return {k: v for k, v in values.items() if v is not None}


def penalty_window(repeat_last_n: int | None) -> dict:
    """llama.cpp's repeat_last_n: -1 the whole sequence, 0 no penalties at all, n the last n tokens."""
    if repeat_last_n is None or repeat_last_n == -1:
        return {}
    if repeat_last_n == 0:
        return {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    if repeat_last_n < 0:
        raise bad_request(
            f"repeat_last_n must be -1 (the whole sequence), 0 (no penalties) or a positive integer, got "
            f"{repeat_last_n}",
            "repeat_last_n",
        )
    return {"penalty_last_n": repeat_last_n}


def _logit_bias(bias: dict[str, float]) -> dict[int, float]:
    """JSON keys are strings: each must spell a token id."""
    ids = {}
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):
            raise bad_request(
                f"logit_bias keys must be token ids written as decimal integers, got {key!r}", "logit_bias"
            )
        ids[int(key)] = value
    return ids


def check_vocab(params: list[SamplingParams], vocab_size: int) -> None:
    """Biased ids must be tokens of the model: checked here so the 400 names logit_bias."""
    try:
        check_logit_bias_ids(params[0].logit_bias, vocab_size)
    except TinyLLMError as exc:
        raise bad_request(str(exc), "logit_bias") from None


def prepare_stops(values: dict) -> None:
    """Build the stop strings' automaton now (in a worker thread), not on the engine thread."""
    if values.get("stop"):
        compile_stops(tuple(dict.fromkeys(values["stop"])))


def chat_params(req: ChatCompletionRequest) -> tuple[dict, dict]:
    """SamplingParams keywords, and the request field each keyword came from (for error messages)."""
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs to be true", "top_logprobs")
    values = _common(req)
    use_completion = req.max_completion_tokens is not None
    values["max_tokens"] = req.max_completion_tokens if use_completion else req.max_tokens
    values["logprobs"] = (req.top_logprobs or 0) if req.logprobs else None
    max_name = "max_completion_tokens" if use_completion else "max_tokens"
    names = {**_WIRE_NAMES, "max_tokens": max_name, "logprobs": "top_logprobs"}
    _check_min_tokens(req.min_tokens, values["max_tokens"], names["max_tokens"])
    return values, names


def _check_min_tokens(min_tokens: int | None, max_tokens: int | None, max_name: str) -> None:
    """Checked here, where the two fields' request names are known."""
    if min_tokens is None:
        return
    if min_tokens < 0:
        raise bad_request(f"min_tokens must be an integer >= 0, got {min_tokens}", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(f"min_tokens ({min_tokens}) must not be more than {max_name} ({max_tokens})", "min_tokens")


def completion_params(req: CompletionRequest) -> tuple[dict, dict]:
    """With echo, max_tokens=0 scores the prompt alone: the engine draws one token that is not returned."""
    values = _common(req)
    values["max_tokens"] = COMPLETION_DEFAULT_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    _check_min_tokens(req.min_tokens, values["max_tokens"], "max_tokens")
    if values["max_tokens"] == 0 and req.echo:
        values["max_tokens"] = 1
    values["logprobs"] = req.logprobs
    wanted = [n for n in (req.prompt_logprobs, req.logprobs if req.echo else None) if n is not None]
    values["prompt_logprobs"] = max(wanted) if wanted else None
    return values, dict(_WIRE_NAMES)


def per_choice(values: dict, names: dict, seed: int, n: int) -> list[SamplingParams]:
    """n SamplingParams, choice i seeded with seed + i; a bad value is a 400 naming the request field."""
    try:
        return [SamplingParams(**values, seed=seed + i) for i in range(n)]
    except TinyLLMError as exc:
        raise _as_api_error(exc, names) from None


def _as_api_error(exc: TinyLLMError, names: dict) -> APIError:
    # SamplingParams' messages start with the field's name ("top_p must be in (0, 1]..."): that is the
    # one place that knows which field failed, so read it from there, and say it as the request did.
    first, _, rest = str(exc).partition(" ")
    if first not in _PARAM_FIELDS:
        return bad_request(str(exc))
    param = names.get(first, first)
    return bad_request(f"{param} {rest}", param)
