"""Text to token ids and back, exactly as the model's own tokenizer does it.

The work is done by a Hugging Face `tokenizers.Tokenizer` (`Tokenizer.hf`). From a Hugging Face
folder it is read from tokenizer.json; from a GGUF file it is rebuilt from the metadata (gguf_vocab.py):
the vocabulary, merges and token types, with the pre-tokenizer named by `tokenizer.ggml.pre` (see
pretokenizers.py), or, for a SentencePiece vocabulary, its pieces and scores (spm_gguf.py, which
also decodes such ids, exactly as SentencePiece does). Either way encode/decode below add
only the BOS rule, so all paths behave alike.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import tokenizers
from tokenizers import decoders, processors

from ..errors import TinyLLMError
from .chat_prompt import ChatPrompt, ControlTokens, Placeholders, render_hiding
from .gguf_vocab import byte_level_vocab, sentencepiece_vocab, string_list
from .reasoning import ReasoningFormat, reasoning_format
from .spm_gguf import SpmDecoder

# Token texts that end a turn or the text, found in the vocabulary by their spelling because
# neither GGUF nor tokenizer.json marks them (llama.cpp's end-of-generation list).
END_OF_TURN_TEXTS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "<end_of_utterance>",
    "<|return|>",
    "<|call|>",
)


@dataclass
class Tokenizer:
    hf: tokenizers.Tokenizer = field(repr=False)  # its repr spells out the whole vocabulary
    kind: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_ids: tuple[int, ...]
    add_bos: bool
    chat_template: str | None = field(repr=False)
    # SentencePiece vocabularies decode through this, which the library's decoder cannot match exactly.
    spm_decoder: SpmDecoder | None = field(default=None, repr=False)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The ids that end generation: EOS and every end-of-turn token."""
        ids = set(self.eot_ids)
        if self.eos_id is not None:
            ids.add(self.eos_id)
        return tuple(sorted(ids))

    @property
    def unfinished_char_replacements(self) -> int:
        """U+FFFDs a cut-off character at the end of a decode may show (see detokenizer.py): one per
        byte where decode replaces each bad byte alone, as SentencePiece does."""
        return 3 if self.spm_decoder is not None else 1

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, metadata: dict) -> Tokenizer:
        """From GGUF metadata (llama.cpp's tokenizer.ggml.* keys): byte-level BPE ("gpt2") or
        SentencePiece BPE ("llama")."""
        model = metadata.get("tokenizer.ggml.model")
        if model not in ("gpt2", "llama"):
            raise TinyLLMError(
                f"tokenizer.ggml.model is {model!r}, expected 'gpt2' (byte-level BPE) or 'llama' "
                f"(SentencePiece BPE), the tokenizer kinds tinyllm reads from GGUF"
            )
        tokens = string_list(metadata, "tokenizer.ggml.tokens")
        bos_id = _optional_id(metadata, "tokenizer.ggml.bos_token_id", len(tokens))
        eos_id = _optional_id(metadata, "tokenizer.ggml.eos_token_id", len(tokens))
        if model == "llama":
            hf, spm, kind, default_add_bos = sentencepiece_vocab(metadata, tokens, (bos_id, eos_id))
        else:
            hf, spm, kind, default_add_bos = byte_level_vocab(metadata, tokens, (bos_id, eos_id))
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", default_add_bos))
        if add_bos and bos_id is None:
            raise TinyLLMError(
                "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id "
                "is missing, expected a BOS id to add"
            )
        hf.post_processor = _bos_post_processor(hf, bos_id if add_bos else None)
        return cls(
            hf=hf,
            kind=kind,
            vocab_size=len(tokens),
            bos_id=bos_id,
            eos_id=eos_id,
            eot_ids=_find_eot_ids(hf, ()),
            add_bos=add_bos,
            chat_template=metadata.get("tokenizer.chat_template"),
            spm_decoder=spm,
        )

    @classmethod
    def from_hf_folder(cls, folder: str | os.PathLike) -> Tokenizer:
        """From a Hugging Face model folder: tokenizer.json, plus tokenizer_config.json and
        generation_config.json when present (for special tokens, add_bos and the chat template)."""
        folder = os.fspath(folder)
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            raise TinyLLMError(f"{folder!r} has no tokenizer.json, expected a Hugging Face model folder with one")
        try:
            hf = tokenizers.Tokenizer.from_file(path)
        except Exception as exc:  # the library raises plain Exceptions for a bad file
            raise TinyLLMError(f"{path!r} is not a readable tokenizer.json ({exc})") from None
        config = _read_json(folder, "tokenizer_config.json")
        generation = _read_json(folder, "generation_config.json")
        bos_id = _special_id(hf, config.get("bos_token"), generation.get("bos_token_id"))
        generation_eos = _id_list(generation.get("eos_token_id"))
        eos_id = _special_id(hf, config.get("eos_token"), generation_eos[0] if generation_eos else None)
        add_bos = config.get("add_bos_token")
        if not isinstance(add_bos, bool):  # not stated: whatever tokenizer.json's post-processor does
            ids = hf.encode("").ids
            add_bos = ids[:1] == [bos_id]
        add_bos = add_bos and bos_id is not None
        return cls(
            hf=hf,
            kind=_describe(hf),
            vocab_size=hf.get_vocab_size(with_added_tokens=True),
            bos_id=bos_id,
            eos_id=eos_id,
            eot_ids=_find_eot_ids(hf, generation_eos),
            add_bos=add_bos,
            chat_template=_hf_chat_template(folder, config),
        )

    # ---- use ----------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of text; special-token text in it (e.g. "<|im_start|>") becomes that token.
        BOS comes first only if the model adds one and add_special_tokens is true. A byte with no
        token in the vocabulary (SmolLM2 lacks a few control characters) is dropped, as llama.cpp
        and transformers drop it."""
        if not isinstance(text, str):
            raise TinyLLMError(f"text is a {type(text).__name__}, expected a str")
        # encode_batch releases the GIL while it works (encode does not): other threads keep running.
        ids = self.hf.encode_batch([text], add_special_tokens=False)[0].ids
        if add_special_tokens and self.add_bos:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ids, byte for byte (no space clean-up), so decode(encode(s)) == s whenever
        every byte of s has a token; bytes that do not form whole characters become U+FFFD."""
        ids = self._checked_ids(ids)
        if self.spm_decoder is not None:
            return self.spm_decoder.decode(ids, skip_special_tokens)
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """One token's text; a token holding part of a UTF-8 character shows U+FFFD. A SentencePiece
        piece keeps its leading space ("▁the" is " the"), which a decode of it alone would drop."""
        raw = self.token_bytes(token_id)
        return self.decode([token_id]) if raw is None else raw.decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes | None:
        """A SentencePiece piece's own bytes (a <0xXX> piece is that byte); None for other vocabularies."""
        if self.spm_decoder is None:
            return None
        return self.spm_decoder.token_bytes(self._checked_ids([token_id])[0])

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        variables: dict | None = None,
    ) -> str:
        """The prompt text for a conversation, rendered with the model's own template (with OpenAI-style
        `tools`, see tool_prompt.py, and the template's own `variables`, such as enable_thinking)."""
        rendered, placeholders = self._render(messages, add_generation_prompt, tools, variables)
        return placeholders.restore(rendered)

    def encode_chat(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        variables: dict | None = None,
    ) -> ChatPrompt:
        """The prompt text and ids for a conversation. Only the template's own markers become control tokens:
        a message (or tool) that spells one is encoded as text (chat_prompt.py). No BOS is added beyond the
        template's."""
        rendered, placeholders = self._render(messages, add_generation_prompt, tools, variables)
        return ChatPrompt(placeholders.restore(rendered), self._control.encode_rendered(rendered, placeholders))

    @cached_property
    def reasoning(self) -> ReasoningFormat | None:
        """The format the model reasons in (text/reasoning.py), or None for a model that does not reason."""
        return reasoning_format(self.chat_template, self.hf.token_to_id)

    @cached_property
    def _control(self) -> ControlTokens:
        return ControlTokens(self.hf)

    def _render(self, messages, add_generation_prompt: bool, tools, variables=None) -> tuple[str, Placeholders]:
        if self.chat_template is None:
            raise TinyLLMError(
                f"this {self.kind} tokenizer has no chat template, expected a model whose files include one"
            )
        special = {
            name: self.hf.id_to_token(i)
            for name, i in (("bos_token", self.bos_id), ("eos_token", self.eos_id))
            if i is not None
        }
        control, template = self._control, self.chat_template
        return render_hiding(control, template, messages, add_generation_prompt, special, tools, variables)

    def _checked_ids(self, ids: Sequence[int]) -> list[int]:
        out = []
        for i in ids:
            try:
                i = operator.index(i)
            except TypeError:
                raise TinyLLMError(f"token id {i!r} is not an integer, expected ints") from None
            if not 0 <= i < self.vocab_size:
                raise TinyLLMError(f"token id {i} is out of range, expected 0 <= id < {self.vocab_size}")
            out.append(i)
        return out


# ---- GGUF helpers ------------------------------------------------------------------------


def _optional_id(metadata: dict, key: str, n_tokens: int) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or not 0 <= value < n_tokens:
        raise TinyLLMError(f"GGUF metadata {key} is {value!r}, expected a token id below {n_tokens}")
    return value


def _bos_post_processor(hf: tokenizers.Tokenizer, bos_id: int | None):
    """Make hf.encode(add_special_tokens=True) agree with Tokenizer.encode about BOS."""
    if bos_id is None:
        return None
    bos = hf.id_to_token(bos_id)
    return processors.TemplateProcessing(
        single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
    )


# ---- shared / HF folder helpers ----------------------------------------------------------


def _find_eot_ids(hf: tokenizers.Tokenizer, extra: Sequence[int]) -> tuple[int, ...]:
    found = {t: hf.token_to_id(t) for t in END_OF_TURN_TEXTS}
    found = {t: i for t, i in found.items() if i is not None}
    # gpt-oss (harmony) ends a message with <|end|> but a reply with <|return|> or <|call|>.
    if "<|return|>" in found and "<|call|>" in found:
        found.pop("<|end|>", None)
    return tuple(sorted(set(found.values()) | set(extra)))


def _read_json(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as exc:
        raise TinyLLMError(f"{path!r} is not valid JSON ({exc}), expected a JSON object") from None
    if not isinstance(value, dict):
        raise TinyLLMError(f"{path!r} holds a {type(value).__name__}, expected a JSON object")
    return value


def _id_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _special_id(hf: tokenizers.Tokenizer, token: Any, fallback: int | None) -> int | None:
    """A special token's id from tokenizer_config's text (a string or {"content": ...})."""
    text = token.get("content") if isinstance(token, dict) else token
    token_id = hf.token_to_id(text) if isinstance(text, str) else None
    return token_id if token_id is not None else fallback


def _hf_chat_template(folder: str, config: dict) -> str | None:
    # Newer transformers save the template as its own file.
    path = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _describe(hf: tokenizers.Tokenizer) -> str:
    model = type(hf.model).__name__
    byte_level = isinstance(hf.decoder, decoders.ByteLevel)
    return f"{'byte-level ' if byte_level else ''}{model} (tokenizer.json)"
