"""Ollama's `options` onto the server's sampling: each honoured option becomes the OpenAI request field that
sets the same SamplingParams value; every other option is a 400 naming it unless its value asks for nothing.

Left-out options take the OpenAI routes' defaults (temperature 1, no top-k, top-p or penalties, no length
limit but the context), not Ollama's built-in ones. What the penalties look at follows the OpenAI routes:
repeat_penalty every token of the prompt and the answer, presence and frequency penalty the answer's tokens,
so repeat_last_n is accepted as -1 (all of them), or with any value while no penalty is on.

num_ctx is honoured as the request's context: the prompt and the answer together stay within it (a prompt
that does not fit is a 400; nothing is cut). It cannot be more than the model's context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..checks.sampling_params import per_choice
from ..checks.unsupported import Unsupported, field_table, is_one_of
from ..wire.errors import bad_request

# Ollama's option -> (the OpenAI request field, and SamplingParams field, it sets; the JSON type it must have)
SAMPLING = {
    "temperature": ("temperature", "number"),
    "top_k": ("top_k", "integer"),
    "top_p": ("top_p", "number"),
    "min_p": ("min_p", "number"),
    "repeat_penalty": ("repetition_penalty", "number"),
    "presence_penalty": ("presence_penalty", "number"),
    "frequency_penalty": ("frequency_penalty", "number"),
    "stop": ("stop", "stops"),
}
PARAM_NAMES = {field: f"options.{option}" for option, (field, _) in SAMPLING.items()}
PARAM_NAMES.update(max_tokens="options.num_predict", seed="options.seed")
NO_LIMIT = (-1, -2)  # num_predict: -1 until the context is full, -2 fill the context (the same here)
_NEUTRAL_PENALTIES = {"repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0}


def _any(value: Any, options: dict) -> bool:
    return True


def _without_penalties(value: Any, options: dict) -> bool:
    """repeat_last_n: the whole sequence (-1), or anything while no penalty is on."""
    off = all(options.get(name, neutral) == neutral for name, neutral in _NEUTRAL_PENALTIES.items())
    return off or is_one_of(-1)(value, options)


def _without_mirostat(value: Any, options: dict) -> bool:
    return options.get("mirostat", 0) == 0


# Options accepted only with the values that ask for nothing (sampling this server does not do, and settings of
# Ollama's runner that are fixed when `tinyllm serve` starts).
NEUTRAL: dict[str, Unsupported] = field_table(
    ("typical_p", is_one_of(1, 1.0), "1"),
    ("tfs_z", is_one_of(1, 1.0), "1"),
    ("mirostat", is_one_of(0), "0"),
    ("mirostat_tau", _without_mirostat, "nothing while mirostat is 0"),
    ("mirostat_eta", _without_mirostat, "nothing while mirostat is 0"),
    ("penalize_newline", is_one_of(True), "true (a newline is penalized as any token)"),
    ("repeat_last_n", _without_penalties, "-1 (the penalties look at the whole sequence)"),
    ("num_keep", _any, "any value (nothing is ever cut from the context)"),
    ("numa", is_one_of(False), "false"),
    ("low_vram", is_one_of(False), "false"),
    ("vocab_only", is_one_of(False), "false"),
    ("logits_all", is_one_of(False), "false"),
    ("embedding_only", is_one_of(False), "false"),
    ("use_mlock", is_one_of(False), "false"),
    ("use_mmap", is_one_of(True), "true"),
    ("num_batch", is_one_of(), "nothing (the engine's batch is set when the server starts)"),
    ("num_gpu", is_one_of(), "nothing (the device is chosen when the server starts)"),
    ("main_gpu", is_one_of(), "nothing (the device is chosen when the server starts)"),
    ("num_thread", is_one_of(), "nothing (threads are set when the server starts: tinyllm serve --threads)"),
)


@dataclass(frozen=True)
class Sampling:
    """The OpenAI request fields the options set, and the request's own context (None: the model's)."""

    fields: dict
    num_ctx: int | None = None


def _check_neutral(name: str, value: Any, options: dict) -> None:
    entry = NEUTRAL.get(name)
    if entry is None:
        known = ", ".join([*SAMPLING, "num_predict", "seed", "num_ctx"])
        raise bad_request(
            f"options.{name} is not an option this server knows; it honours {known} "
            f"(and other Ollama options only with values that ask for nothing)",
            f"options.{name}",
        )
    if not entry.is_neutral(value, options):
        raise bad_request(
            f"options.{name} {value!r} is not supported by this server (it would be ignored); "
            f"send {entry.accepted} or leave it out",
            f"options.{name}",
        )


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"options.{name} must be an integer, got {value!r}", f"options.{name}")
    return value


def _typed(name: str, value: Any, kind: str):
    """The option's value as SamplingParams takes it; a 400 for a value of the wrong JSON type."""
    if kind == "integer":
        return _int(name, value)
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_request(f"options.{name} must be a number, got {value!r}", f"options.{name}")
        return float(value)
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value)):
        return value
    raise bad_request(f"options.{name} must be a string or a list of strings, got {value!r}", f"options.{name}")


def _num_predict(value: Any) -> int | None:
    n = _int("num_predict", value)
    if n not in NO_LIMIT and n < 1:
        raise bad_request(
            f"options.num_predict must be -1 (no limit), -2 (fill the context) or a positive integer, got {n}",
            "options.num_predict",
        )
    return None if n in NO_LIMIT else n


def _num_ctx(value: Any, model_context: int) -> int:
    n = _int("num_ctx", value)
    if not 1 <= n <= model_context:
        raise bad_request(
            f"options.num_ctx must be between 1 and the model's context of {model_context} tokens, got {n}",
            "options.num_ctx",
        )
    return n


def sampling_of(options: dict | None, model_context: int, *, generating: bool = True) -> Sampling:
    """The fields `options` set; a 400 naming the first option that is unknown, has a bad value, or asks for
    what this server does not do. Without `generating` (embeddings) no sampling option is accepted."""
    options = {k: v for k, v in (options or {}).items() if v is not None}  # null means "not set"
    fields: dict = {}
    num_ctx = None
    for name, value in options.items():
        if name == "num_ctx":
            num_ctx = _num_ctx(value, model_context)
        elif name in (*SAMPLING, "num_predict", "seed") and not generating:
            raise bad_request(f"options.{name} does nothing for embeddings; leave it out", f"options.{name}")
        elif name in SAMPLING:
            field, kind = SAMPLING[name]
            fields[field] = _typed(name, value, kind)
        elif name == "num_predict":
            fields["max_tokens"] = _num_predict(value)
        elif name == "seed":
            seed = _int(name, value)
            fields["seed"] = None if seed == -1 else seed  # -1: a fresh random seed, as Ollama's
        else:
            _check_neutral(name, value, options)
    if generating:
        # Each value checked by SamplingParams itself, so the rules live in one place; the 400 names the option.
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items() if k != "seed"}
        per_choice({k: v for k, v in values.items() if v is not None}, PARAM_NAMES, fields.get("seed") or 0, 1)
    return Sampling(fields, num_ctx)
