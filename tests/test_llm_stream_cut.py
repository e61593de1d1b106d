"""What a stream promises about characters split across tokens: no piece shows a broken character that a later
piece would mend, and the pieces join to the decode of all the ids; so when max_tokens cuts a character in two,
the last piece of that `length` finish ends in one U+FFFD (the flush emits what is left)."""

import pytest

from helpers.bigram_model import bigram_llama
from tinyllm import LLM

FFFD = "\ufffd"
ANSWER = "a \N{SLIGHTLY SMILING FACE}".encode()  # 'a', ' ', then the four bytes F0 9F 99 82


@pytest.fixture(scope="module")
def answering(smollm_tokenizer):
    """An LLM that answers ANSWER byte token by byte token, then ends, after the prompt [PROMPT]."""
    tok = smollm_tokenizer
    byte_ids = [byte_token(tok, b) for b in ANSWER]
    prompt = byte_token(tok, ord("Q"))
    successors = dict(zip([prompt, *byte_ids[:-1]], byte_ids))
    model = bigram_llama(successors, tok.vocab_size, tok.stop_ids[-1], max_position_embeddings=64)
    with LLM.from_parts(model, tok) as llm:
        yield llm, [prompt]


def byte_token(tok, byte: int) -> int:
    """The id of the byte-level token for one byte (GPT-2's printable spelling of bytes)."""
    spelled = BYTE_CHARS[byte]
    found = tok.hf.token_to_id(spelled)
    assert found is not None, f"no byte token for {byte:#x}"
    return found


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which byte-level BPE vocabularies spell tokens in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return chars


BYTE_CHARS = _byte_chars()


def run(llm, prompt, max_tokens):
    pieces = list(llm.stream(prompt, max_tokens=max_tokens, temperature=0))
    g = llm.generate(prompt, max_tokens=max_tokens, temperature=0)
    return pieces, g


def test_the_whole_answer_never_shows_a_broken_character(answering, smollm_tokenizer):
    llm, prompt = answering
    pieces, g = run(llm, prompt, max_tokens=16)
    assert g.text == "".join(pieces) == ANSWER.decode() and g.finish_reason == "stop"
    assert not any(FFFD in p for p in pieces)


@pytest.mark.parametrize("cut", [3, 4, 5])  # after 1, 2 or 3 of the emoji's 4 bytes
def test_a_cut_inside_a_character_ends_in_one_replacement(answering, smollm_tokenizer, cut):
    llm, prompt = answering
    pieces, g = run(llm, prompt, max_tokens=cut)
    assert g.finish_reason == "length" and len(g.ids) == cut
    assert "".join(pieces) == g.text == smollm_tokenizer.decode(g.ids) == "a " + FFFD
    assert not any(FFFD in p for p in pieces[:-1]) and pieces[-1].endswith(FFFD)


def test_a_cut_between_characters_ends_clean(answering, smollm_tokenizer):
    llm, prompt = answering
    pieces, g = run(llm, prompt, max_tokens=2)
    assert g.finish_reason == "length" and "".join(pieces) == g.text == "a "
