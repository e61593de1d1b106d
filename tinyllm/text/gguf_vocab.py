"""The tokenizers rebuilt from a GGUF file's vocabulary, one builder per `tokenizer.ggml.model`.

Each returns (tokenizer without its BOS rule, exact decoder or None, a description, llama.cpp's default
for add_bos): "gpt2" is byte-level BPE with the named pre-tokenizer, "llama" llama.cpp's SentencePiece
vocabulary (spm_gguf.py).
"""

from __future__ import annotations

import tokenizers
from tokenizers import AddedToken, decoders, models

from ..errors import TinyLLMError
from .pretokenizers import PreTokenizerSpec, build_pre_tokenizer, pre_tokenizer_spec, prefix_space_normalizer
from .spm_gguf import (
    CONTROL,
    USER_DEFINED,
    SpmDecoder,
    add_spm_added_tokens,
    spm_special_ids,
    spm_tokenizer,
    spm_vocab_from_metadata,
)


def string_list(metadata: dict, key: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TinyLLMError(f"GGUF metadata {key} is {type(value).__name__}, expected a list of strings")
    return value


def _merge_pair(merge: str) -> tuple[str, str]:
    # Split at the first space after the first character, as llama.cpp does, so a merge whose
    # left part is itself a space still parses.
    cut = merge.find(" ", 1)
    if cut < 0:
        raise TinyLLMError(f"GGUF merge {merge!r} has no space, expected 'left right'")
    return merge[:cut], merge[cut + 1 :]


def _byte_level_bpe(tokens: list[str], merges: list[str], spec: PreTokenizerSpec) -> tokenizers.Tokenizer:
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [_merge_pair(m) for m in merges]
    try:
        model = models.BPE(vocab=vocab, merges=pairs, ignore_merges=spec.ignore_merges)
    except Exception as exc:  # e.g. a merge naming a token that is not in the vocabulary
        raise TinyLLMError(f"the GGUF vocabulary and merges do not form a BPE model ({exc})") from None
    hf = tokenizers.Tokenizer(model)
    hf.pre_tokenizer = build_pre_tokenizer(spec)
    hf.decoder = decoders.ByteLevel()
    return hf


def byte_level_vocab(metadata: dict, tokens: list[str], special_ids: tuple[int | None, ...]):
    """(tokenizer, exact decoder or None, kind, llama.cpp's default add_bos) for a "gpt2" vocabulary."""
    spec = pre_tokenizer_spec(metadata.get("tokenizer.ggml.pre"))
    hf = _byte_level_bpe(tokens, string_list(metadata, "tokenizer.ggml.merges"), spec)
    _add_gguf_added_tokens(hf, tokens, metadata.get("tokenizer.ggml.token_type") or [], special_ids)
    if metadata.get("tokenizer.ggml.add_space_prefix", False):
        hf.normalizer = prefix_space_normalizer()
    return hf, None, f"byte-level BPE (pre-tokenizer: {spec.name})", spec.add_bos


def sentencepiece_vocab(metadata: dict, tokens: list[str], special_ids: tuple[int | None, ...]):
    """(tokenizer, exact decoder, kind, llama.cpp's default add_bos) for a "llama" (SentencePiece) vocabulary."""
    vocab = spm_vocab_from_metadata(metadata, tokens)
    hf = spm_tokenizer(vocab)
    special = spm_special_ids(vocab, special_ids)
    add_spm_added_tokens(hf, vocab, special)
    return hf, SpmDecoder(vocab, special), "SentencePiece BPE (GGUF)", True


def _add_gguf_added_tokens(
    hf: tokenizers.Tokenizer, tokens: list[str], types: list[int], special_ids: tuple[int | None, ...]
) -> None:
    """Control tokens (and BOS/EOS) become special; user-defined ones are matched whole but kept
    as text, as llama.cpp does. Both are found in raw text before any splitting."""
    control = {i for i, t in enumerate(types) if t == CONTROL} | {i for i in special_ids if i is not None}
    user = [i for i, t in enumerate(types) if t == USER_DEFINED and i not in control]
    hf.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in sorted(control)])
    hf.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
