"""SamplingParams: one request's decoding settings, validated and normalised on construction.

Each field is described once, here: its type and default (the dataclass's), its rule (field_rules.py: the range,
the normalising and the error's words), its help, and its name on each front that sets it: the OpenAI request
(`openai`), Ollama's options (`ollama`), the command line (`flag`) and the `llm` plugin (`plugin`). None means the
field is not on that front; a ByHand name means the front maps it with code of its own (another shape on the
wire, a default of the route's); any other name, the front derives the field from this table alone (the request
model's field, the HTTP check, the flag, the plugin's option, Ollama's option). `FIELDS` holds the table.
A new field is declared here and used by the sampler (filters.py); tests/sampling/test_params_surfaces.py then
checks that it reaches SamplingParams from each front it names, and from no other.

Every field is checked in `__post_init__`; a bad value raises TinyLLMError (a ValueError) whose message names the
field and the value. Nothing here imports torch (the command line reads the table for `--help`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinyllm.errors import TinyLLMError
from tinyllm.sampling.field_rules import (
    AtMostMaxTokens,
    Bias,
    Constraint,
    Flag,
    Int,
    Real,
    Rule,
    Strings,
    TokenIds,
    TopK,
)

if TYPE_CHECKING:  # the fields' types only: logit_bias.py imports torch
    from tinyllm.grammar.structured import StructuredOutput
    from tinyllm.sampling.logit_bias import LogitBias

MAX_LOGPROBS = 20
_SEED_LIMIT = 2**63
# Below this temperature sampling is greedy: logits / 1e-5 already put all the mass on the argmax, and
# a smaller divisor only risks float32 overflow (vLLM draws the same line).
GREEDY_TEMPERATURE = 1e-5
# A repetition penalty divides or multiplies logits: outside this range a float32 logit overflows to inf
# or underflows to 0 and the distribution turns to NaN, and no value out there means anything useful.
REPETITION_PENALTY_RANGE = (1e-3, 1e3)
SURFACES = ("openai", "ollama", "flag", "plugin")


class ByHand(str):
    """A field's name on a front that maps it with code of its own, not from the table alone."""


@dataclass(frozen=True)
class FieldSpec:
    """One field on every front: its rule, its help, its name on each surface (None: not there)."""

    rule: Rule
    help: str
    default: Any = None  # the dataclass field's
    openai: str | None = None
    ollama: str | None = None
    flag: str | None = None
    plugin: str | None = None

    def named(self, name: str) -> FieldSpec:
        """`True` on a surface is the field's own name there (`--top-p` for a flag)."""
        own = {"flag": "--" + name.replace("_", "-")}
        return dataclasses.replace(self, **{s: own.get(s, name) for s in SURFACES if getattr(self, s) is True})


def _field(default: Any, rule: Rule, help: str, **names: str | bool | None) -> Any:
    return dataclasses.field(default=default, metadata={"spec": FieldSpec(rule, help, default, **names)})


_EVERYWHERE = dict(openai=True, ollama=True, flag=True, plugin=True)
_OFF = "(default 1: off)"
_TOP_K = "an integer >= 1, or 0 / -1 to disable"
# rules that several fields share
_MASS = Real(lambda v: 0 < v <= 1, "in (0, 1]")
_POSITIVE = Real(lambda v: 0 < v < math.inf, "a finite number > 0")
_PENALTY = Real(lambda v: -2 <= v <= 2, "in [-2, 2]")
_NUM_LOGPROBS = Int(0, MAX_LOGPROBS, f"None or an integer in [0, {MAX_LOGPROBS}]", optional=True)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token. Defaults mean plain sampling at temperature 1."""

    temperature: float = _field(  # below GREEDY_TEMPERATURE (1e-5) = greedy
        1.0, Real(lambda v: 0 <= v < math.inf, "a finite number >= 0"), "0 = greedy, the same text every run",
        **_EVERYWHERE,
    )  # fmt: skip
    top_k: int = _field(  # -1 is normalised to 0
        0, TopK(-1, None, _TOP_K, flag_expected=_TOP_K),
        "sample from the k most likely tokens (default 0: off)", **_EVERYWHERE,
    )  # fmt: skip
    top_p: float = _field(
        1.0, _MASS,
        f"sample from the fewest most likely tokens whose probabilities reach p {_OFF}", **_EVERYWHERE,
    )  # fmt: skip
    typical_p: float = _field(  # sampling/typical.py
        1.0, _MASS,
        f"locally typical sampling: keep the tokens nearest the expected surprise, up to this mass {_OFF}",
        openai=True, ollama=True,
    )  # fmt: skip
    min_p: float = _field(
        0.0, Real(lambda v: 0 <= v <= 1, "in [0, 1]"),
        "drop tokens less likely than min-p times the most likely one (default 0: off)", **_EVERYWHERE,
    )  # fmt: skip
    tfs_z: float = _field(  # sampling/tail_free.py
        1.0, _MASS,
        f"tail-free sampling: cut the tail where the probabilities' second differences reach z {_OFF}",
        openai=True, ollama=True,
    )  # fmt: skip
    mirostat: int = _field(  # sampling/mirostat.py
        0, Int(0, 2, "0 (off), 1 or 2"),
        "mirostat v1 or v2 in place of top-k, tail-free, typical, top-p and min-p (default 0: off)",
        openai=True, ollama=True,
    )  # fmt: skip
    mirostat_tau: float = _field(
        5.0, _POSITIVE,
        "mirostat's target surprise, in bits per token (default 5)", openai=True, ollama=True,
    )  # fmt: skip
    mirostat_eta: float = _field(
        0.1, _POSITIVE,
        "how fast mirostat's mu follows the surprise of the drawn tokens (default 0.1)", openai=True, ollama=True,
    )  # fmt: skip
    repetition_penalty: float = _field(
        1.0, Real(lambda v: REPETITION_PENALTY_RANGE[0] <= v <= REPETITION_PENALTY_RANGE[1],
                  "in [{:g}, {:g}]".format(*REPETITION_PENALTY_RANGE)),
        f"make tokens already in the prompt or the output less likely when > 1 {_OFF}",
        openai=True, ollama="repeat_penalty", flag=True, plugin=True,
    )  # fmt: skip
    presence_penalty: float = _field(
        0.0, _PENALTY,
        "subtract this from the logit of every token already in the output, -2 to 2 (default 0: off)",
        **_EVERYWHERE,
    )  # fmt: skip
    frequency_penalty: float = _field(
        0.0, _PENALTY,
        "subtract this from the logit of each output token times its count, -2 to 2 (default 0: off)",
        **_EVERYWHERE,
    )  # fmt: skip
    penalty_last_n: int | None = _field(  # llama.cpp's repeat_last_n: -1 all, 0 no penalties (server/checks)
        None, Int(1, None, "None or an integer >= 1", optional=True),
        "the penalties look at the sequence's last n tokens (default: all of them)",
        openai=ByHand("repeat_last_n"), ollama="repeat_last_n",
    )  # fmt: skip
    seed: int | None = _field(  # None -> 0 in the library; the server draws a fresh one
        None,
        Int(0, _SEED_LIMIT - 1, "None or an integer in [0, 2**63)", optional=True, flag_expected="in 0..2**63-1"),
        "seed of the random draws; the same seed gives the same text (default 0)",
        openai=ByHand("seed"), ollama=ByHand("seed"), flag=True, plugin=True,
    )  # fmt: skip
    max_tokens: int | None = _field(  # None = until the context is full
        256, Int(1, None, "None or an integer >= 1", optional=True),
        "most tokens to generate (default 256, or what the context leaves)",
        openai=ByHand("max_tokens"), ollama=ByHand("num_predict"), flag=ByHand("--max-tokens"), plugin=True,
    )  # fmt: skip
    min_tokens: int = _field(
        0, AtMostMaxTokens(0, None, "an integer >= 0"),
        "no stop id or stop string ends the output before this many tokens (default 0)",
        openai=ByHand("min_tokens"),
    )  # fmt: skip
    stop: tuple[str, ...] = _field(  # a str or list is normalised to a tuple
        (), Strings(), "end the output before this text, which is not printed",
        openai=ByHand("stop"), ollama="stop", flag=True, plugin=True,
    )  # fmt: skip
    stop_token_ids: tuple[int, ...] = _field(
        (), TokenIds(), "end the output at any of these token ids (default: none)", openai=True
    )
    ignore_eos: bool = _field(False, Flag(), "go on past the end-of-sequence token", openai=True, flag=True)
    logprobs: int | None = _field(  # None = no alternatives
        None, _NUM_LOGPROBS,
        f"each token's logprob, entropy and top-N alternatives, N in 0..{MAX_LOGPROBS} (default: none)",
        openai=ByHand("logprobs"), flag=ByHand("--logprobs"),
    )  # fmt: skip
    prompt_logprobs: int | None = _field(
        None, _NUM_LOGPROBS,
        "the prompt tokens' logprobs with top-N alternatives (default: none)",
        openai=ByHand("prompt_logprobs"),
    )  # fmt: skip
    logit_bias: LogitBias = _field(  # a dict is normalised to sorted (id, bias) pairs
        (), Bias(), "token id -> a bias in [-100, 100] added to its logit (default: none)",
        openai=ByHand("logit_bias"),
    )  # fmt: skip
    reasoning: bool = _field(
        False, Flag(),
        "a model that reasons: its think span is text apart from the answer, and stop strings match the answer only",
    )  # fmt: skip
    structured: StructuredOutput | None = _field(
        None, Constraint(), "the text is JSON, or matches a JSON schema, a regex or a grammar (default: free text)",
        openai=ByHand("response_format"), flag=ByHand("--json-schema"), plugin=ByHand("schema"),
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name, value in _validated_fields(self).items():
            # frozen: normalised values must be written past the dataclass guard
            object.__setattr__(self, name, value)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def uses_mirostat(self) -> bool:
        """Mirostat shapes the draws (greedy takes the argmax, which every mirostat keeps)."""
        return self.mirostat != 0 and not self.is_greedy

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` applied; the copy is validated again."""
        names = {f.name for f in dataclasses.fields(self)}
        for name in changes:
            if name not in names:
                raise TinyLLMError(f"{name} is not a SamplingParams field")
        return dataclasses.replace(self, **changes)


def _validated_fields(p: SamplingParams) -> dict[str, Any]:
    """Every field checked and normalised by its rule, by name, in field order."""
    return {name: spec.rule.check(name, getattr(p, name), p) for name, spec in FIELDS.items()}


# field name -> its FieldSpec, in field order
FIELDS: dict[str, FieldSpec] = {f.name: f.metadata["spec"].named(f.name) for f in dataclasses.fields(SamplingParams)}


def names_on(surface: str, *, by_hand: bool = False) -> dict[str, str]:
    """Field name -> its name on `surface` (one of SURFACES), in field order: the fields that front derives from
    the table, or with `by_hand` every field on it."""
    found = {name: getattr(spec, surface) for name, spec in FIELDS.items() if getattr(spec, surface) is not None}
    return {k: v for k, v in found.items() if by_hand or not isinstance(v, ByHand)}
