"""IncrementalDecoder against its slow oracle, decode(all ids), on SmolLM2's tokenizer and a byte tokenizer."""

from __future__ import annotations

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import decoders, models, pre_tokenizers

from tinyllm.text.detokenizer import IncrementalDecoder
from tinyllm.text.spm_gguf import decode_bytes_each

FFFD = "\ufffd"
SPECIAL = "<|special|>"


def byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which byte-level BPE vocabularies spell tokens in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return chars


BYTE_CHARS = byte_chars()


def spell(data: bytes) -> str:
    return "".join(BYTE_CHARS[b] for b in data)


# One token for bytes A5 E6, the end of "日" (E6 97 A5) and the start of the next: ids E6, 97, STRADDLER,
# 97, STRADDLER, ... spell "日日日..." with no token boundary between two characters.
STRADDLER = 256
EMPTY = 257  # a special token, which decode skips: an id without bytes


@pytest.fixture(scope="module")
def byte_tok() -> tokenizers.Tokenizer:
    """Byte-level BPE without merges: id b is byte b (any byte, invalid ones too), then STRADDLER and EMPTY."""
    vocab = {spell(bytes([b])): b for b in range(256)} | {spell(b"\xa5\xe6"): STRADDLER}
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([SPECIAL])
    assert tok.token_to_id(SPECIAL) == EMPTY
    return tok


@pytest.fixture(scope="module")
def byte_ids(smollm_tokenizer) -> dict[int, int]:
    """SmolLM2's byte tokens: byte -> id (235 bytes; C0, C1, F5..FF and six control bytes have none)."""
    found = {b: smollm_tokenizer.hf.token_to_id(spell(bytes([b]))) for b in range(256)}
    return {b: i for b, i in found.items() if i is not None}


def stream(tok, ids) -> tuple[list[str], str]:
    decoder = IncrementalDecoder(tok)
    return [decoder.push(i) for i in ids], decoder.flush()


def check_stream(tok, ids) -> list[str]:
    """The streaming invariant: pieces plus flush equal decode(all ids), and each running concatenation
    of pieces is a prefix of it, so no piece ends inside a character or shows text that later changes."""
    pieces, rest = stream(tok, ids)
    whole = tok.decode(list(ids))
    shown = ""
    for piece in pieces:
        shown += piece
        assert whole.startswith(shown), (ids, pieces)
    assert shown + rest == whole, (ids, pieces, rest)
    return pieces


# ---- the worked example and boundaries ------------------------------------------------------------


def test_hand_example_detokenizer(byte_tok):
    decoder = IncrementalDecoder(byte_tok)
    assert decoder.push(0xC3) == ""
    assert decoder.push(0xA9) == "é"
    assert decoder.push(ord("x")) == "x"
    assert decoder.flush() == ""


def test_hand_example_on_smollm_byte_tokens(smollm_tokenizer, byte_ids):
    assert stream(smollm_tokenizer, [byte_ids[0xC3], byte_ids[0xA9], byte_ids[ord("x")]]) == (["", "é", "x"], "")


def test_four_byte_emoji_waits_for_its_last_byte(smollm_tokenizer, byte_ids):
    ids = [byte_ids[b] for b in "🙂".encode()]
    assert stream(smollm_tokenizer, ids) == (["", "", "", "🙂"], "")


def test_genuine_replacement_run_is_emitted_after_three_pushes(byte_tok):
    """A character is at most 4 bytes, so a 4th push that still ends in U+FFFD shows a genuine one:
    everything but the last character is emitted from then on."""
    assert stream(byte_tok, [0xFF] * 6) == (["", "", "", FFFD * 3, FFFD, FFFD], FFFD)


def test_lone_continuation_byte_is_replaced_when_the_next_character_shows_it(byte_tok):
    assert stream(byte_tok, [0xA9, ord("x")]) == (["", FFFD + "x"], "")


def test_cut_off_sequence_becomes_one_replacement_at_flush(byte_tok):
    assert stream(byte_tok, [0xF0, 0x9F, 0x99]) == (["", "", ""], FFFD)


def test_flush_resets(byte_tok):
    decoder = IncrementalDecoder(byte_tok)
    assert [decoder.push(b) for b in b"a\xe2\x82"] == ["a", "", ""]
    assert decoder.flush() == FFFD
    assert decoder.flush() == ""
    # Nothing of the cut-off bytes survives: AC alone is a lone continuation byte, not the end of "€".
    assert [decoder.push(b) for b in b"\xacb"] == ["", FFFD + "b"]
    assert decoder.flush() == ""


def test_context_of_emitted_ids_keeps_leading_spaces():
    """A decoder that drops the first token's leading space (SentencePiece style) decodes each new id
    behind already-emitted ones, so the spaces between words survive."""

    class StripsFirstSpace:
        words = ["▁Hello", "▁big", "ing", "▁world", "!"]

        def decode(self, ids):
            return "".join(self.words[i] for i in ids).replace("▁", " ").removeprefix(" ")

    tok = StripsFirstSpace()
    ids = [0, 1, 2, 3, 4, 1, 3, 3, 1, 2, 2, 4, 3]
    pieces = check_stream(tok, ids)
    assert pieces[:5] == ["Hello", " big", "ing", " world", "!"]
    check_bounded(tok, ids * 100)


def test_rejects_bad_ids_and_tokenizers(byte_tok):
    decoder = IncrementalDecoder(byte_tok)
    for bad in (-1, 1.0, "3", True, None):
        with pytest.raises(ValueError, match="token_id"):
            decoder.push(bad)
    with pytest.raises(ValueError, match="decode"):
        IncrementalDecoder(object())


# ---- the streaming invariant, by property ----------------------------------------------------------

# Every kind of character the tokenizer splits: ASCII, accents, CJK, emoji (4 bytes), and U+FFFD itself.
TEXT = st.text(
    st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from("aé日本🙂👍🏽 \n" + FFFD)), max_size=40
)


@settings(max_examples=150, deadline=None)
@given(text=TEXT)
def test_pieces_concatenate_to_decode_of_encoded_text(smollm_tokenizer, text):
    ids = smollm_tokenizer.encode(text, add_special_tokens=False)
    check_stream(smollm_tokenizer, ids)


@settings(max_examples=150, deadline=None)
@given(text=TEXT)
def test_characters_split_across_byte_tokens(smollm_tokenizer, byte_ids, text):
    data = text.encode()
    ids = [byte_ids[b] for b in data if b in byte_ids]  # the vocabulary misses six control bytes
    pieces = check_stream(smollm_tokenizer, ids)
    if len(ids) == len(data):
        # Valid UTF-8 ends on a whole character: only trailing U+FFFDs, which might have been the
        # start of a longer character until flush said otherwise, are left to flush.
        left = text[len("".join(pieces)) :]
        assert left == FFFD * len(left)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=40))
def test_arbitrary_bytes_invalid_utf8_included(byte_tok, data):
    check_stream(byte_tok, list(data))


@settings(max_examples=150, deadline=None)
@given(ids=st.lists(st.integers(0, 49151), max_size=30))
def test_random_ids_from_the_whole_vocabulary(smollm_tokenizer, ids):
    check_stream(smollm_tokenizer, ids)


BYTE_TOK_IDS = st.one_of(
    st.integers(0, EMPTY),
    st.sampled_from([0x80, 0x97, 0xA5, 0xBF, 0xC3, 0xE6, 0xEF, 0xF0, 0xF4, 0xFF, STRADDLER, EMPTY]),
)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(BYTE_TOK_IDS, max_size=60))
def test_random_mix_of_bytes_straddling_and_empty_tokens(byte_tok, ids):
    """Long enough to trim the window many times, with tokens that cut characters and tokens without bytes."""
    check_stream(byte_tok, ids)


# ---- the window stays bounded ---------------------------------------------------------------------


def check_bounded(tok, ids, max_window=7) -> None:
    """Streams ids asserting the decoder's state stays small, then checks the invariant."""
    decoder = IncrementalDecoder(tok)
    pieces = []
    for i in ids:
        pieces.append(decoder.push(i))
        assert len(decoder.window) <= max_window
    rest = decoder.flush()
    assert "".join(pieces) + rest == tok.decode(list(ids))
    # Text that can no longer change was emitted on the way, not piled up for the flush.
    assert len(rest) <= 1


def test_window_bounded_on_the_replacement_character_token(smollm_tokenizer):
    fffd_id = smollm_tokenizer.hf.token_to_id(spell(FFFD.encode()))
    assert smollm_tokenizer.decode([fffd_id]) == FFFD
    check_bounded(smollm_tokenizer, [fffd_id] * 5000)


def test_window_bounded_on_replacement_character_spelled_in_bytes(smollm_tokenizer, byte_ids):
    check_bounded(smollm_tokenizer, [byte_ids[b] for b in FFFD.encode() * 2000])


def test_window_bounded_on_lone_continuation_bytes(smollm_tokenizer, byte_ids):
    check_bounded(smollm_tokenizer, [byte_ids[0x80]] * 5000)


def test_window_bounded_on_invalid_bytes(byte_tok):
    check_bounded(byte_tok, [0xFF] * 5000)
    check_bounded(byte_tok, [0xC3, 0xFF] * 2500)
    check_bounded(byte_tok, [0xF0, 0x9F, 0x99] * 2000)  # every 4-byte character cut off by the next


def test_window_bounded_when_no_token_boundary_falls_between_characters(byte_tok):
    ids = [0xE6] + [0x97, STRADDLER] * 2500
    assert byte_tok.decode(ids[:5]) == "日日" + FFFD
    check_bounded(byte_tok, ids)


def test_window_bounded_on_tokens_without_bytes_behind_an_unfinished_character(byte_tok):
    check_bounded(byte_tok, [0xE2] + [EMPTY] * 5000 + [0x82, 0xAC])


# ---- a Llama-2-style decoder: first space dropped, byte fallback ---------------------------------

WORDS = ["▁Hello", "▁world", "ing", "▁", "a", "▁a"]
WORD_IDS = {w: 256 + i for i, w in enumerate(WORDS)}  # after the 256 byte tokens


@pytest.fixture(scope="module")
def fallback_tok() -> tokenizers.Tokenizer:
    """SentencePiece-style BPE: ids 0..255 are the byte tokens <0x00>..<0xFF>, then WORDS. Its decoder
    drops the text's first space and decodes a run of byte tokens as one group, one U+FFFD per byte
    if the group is not valid UTF-8, so a character is only final once its group is complete."""
    vocab = {f"<0x{b:02X}>": b for b in range(256)} | WORD_IDS
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tok


def fallback_ids(parts: list[int | str]) -> list[int]:
    """Word ids as they are, characters as the byte tokens of their UTF-8."""
    return [i for part in parts for i in ([part] if isinstance(part, int) else list(part.encode()))]


def test_byte_fallback_waits_for_the_whole_group(fallback_tok):
    assert fallback_tok.decode([0xE2, 0x82]) == FFFD * 2  # not one U+FFFD, as byte-level gives
    assert stream(fallback_tok, fallback_ids(["é", WORD_IDS["▁Hello"], "🙂", "€"])) == (
        ["", "é", " Hello", "", "", "", "🙂", "", "", "€"],
        "",
    )


def test_a_lone_space_token_is_not_taken_for_an_empty_one(fallback_tok):
    space, hello = WORD_IDS["▁"], WORD_IDS["▁Hello"]
    assert fallback_tok.decode([space]) == ""
    assert stream(fallback_tok, [space, space, hello]) == (["", " ", " Hello"], "")


FALLBACK_PARTS = st.lists(
    st.one_of(
        st.sampled_from(list(WORD_IDS.values())),
        st.characters(exclude_categories=["Cs"], exclude_characters=FFFD),
        st.sampled_from("é日🙂"),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(parts=FALLBACK_PARTS)
def test_byte_fallback_decoder_on_valid_text(fallback_tok, parts):
    """Exact on valid UTF-8 without U+FFFD itself; a byte-fallback decoder makes a whole run of byte
    tokens U+FFFDs until its last character completes, which no bounded decoder can follow in general."""
    ids = fallback_ids(parts)
    check_stream(fallback_tok, ids)
    check_bounded(fallback_tok, ids)


# ---- a decoder that replaces each bad byte alone (SentencePiece's rule) ---------------------------


class EachByte:
    """Ids are bytes; a cut-off character decodes to one U+FFFD per byte, so up to 3 may change."""

    unfinished_char_replacements = 3

    def decode(self, ids):
        return decode_bytes_each(bytes(ids))


def test_held_back_replacements_wait_for_a_character_behind_bad_bytes():
    ids = list(b"\xb3\xfc\xe0\xa4\xb4")  # two bad bytes, then ऴ
    assert EachByte().decode(ids[:4]) == FFFD * 4
    assert stream(EachByte(), ids) == (["", "", "", FFFD, FFFD + "ऴ"], "")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_each_byte_decoder_on_arbitrary_bytes(data):
    check_stream(EachByte(), list(data))
    decoder = IncrementalDecoder(EachByte())
    for b in data:
        decoder.push(b)
        assert len(decoder.window) <= 7
    assert len(decoder.flush()) <= 3


@pytest.mark.parametrize("held", [0, 4, "3"])
def test_rejects_a_bad_held_back_count(held):
    class Bad(EachByte):
        unfinished_char_replacements = held

    with pytest.raises(ValueError, match="unfinished_char_replacements"):
        IncrementalDecoder(Bad())
