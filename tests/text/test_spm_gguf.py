"""SentencePiece vocabularies from GGUF metadata: ids and text equal those of the real SentencePiece model
the metadata was written from, streamed text equals a full decode, bad metadata gets one clear error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.spm_vocab import BYTE, NORMAL, TRAINING_TEXT, USER_DEFINED, adds_space_prefix, spm_metadata, train_spm
from tinyllm.errors import TinyLLMError
from tinyllm.text.detokenizer import IncrementalDecoder
from tinyllm.text.spm_gguf import SpmVocab, decode_bytes_each, spm_merges
from tinyllm.text.tokenizer import Tokenizer

FFFD = "\ufffd"
TEXTS = [
    "Hello world",
    "the quick brown fox jumps over the lazy dog",
    " leading space",
    "   three leading spaces",
    "two  spaces   three    four",
    "trailing spaces   ",
    "new\nline\n\nand blank lines\n",
    "\n starts with a newline",
    "tab\there",
    "Café déjà vu, señor Müller: naïve façade",
    "日本語のテキストと中文文本",
    "한국어 텍스트",  # not in the training text: every character by byte fallback
    "Emoji 😀👍 family 👨‍👩‍👧 flag 🇫🇷",
    "rare ∫ √ Ω ≈ ç and unseen ⊕ ∮ ℵ",
    "def f(x):\n    return x * 2 + 1\n",
    " ",
    "",
]


@pytest.fixture(scope="module", params=[True, False], ids=["space-prefix", "no-space-prefix"])
def pair(request):
    """(SentencePiece model, our tokenizer from its GGUF metadata)."""
    sp = train_spm(add_dummy_prefix=request.param)
    metadata = spm_metadata(sp)
    assert metadata["tokenizer.ggml.add_space_prefix"] is request.param
    return sp, Tokenizer.from_gguf_metadata(metadata)


def text_ids(sp) -> list[int]:
    """The ids of every piece but the control and unknown ones (which SentencePiece decodes to nothing)."""
    return [i for i in range(sp.vocab_size()) if not (sp.IsControl(i) or sp.IsUnknown(i))]


@pytest.mark.parametrize("text", TEXTS)
def test_ids_and_text_equal_sentencepiece(pair, text):
    sp, tok = pair
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == sp.encode(text)
    assert tok.decode(ids) == sp.decode(ids)


def test_the_reference_exercises_byte_fallback_and_merges(pair):
    sp, tok = pair
    pieces = [sp.IdToPiece(i) for i in tok.encode("한국어 the other", add_special_tokens=False)]
    assert "<0xED>" in pieces  # 한 = ED 95 9C has no piece of its own
    assert any(len(p) > 3 and p.startswith("▁") for p in pieces)  # a merged word


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(sorted(set(TRAINING_TEXT)) + list("  \n\t한⊕🙂Ωz")), max_size=40))
def test_random_text_encodes_as_sentencepiece(pair, text):
    sp, tok = pair
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == sp.encode(text)
    assert tok.decode(ids) == sp.decode(ids) == text


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_ids_decode_as_sentencepiece(pair, data):
    """Any ids, invalid UTF-8 from the byte pieces included: SentencePiece keeps a run's valid
    characters and replaces each bad byte alone."""
    sp, tok = pair
    ids = data.draw(st.lists(st.sampled_from(text_ids(sp)), max_size=12))
    assert tok.decode(ids) == sp.decode(ids)


def test_decode_replaces_each_bad_byte_alone():
    assert decode_bytes_each(b"\xca\x9e\xbf\xe1") == "ʞ" + FFFD * 2
    assert decode_bytes_each(b"a\xe2\x82") == "a" + FFFD * 2
    assert decode_bytes_each("日本".encode()) == "日本"


def test_bos_by_default_and_special_tokens(pair):
    sp, tok = pair
    assert tok.add_bos and tok.encode("hello") == [sp.bos_id(), *sp.encode("hello")]
    assert tok.stop_ids == (sp.eos_id(),)
    # Control text in a prompt is the control token (llama.cpp parses it), and the text after it is a
    # new fragment that gets its own prefix space, as llama.cpp gives it.
    ids = tok.encode("hi</s>the", add_special_tokens=False)
    assert ids == sp.encode("hi") + [sp.eos_id()] + sp.encode("the")
    assert tok.decode([sp.bos_id(), *sp.encode("hello")], skip_special_tokens=True) == "hello"
    assert tok.decode([sp.bos_id(), *sp.encode("hello")]) == "<s>hello"


def test_user_defined_pieces_are_matched_whole():
    sp = train_spm(user_defined=("<tool>", "∑∑"))
    tok = Tokenizer.from_gguf_metadata(spm_metadata(sp, user_defined=("<tool>", "∑∑")))
    ids = tok.encode("<tool>∑∑", add_special_tokens=False)
    assert ids == [sp.PieceToId("<tool>"), sp.PieceToId("∑∑")]
    assert tok.decode(ids, skip_special_tokens=True) == "<tool>∑∑"  # user-defined text is text


def test_whitespace_runs_written_with_real_spaces_are_matched_as_sentencepiece_matches_them():
    """Gemma's files: no prefix space, and runs of spaces as user-defined pieces spelled with spaces. (A
    literal "▁" in the text is where llama.cpp, matching those pieces in the raw text, and SentencePiece,
    which cannot tell "▁" from a space, part; we follow llama.cpp, which the files are written for.)"""
    runs = ("▁▁", "▁▁▁", "▁▁▁▁")
    sp = train_spm(add_dummy_prefix=False, user_defined=runs)
    tok = Tokenizer.from_gguf_metadata(spm_metadata(sp, user_defined=runs))
    assert tok.hf.id_to_token(sp.PieceToId("▁▁▁")) == "   "
    for text in ["a   b", "def f(x):\n    return x", "  two", "five     spaces"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == sp.encode(text), text
        assert tok.decode(ids) == sp.decode(ids) == text


def test_padding_pieces_keep_the_ids_and_are_never_produced():
    sp = train_spm()
    tok = Tokenizer.from_gguf_metadata(spm_metadata(sp, n_vocab=sp.vocab_size() + 8))
    assert tok.vocab_size == sp.vocab_size() + 8
    assert tok.encode("[PAD361]", add_special_tokens=False) == sp.encode("[PAD361]")
    # Padding decodes to nothing (as in llama.cpp), not even ending the first piece's space stripping.
    the = sp.encode("the")
    assert tok.decode([361, *the, 362]) == sp.decode(the) == "the"


def test_token_text_and_bytes_keep_the_pieces_space(pair):
    from tinyllm.server.wire.logprobs import TokenTexts

    sp, tok = pair
    the, e2 = sp.PieceToId("▁the"), sp.PieceToId("<0xE2>")
    assert tok.token_text(the) == " the" and tok.token_bytes(the) == b" the"
    assert tok.token_text(e2) == FFFD and tok.token_bytes(e2) == b"\xe2"
    assert tok.token_text(sp.eos_id()) == "</s>"
    # A client joining the logprobs' bytes gets the text back, "⊕" spelled in byte pieces included.
    text = "the ⊕ 한 end"
    texts = TokenTexts(tok)
    joined = b"".join(bytes(texts.get(i)[1]) for i in tok.encode(text, add_special_tokens=False))
    assert joined.decode() == (" " + text if adds_space_prefix(sp) else text)


# ---- streaming ------------------------------------------------------------------------------------


def stream(tok, ids) -> tuple[list[str], str]:
    """Pieces and flush, checking on the way that the text shown never changes later (each running
    concatenation is a prefix of the full decode) and that the decoder's window stays small."""
    whole, shown = tok.decode(ids), ""
    decoder = IncrementalDecoder(tok)
    pieces = []
    for i in ids:
        pieces.append(decoder.push(i))
        shown += pieces[-1]
        assert whole.startswith(shown) and len(decoder.window) <= 7
    return pieces, decoder.flush()


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(sorted(set(TRAINING_TEXT)) + list("  한⊕🙂")), max_size=40))
def test_streamed_text_of_valid_text_is_never_broken(pair, text):
    """Leading "▁" pieces, multi-byte characters spelled in <0xXX> pieces: each piece is final text."""
    _, tok = pair
    pieces, rest = stream(tok, tok.encode(text, add_special_tokens=False))
    assert "".join(pieces) + rest == text
    assert rest == "" and not any(FFFD in p for p in pieces)


def test_streamed_byte_pieces_wait_for_the_whole_character(pair):
    sp, tok = pair
    ids = [sp.PieceToId(f"<0x{b:02X}>") for b in "⊕".encode()] + sp.encode("the")
    pieces, rest = stream(tok, ids)
    assert pieces[:3] == ["", "", "⊕"] and "".join(pieces) + rest == tok.decode(ids)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_streamed_random_ids_equal_the_full_decode(pair, data):
    """Invalid bytes included: after a run of bad bytes the last three U+FFFD (a character cut off after
    3 of its 4 bytes) are held back, since SentencePiece gives one U+FFFD per byte of it."""
    sp, tok = pair
    ids = data.draw(st.lists(st.sampled_from(text_ids(sp)), max_size=30))
    pieces, rest = stream(tok, ids)
    assert "".join(pieces) + rest == tok.decode(ids)


def test_streamed_invalid_bytes_stay_bounded(pair):
    sp, tok = pair
    byte = {b: sp.PieceToId(f"<0x{b:02X}>") for b in range(256)}
    for data in (b"\xff" * 3000, b"\xb3\xfc\xe0\xa4\xb4" * 600, b"\xf0\x9f\x99" * 1000):
        ids = [byte[b] for b in data]
        pieces, rest = stream(tok, ids)
        assert "".join(pieces) + rest == tok.decode(ids)
        assert len(rest) <= 3


# ---- merges and bad metadata ------------------------------------------------------------------------


def test_merges_follow_the_scores_of_the_joined_piece():
    tokens = ["a", "b", "c", "ab", "bc", "abc", "<0x41>"]
    vocab = SpmVocab(tokens, [0, 0, 0, -2.0, -1.0, -3.0, 0], [NORMAL] * 6 + [BYTE], None, True)
    assert spm_merges(vocab) == [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]
    user = SpmVocab(tokens, vocab.scores, [NORMAL] * 5 + [USER_DEFINED, BYTE], None, True)
    assert ("a", "bc") not in spm_merges(user)  # user-defined pieces are matched whole, never merged


def bad(**changes) -> dict:
    metadata = spm_metadata(train_spm())
    for key, value in changes.items():
        metadata[f"tokenizer.ggml.{key}"] = value
    return metadata


@pytest.mark.parametrize(
    "metadata, message",
    [
        (bad(scores=[0.0] * 5), "tokenizer.ggml.scores has 5 entries, expected one per token (360)"),
        (bad(scores=None), "tokenizer.ggml.scores is NoneType, expected a list of numbers"),
        (bad(scores=["x"] * 360), "tokenizer.ggml.scores is list, expected a list of numbers"),
        (bad(token_type=[1] * 3), "tokenizer.ggml.token_type has 3 entries, expected one per token (360)"),
        (bad(unknown_token_id=999), "tokenizer.ggml.unknown_token_id is 999, expected a token id below 360"),
        (bad(model="t5"), "tokenizer.ggml.model is 't5', expected 'gpt2' (byte-level BPE) or 'llama'"),
    ],
)
def test_bad_metadata_gets_one_clear_error(metadata, message):
    with pytest.raises(TinyLLMError) as info:
        Tokenizer.from_gguf_metadata(metadata)
    assert message in str(info.value)
