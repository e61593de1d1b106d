"""What the command line checks before it loads a model, without importing torch: the paths and files it
names, the flags that go together, and (once the prompt is counted) --max-tokens against the context.
Each failure is a TinyLLMError whose one sentence names the flag as the user typed it."""

from __future__ import annotations

import re
import sys

from .cli_flags import DEFAULT_MAX_TOKENS
from .engine.prompt import check_room as check_context_room
from .errors import TinyLLMError
from .sampling.params import names_on

# SamplingParams' and SpeculativeConfig's field names -> the flags that set them, for the rare message
# that comes from there rather than from the parser
# (structured is left out: four flags set it, and "structured output" is words of its messages)
FLAGS = {
    **{name: flag for name, flag in names_on("flag", by_hand=True).items() if name != "structured"},
    **{n: "--" + n.replace("_", "-") for n in ("num_draft_tokens", "draft_model", "draft_layers", "prefill_chunk")},
    "kv_dtype": "--kv-dtype",
}


def flag_names(message: str) -> str:
    """A library message in the command line's words: top_p -> --top-p."""
    return re.sub(r"\b(" + "|".join(FLAGS) + r")\b", lambda m: FLAGS[m.group(1)], message)


def check_model_path(path: str | None, flag: str = "--model") -> None:
    """The model exists (the default one is installed), as the loader will find it, in the loader's words: a
    path, a name of `tinyllm list`, or a Hugging Face id spelled as one (looked up and fetched at load)."""
    from .loading.model_store import check_model_spec

    try:
        check_model_spec(path)
    except TinyLLMError as exc:
        if flag == "--model":
            raise
        raise TinyLLMError(f"{flag}: {exc}") from None


def check_speculative(args) -> None:
    """--speculative and the draft flags go together as SpeculativeConfig wants them."""
    drafts = [f for f, v in (("--draft-model", args.draft_model), ("--draft-layers", args.draft_layers)) if v]
    if args.speculative != "draft" and drafts:
        raise TinyLLMError(f"{' and '.join(drafts)} need{'s' if len(drafts) == 1 else ''} --speculative draft")
    if args.speculative == "draft" and len(drafts) != 1:
        raise TinyLLMError("--speculative draft needs exactly one of --draft-model (a path) or --draft-layers (N)")
    if args.draft_model is not None:
        check_model_path(args.draft_model, "--draft-model")


def check_room(num_prompt: int, max_tokens: int | None, context: int) -> None:
    """The prompt, and an explicit --max-tokens after it, must fit the context (the server's rule and words)."""
    check_context_room(num_prompt, context, max_tokens=max_tokens, max_tokens_field="--max-tokens")


def max_tokens_of(max_tokens: int | None) -> int:
    """--max-tokens, or the default (which the engine shortens to what the context leaves)."""
    return DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens


def read_prompt(prompt: str) -> str:
    """The prompt argument, or stdin's text for '-'."""
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt:
        raise TinyLLMError("prompt is empty; expected some text to continue")
    return prompt


def read_structured(args) -> str | None:
    """The text of the --json-schema or --grammar file, if one is named."""
    for flag, path in (("--json-schema", args.json_schema), ("--grammar", args.grammar)):
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    return f.read()
            except OSError as exc:
                raise TinyLLMError(f"{flag} file {path!r} cannot be read ({exc.strerror})") from None
            except UnicodeDecodeError:
                raise TinyLLMError(f"{flag} file {path!r} is not UTF-8 text") from None
    return None


def read_text(path: str) -> str:
    """A text file to score, whole and non-empty."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise TinyLLMError(f"text file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TinyLLMError(f"cannot read {path!r} as UTF-8 text: {exc}") from None
    if not text.strip():
        raise TinyLLMError(f"text file {path!r} is empty; expected some text to score")
    return text
