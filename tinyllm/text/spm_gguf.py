"""llama.cpp's SentencePiece vocabulary (`tokenizer.ggml.model == "llama"`) as a `tokenizers.Tokenizer`.

Such a GGUF stores the pieces of a SentencePiece BPE model, each with a score and a type, but no merge
list: SentencePiece encodes a text by starting from its characters and repeatedly joining the adjacent
pair whose joined piece has the highest score. A BPE model whose merges are ranked by that score does
the same. The rest of SentencePiece's behaviour maps onto the library's parts:

- spaces are written "▁", and one is put in front of the text when `add_space_prefix` is set (llama.cpp
  also puts one after every special token, which is what a per-segment normalizer does);
- a character with no piece is spelled by its UTF-8 bytes as the <0xXX> pieces (byte fallback);
- control and user-defined pieces are matched whole in the text before any of this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tokenizers
from tokenizers import AddedToken, decoders, models, normalizers

from ..errors import TinyLLMError

SPACE = "\u2581"  # "▁", SentencePiece's spelling of a space

# GGUF token types (llama.cpp's numbering).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


@dataclass(frozen=True)
class SpmVocab:
    """The pieces of a SentencePiece model as a GGUF stores them, checked against each other."""

    tokens: list[str]
    scores: list[float]
    types: list[int]
    unk_id: int | None
    add_space_prefix: bool

    def __post_init__(self):
        n = len(self.tokens)
        if len(self.scores) != n:
            raise ValueError(f"tokenizer.ggml.scores has {len(self.scores)} entries, expected one per token ({n})")
        if len(self.types) != n:
            raise ValueError(f"tokenizer.ggml.token_type has {len(self.types)} entries, expected one per token ({n})")
        if self.unk_id is not None and not 0 <= self.unk_id < n:
            raise ValueError(f"tokenizer.ggml.unknown_token_id is {self.unk_id}, expected a token id below {n}")

    def is_mergeable(self, token_id: int) -> bool:
        """Whether BPE may produce or use this piece: SentencePiece merges only its ordinary pieces."""
        return self.types[token_id] == NORMAL and not _BYTE_PIECE.fullmatch(self.tokens[token_id])


def spm_vocab_from_metadata(metadata: dict, tokens: list[str]) -> SpmVocab:
    """The SentencePiece fields of GGUF metadata; TinyLLMError naming the first bad one."""
    scores = metadata.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or not all(isinstance(s, (int, float)) for s in scores):
        raise TinyLLMError(
            f"GGUF metadata tokenizer.ggml.scores is {type(scores).__name__}, "
            f"expected a list of numbers (a SentencePiece vocabulary ranks its merges by them)"
        )
    # llama.cpp treats a file without token types as all-normal pieces.
    types = metadata.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))
    if not isinstance(types, list) or not all(isinstance(t, int) for t in types):
        raise TinyLLMError(
            f"GGUF metadata tokenizer.ggml.token_type is {type(types).__name__}, expected a list of integers"
        )
    unk_id = metadata.get("tokenizer.ggml.unknown_token_id")
    if unk_id is not None and not isinstance(unk_id, int):
        raise TinyLLMError(f"GGUF metadata tokenizer.ggml.unknown_token_id is {unk_id!r}, expected a token id")
    add_space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    try:
        return SpmVocab(tokens, [float(s) for s in scores], types, unk_id, add_space_prefix)
    except ValueError as exc:
        raise TinyLLMError(f"GGUF metadata: {exc}") from None


def spm_merges(vocab: SpmVocab) -> list[tuple[str, str]]:
    """Every way to join two mergeable pieces into a third, the highest-scoring result first.

    Ties (the same piece from different splits, or equal scores) are ordered by the result's id, then
    the left part's length; SentencePiece breaks them by position in the text instead. The two part
    only where one piece can be joined two overlapping ways at once (symbols aa, a, aa: "aa"+"a" on the
    left and "a"+"aa" on the right both make "aaa"), which a rank cannot express.
    """
    ids = {t: i for i, t in enumerate(vocab.tokens) if vocab.is_mergeable(i)}
    ranked = []
    for piece, piece_id in ids.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ids and right in ids:
                ranked.append((-vocab.scores[piece_id], piece_id, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def spm_tokenizer(vocab: SpmVocab) -> tokenizers.Tokenizer:
    """The BPE tokenizer (without added tokens) that encodes and decodes as the SentencePiece model."""
    ids = {}
    for i, token in enumerate(vocab.tokens):
        ids.setdefault(token, i)  # a repeated piece keeps its first id, as llama.cpp's lookup does
    unk = vocab.tokens[vocab.unk_id] if vocab.unk_id is not None else None
    try:
        model = models.BPE(vocab=ids, merges=spm_merges(vocab), unk_token=unk, fuse_unk=True, byte_fallback=True)
    except Exception as exc:  # the library raises plain Exceptions
        raise TinyLLMError(f"the GGUF SentencePiece vocabulary does not form a BPE model ({exc})") from None
    hf = tokenizers.Tokenizer(model)
    steps = [normalizers.Prepend(SPACE)] if vocab.add_space_prefix else []
    hf.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPACE)])
    # Fuse joins the pieces before Strip, so only the text's first space (the added prefix) goes.
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    hf.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if vocab.add_space_prefix else []))
    return hf


def spm_special_ids(vocab: SpmVocab, special_ids: tuple[int | None, ...]) -> set[int]:
    """Control and unknown pieces, and the given ones (BOS/EOS): the ids that decode may skip."""
    special = {i for i, t in enumerate(vocab.types) if t in (CONTROL, UNKNOWN)}
    return special | {i for i in special_ids if i is not None}


def add_spm_added_tokens(hf: tokenizers.Tokenizer, vocab: SpmVocab, special: set[int]) -> None:
    """Special pieces become special tokens, user-defined ones plain added tokens: both are found whole
    in the raw text, as llama.cpp finds them, and are never normalized."""
    user = [i for i, t in enumerate(vocab.types) if t == USER_DEFINED and i not in special]
    hf.add_special_tokens([AddedToken(vocab.tokens[i], special=True, normalized=False) for i in sorted(special)])
    hf.add_tokens([AddedToken(vocab.tokens[i], special=False, normalized=False) for i in user])


class SpmDecoder:
    """Ids to text exactly as SentencePiece decodes them.

    The library's byte-fallback decoder turns a whole run of <0xXX> pieces into U+FFFDs when any of its
    bytes is ill-formed; SentencePiece keeps the run's valid characters and replaces each bad byte alone.
    The first text piece loses its leading space when the encoder adds one (`add_space_prefix`); special
    pieces (shown as their text unless skipped) do not count as that first piece, nor as text after it.
    Unused pieces (the converter's "[PAD{i}]" padding) decode to nothing, as llama.cpp decodes them.
    """

    def __init__(self, vocab: SpmVocab, special_ids: set[int]):
        self._bytes = [b"" if t == UNUSED else _piece_bytes(token) for token, t in zip(vocab.tokens, vocab.types)]
        self._is_byte = [_BYTE_PIECE.fullmatch(token) is not None for token in vocab.tokens]
        self._special = frozenset(special_ids)
        self._strip_first = vocab.add_space_prefix

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        out = bytearray()
        strip = self._strip_first
        for i in ids:
            if i in self._special:
                if not skip_special_tokens:
                    out += self._bytes[i]
                continue
            piece = self._bytes[i]
            if not piece:
                continue
            if strip and not self._is_byte[i] and piece.startswith(b" "):
                piece = piece[1:]
            strip = False
            out += piece
        return decode_bytes_each(bytes(out))

    def token_bytes(self, token_id: int) -> bytes:
        """One piece's own bytes, its leading space kept: a <0xXX> piece is its byte."""
        return self._bytes[token_id]


def _piece_bytes(token: str) -> bytes:
    if _BYTE_PIECE.fullmatch(token):
        return bytes([int(token[3:5], 16)])
    return token.replace(SPACE, " ").encode("utf-8")


def decode_bytes_each(data: bytes) -> str:
    """UTF-8 decoding with one U+FFFD per byte that does not begin a well-formed character (Python's
    "replace" gives one per maximal ill-formed run instead). surrogateescape stands each such byte for a
    lone surrogate, which well-formed UTF-8 never decodes to."""
    return data.decode("utf-8", errors="surrogateescape").translate(_ESCAPED_TO_REPLACEMENT)


_ESCAPED_TO_REPLACEMENT = {0xDC00 + b: "\ufffd" for b in range(0x80, 0x100)}
