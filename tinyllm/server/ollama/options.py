"""Ollama's `options` onto the server's sampling: each honoured option becomes the OpenAI request field that
sets the same SamplingParams value; a value of the wrong type or out of range is a 400 naming the option.

As Ollama does, an option name it does not know is ignored (and named in the server's log line for the
request), and so are the runner's settings, which `tinyllm serve` fixes when it starts (num_thread, num_gpu,
use_mmap, numa, ...). `num_ctx` is the request's context: the prompt and the answer together stay within it (a
prompt that does not fit is a 400; nothing is cut); above the model's context it is that context (logged).
`repeat_last_n` is the penalties' window (-1 the whole sequence, 0 no penalties, n the last n tokens, prompt
included, as llama.cpp counts them). `mirostat` (0, 1 or 2, with `mirostat_tau` and `mirostat_eta`) and `tfs_z`
are the sampling stack's own (sampling/mirostat.py, sampling/tail_free.py); `penalize_newline` is accepted only
as true, the value that changes nothing here.

Left-out options take the OpenAI routes' defaults (temperature 1, no top-k, top-p or penalties, no length
limit but the context), not Ollama's built-in ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...sampling.params import FIELDS, names_on
from ..checks.sampling_params import penalty_window, per_choice
from ..checks.unsupported import Unsupported, field_table, is_one_of
from ..wire.errors import APIError, bad_request

# Ollama's option -> (the OpenAI request field, and SamplingParams field, it sets; the kind of JSON value it takes),
# from SamplingParams' field table: temperature, top_k, ..., repeat_penalty, repeat_last_n, stop
SAMPLING = {option: (FIELDS[name].openai, FIELDS[name].rule.kind) for name, option in names_on("ollama").items()}
# SamplingParams field -> the option that sets it, for the 400 (num_predict and seed are read below, by hand)
PARAM_NAMES = {name: f"options.{option}" for name, option in names_on("ollama", by_hand=True).items()}
NO_LIMIT = (-1, -2)  # num_predict: -1 until the context is full, -2 fill the context (the same here)
# The runner's settings: fixed when `tinyllm serve` starts, so a request's value changes nothing (as in Ollama,
# where they only matter when a model is loaded).
RUNNER = frozenset(
    {"num_thread", "num_gpu", "main_gpu", "num_batch", "numa", "low_vram", "vocab_only", "use_mmap", "use_mlock",
     "f16_kv", "logits_all", "embedding_only", "num_keep", "num_gqa", "rope_frequency_base", "rope_frequency_scale"}
)  # fmt: skip


# Sampling this server does not do: accepted only with the values that turn it off.
NEUTRAL: dict[str, Unsupported] = field_table(
    ("penalize_newline", is_one_of(True), "true (a newline is penalized as any token)"),
)


@dataclass(frozen=True)
class Sampling:
    """The OpenAI request fields the options set, the request's own context (None: the model's), and what was
    ignored or changed on the way (for the request's log line)."""

    fields: dict
    num_ctx: int | None = None
    notes: tuple[str, ...] = ()


def _check_neutral(name: str, value: Any, options: dict) -> None:
    entry = NEUTRAL[name]
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


def _num_ctx(value: Any, model_context: int, notes: list[str]) -> int:
    n = _int("num_ctx", value)
    if n < 1:
        raise bad_request(f"options.num_ctx must be a positive number of tokens, got {n}", "options.num_ctx")
    if n > model_context:
        notes.append(f"options.num_ctx {n} is more than the model's context length: {model_context} is used")
        return model_context
    return n


def sampling_of(options: dict | None, model_context: int, *, generating: bool = True) -> Sampling:
    """The fields `options` set; a 400 naming the first option with a bad value or one asking for sampling this
    server does not do. Without `generating` (embeddings) no sampling option is accepted."""
    options = {k: v for k, v in (options or {}).items() if v is not None}  # null means "not set"
    fields: dict = {}
    num_ctx, notes, ignored = None, [], []
    for name, value in options.items():
        if name == "num_ctx":
            num_ctx = _num_ctx(value, model_context, notes)
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
        elif name in NEUTRAL:
            _check_neutral(name, value, options)
        else:
            ignored.append(name)
    notes += _ignored_notes(ignored)
    if generating:
        # Each value checked by SamplingParams itself, so the rules live in one place; the 400 names the option.
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items() if k != "seed"}
        values.update(_penalty_window(values.pop("repeat_last_n", None)))
        per_choice({k: v for k, v in values.items() if v is not None}, PARAM_NAMES, fields.get("seed") or 0, 1)
    return Sampling(fields, num_ctx, tuple(notes))


def _ignored_notes(ignored: list[str]) -> list[str]:
    """One log note for the runner's options (set at start-up) and one for names this server does not know."""
    runner = [n for n in ignored if n in RUNNER]
    unknown = [n for n in ignored if n not in RUNNER]
    notes = [f"options {', '.join(runner)} are set when the server starts: ignored"] if runner else []
    if unknown:
        notes.append(f"options {', '.join(unknown)} are not options this server knows: ignored")
    return notes


def _penalty_window(repeat_last_n: int | None) -> dict:
    try:
        return penalty_window(repeat_last_n)
    except APIError as exc:
        message = exc.message.replace("repeat_last_n", "options.repeat_last_n")
        raise bad_request(message, "options.repeat_last_n") from None
