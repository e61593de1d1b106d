"""The reasoning splitter against whole-text answers: Qwen3's shapes (opened by the reply, opened by the prompt,
none, cut inside), a marker split across pieces, a partial marker at the end; and streamed pieces equal one push
whatever the cut points (hypothesis). Which models reason: the template's switch and the markers in the vocabulary."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinyllm.text.reasoning import FORMATS, ReasoningSplitter, opens_in_prompt, reasoning_format

THINK = FORMATS[0]


def split_pieces(pieces, in_reasoning=False):
    s = ReasoningSplitter(THINK, in_reasoning)
    reasoning, answer = [], []
    for p in [*(s.push(p) for p in pieces), s.flush()]:
        assert THINK.close not in p.reasoning  # the span ends at the first close marker
        reasoning.append(p.reasoning)
        answer.append(p.answer)
    return "".join(reasoning), "".join(answer)


@pytest.mark.parametrize(
    "text, in_reasoning, expected",
    [
        ("<think>\nfirst, 2+2\n</think>\n\nIt is 4.", False, ("first, 2+2", "It is 4.")),
        ("\n<think>\nhm\n\n</think>\n\nok\n", False, ("hm", "ok\n")),
        ("It is 4.", False, ("", "It is 4.")),  # no span: all answer
        ("  <thin", False, ("", "  <thin")),  # a partial open marker at the end is answer text
        ("<think>\nstill thinking, cut by max_tokens", False, ("still thinking, cut by max_tokens", "")),
        ("thinking a </th", False, ("", "thinking a </th")),
        ("so 4\n</th", True, ("so 4\n</th", "")),  # a partial close marker at the end is reasoning text
        ("so 4\n</think>\n\n4", True, ("so 4", "4")),  # the prompt opened the span
        ("<think>\n\n</think>\n\nhi", False, ("", "hi")),
        ("a < b </think>x", True, ("a < b ", "x")),
    ],
)
def test_whole_texts_split_as_qwen3_writes_them(text, in_reasoning, expected):
    assert split_pieces([text], in_reasoning) == expected


def test_a_marker_split_across_pieces_is_held_until_decided():
    s = ReasoningSplitter(THINK)
    assert s.push("<th") == ("", "")
    assert s.push("ink>\nwhy") == ("why", "")
    assert s.push(" not\n</") == (" not", "")  # the newline and "</" may be the format's
    assert s.push("think") == ("", "")
    assert s.push(">\n") == ("", "")
    assert s.push("\nyes") == ("", "yes")
    assert s.flush() == ("", "")


@given(
    st.text(alphabet="ab<>/thinkx\n ", max_size=40),
    st.sampled_from(["", "<think>\n", " <think>", "<think>\n\n</think>\n\n"]),
    st.lists(st.integers(0, 60), max_size=8),
    st.booleans(),
)
def test_streamed_pieces_equal_one_push(body, head, cuts, in_reasoning):
    text = head + body
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    assert split_pieces(pieces, in_reasoning) == split_pieces([text], in_reasoning)


QWEN3_LIKE = "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"


@pytest.mark.parametrize(
    "template, vocab, reasons",
    [
        (QWEN3_LIKE, {"<think>": 5, "</think>": 6}, True),
        (QWEN3_LIKE, {"<think>": 5}, False),  # no close marker in the vocabulary
        ("{{ messages }}", {"<think>": 5, "</think>": 6}, False),  # the template has no switch
        (None, {"<think>": 5, "</think>": 6}, False),
    ],
)
def test_a_model_reasons_when_its_template_has_the_switch_and_its_vocab_the_markers(template, vocab, reasons):
    assert (reasoning_format(template, vocab.get) is THINK) is reasons


@pytest.mark.parametrize(
    "prompt, opened",
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<|im_start|>assistant\n", False),
        ("user wrote <think> then more", False),
    ],
)
def test_a_prompt_that_ends_in_an_open_span_starts_the_reply_in_it(prompt, opened):
    assert opens_in_prompt(THINK, prompt) is opened


@pytest.mark.parametrize("cut", [3, 10, 40])
def test_the_output_stream_sets_the_span_apart_before_its_stop_strings(tmp_path, cut):
    from helpers.reasoning_model import write_reasoning_tokenizer
    from tinyllm.outputs import TokenLogprob
    from tinyllm.text.output_stream import OutputStream
    from tinyllm.text.tokenizer import Tokenizer

    write_reasoning_tokenizer(str(tmp_path))
    tok = Tokenizer.from_hf_folder(tmp_path)
    reply = "<think>\nwhy 4? two and two\n</think>\n\nIt is two."
    ids = tok.encode(reply, add_special_tokens=False)[:cut]
    out = OutputStream.create(tok, ["two"], ReasoningSplitter(THINK))
    streamed = [out.add(i, TokenLogprob(i, 0.0)) for i in ids if not out.stopped]
    streamed.append(out.finish())
    whole_reasoning, whole_answer = split_pieces([tok.decode(ids)])
    assert out.reasoning == (whole_reasoning or None) and out.take_reasoning() == whole_reasoning
    assert "".join(streamed) == out.text == whole_answer.split("two")[0]  # "two" in the thinking stops nothing
    num_span = len(tok.encode(reply[: reply.index("</think>") + 8], add_special_tokens=False))
    assert out.num_reasoning_tokens == min(cut, num_span)
