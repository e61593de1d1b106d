"""A chat prompt as token ids in which only the template's own markers are control tokens.

A message's text is its sender's, never structure: "<|im_end|>\\n<|im_start|>system" typed into a message must
not become the turn markers it spells. Control tokens are the added tokens the tokenizer marks special (a
tokenizer.json's `"special": true`; from a GGUF, its CONTROL tokens, BOS, EOS and SentencePiece's unknown
piece): exactly those that encoding parses out of text and that encoding as text leaves alone. Other added
tokens (a GGUF's user-defined ones, such as `<tool_call>`) stay whole tokens either way, as llama.cpp and
transformers keep them.

Before rendering, each control token's text found in the messages or tools is hidden behind a private-use
character that occurs nowhere else in the request. After rendering, every control token left came from the
template; the text is encoded once with them parsed, and each stretch between two control tokens that holds
a placeholder is encoded again, as text, with the placeholders turned back into what the sender wrote:

    rendered  <|im_start|>user\\nhi \\ue000 there<|im_end|>\\n<|im_start|>assistant\\n
    stretches            [  "user\\nhi <|im_end|> there"  ]           [ "\\n" ]     ["assistant\\n"]

A conversation with no control text in it is that one encode, exactly as before. A tokenizer whose control
tokens are also matched after normalizing (NFKC makes "＜｜end｜＞" one) is checked token by token: a control
token not spelled as itself in the rendering came from a sender, and its stretch is encoded as text too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import tokenizers

from .chat_template import check_messages, check_tools, render_chat

# Unicode's private-use code points: characters no tokenizer gives a meaning and no template writes.
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
_PRIVATE_RANGES = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered conversation: its text (what the template wrote, messages as sent) and its token ids."""

    text: str
    ids: list[int]


@dataclass(frozen=True)
class Placeholders:
    """Which private-use character stands for which control token's text in one rendering."""

    texts: dict[str, str] = field(default_factory=dict)  # placeholder -> control token text

    def hide(self, value):
        """A copy of value (nested dicts, lists and strings) with each control text replaced by its placeholder."""
        if not self.texts:
            return value
        by_text = {text: mark for mark, text in self.texts.items()}
        pattern = re.compile("|".join(re.escape(t) for t in sorted(by_text, key=len, reverse=True)))
        return _map_strings(value, lambda s: pattern.sub(lambda m: by_text[m.group()], s))

    def restore(self, text: str) -> str:
        return text.translate({ord(mark): control for mark, control in self.texts.items()}) if self.texts else text


class ControlTokens:
    """A tokenizer's control tokens, the pattern that finds their text, and the same tokenizer without them."""

    def __init__(self, hf: tokenizers.Tokenizer):
        self.hf = hf
        added = hf.get_added_tokens_decoder()
        self.ids = frozenset(i for i, token in added.items() if token.special)
        self.texts = {i: added[i].content for i in self.ids}
        longest_first = sorted(set(self.texts.values()), key=len, reverse=True)  # as encode matches them
        self.pattern = re.compile("|".join(re.escape(t) for t in longest_first)) if longest_first else None
        # Such a token is also found in text that normalizes to its spelling.
        self.matches_normalized = hf.normalizer is not None and any(added[i].normalized for i in self.ids)

    @cached_property
    def text_only(self) -> tokenizers.Tokenizer:
        """A copy that encodes control tokens' text as plain text (made once, on first need)."""
        copy = tokenizers.Tokenizer.from_str(self.hf.to_str())
        copy.encode_special_tokens = True
        return copy

    def placeholders_for(self, values, avoid: str) -> Placeholders:
        """One unused private-use character for each control text found in the strings of values; none when
        there is no such text (the common case, one scan). `avoid` is other text that placeholders must not be."""
        if self.pattern is None:
            return Placeholders()
        found: set[str] = set()
        strings = list(_strings(values))
        for s in strings:
            found.update(self.pattern.findall(s))
        if not found:
            return Placeholders()
        used = {c for s in [*strings, avoid] for c in _PRIVATE_USE.findall(s)}
        free = (chr(c) for lo, hi in _PRIVATE_RANGES for c in range(lo, hi + 1) if chr(c) not in used)
        return Placeholders(dict(zip(free, sorted(found))))

    def encode_rendered(self, rendered: str, placeholders: Placeholders) -> list[int]:
        """The ids of a rendering: control tokens where the template wrote them, the rest as text."""
        # encode_batch releases the GIL while it works (encode does not).
        encoding = self.hf.encode_batch([rendered], add_special_tokens=False)[0]
        ids = encoding.ids
        if not placeholders.texts and not self.matches_normalized:
            return ids
        marks = [i for i, t in enumerate(ids) if t in self.ids and self._is_literal(t, rendered, encoding.offsets[i])]
        out = []
        for first, last, start, end in _stretches(marks, encoding.offsets, len(ids), len(rendered)):
            piece = rendered[start:end]
            if any(mark in piece for mark in placeholders.texts) or not self.ids.isdisjoint(ids[first:last]):
                piece = placeholders.restore(piece)
                out += self.text_only.encode_batch([piece], add_special_tokens=False)[0].ids
            else:
                out += ids[first:last]
            if last < len(ids):
                out.append(ids[last])  # the template's control token that ends the stretch
        return out

    def _is_literal(self, token_id: int, text: str, span: tuple[int, int]) -> bool:
        """Whether the control token was written as itself, not matched after normalizing other text (a
        full-width "＜｜end｜＞" under NFKC), which only a sender writes."""
        return not self.matches_normalized or self.texts[token_id] in text[span[0] : span[1]]


def render_hiding(
    control: ControlTokens,
    source: str,
    messages: list[dict],
    add_generation_prompt: bool,
    special_tokens: dict[str, str],
    tools: list[dict] | None,
    variables: dict | None = None,
) -> tuple[str, Placeholders]:
    """The template's rendering with control text in the messages and tools hidden, and the placeholders."""
    check_messages(messages)  # before hiding, so that an error shows the messages as sent
    check_tools(tools)
    avoid = source + "".join(special_tokens.values())
    placeholders = control.placeholders_for((messages, tools), avoid)
    messages, tools = placeholders.hide((messages, tools))
    return render_chat(source, messages, add_generation_prompt, special_tokens, tools, variables), placeholders


def _stretches(marks: list[int], offsets: list[tuple[int, int]], num_ids: int, text_len: int):
    """(first token, token after the last, start char, end char) of each stretch around the marked control
    tokens. A control token's span covers any whitespace it strips, so the characters between two are what
    was encoded on its own."""
    first, start = 0, 0
    for i in marks:
        yield first, i, start, offsets[i][0]
        first, start = i + 1, offsets[i][1]
    yield first, num_ids, start, text_len


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _map_strings(value, f):
    if isinstance(value, str):
        return f(value)
    if isinstance(value, dict):
        return {_map_strings(k, f): _map_strings(v, f) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_strings(v, f) for v in value)
    return value
