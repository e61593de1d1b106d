"""`tinyllm chat` with a model that reasons (a tiny scripted model with Qwen3's markers and template): the thinking
is shown before the answer, dimmed on a terminal, hidden with --hide-thinking, and only the answer joins the
conversation; LLM.chat's Generation holds the thinking apart from the answer."""

from types import SimpleNamespace

import pytest

from helpers.reasoning_model import CHAT, scripted_llm, thinking_llm, write_reasoning_tokenizer
from tinyllm import SamplingParams
from tinyllm.cli_chat import DIM, PLAIN, Chat, StopReply
from tinyllm.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def llm(tmp_path_factory, one_thread):
    return thinking_llm(tmp_path_factory)


def one_turn(llm, monkeypatch, capsys, is_terminal: bool, hide: bool) -> tuple[str, list[dict]]:
    monkeypatch.setattr("sys.stdout.isatty", lambda: is_terminal)
    args = SimpleNamespace(max_tokens=40, system=None, hide_thinking=hide)
    chat = Chat(llm, lambda n: SamplingParams(temperature=0, max_tokens=n), {}, args)
    reply: list[str] = []
    with StopReply() as stop:
        chat.stream(chat.conversation("2+2?"), reply, stop)
    return capsys.readouterr().out, reply


@pytest.mark.parametrize(
    "is_terminal, hide, shown",
    [
        (True, False, f"{DIM}I add two and two.{PLAIN}\nIt is 4."),
        (False, False, "I add two and two.\nIt is 4."),
        (True, True, "It is 4."),
    ],
)
def test_the_thinking_is_shown_dimmed_or_hidden_and_the_reply_keeps_the_answer(
    llm, monkeypatch, capsys, is_terminal, hide, shown
):
    out, reply = one_turn(llm, monkeypatch, capsys, is_terminal, hide)
    assert out == shown and "".join(reply) == "It is 4."


def test_llm_chat_gives_the_thinking_apart_from_the_answer(llm):
    gen = llm.chat(CHAT, temperature=0, max_tokens=40)
    assert (gen.reasoning, gen.text) == ("I add two and two.", "It is 4.")


def test_a_span_the_template_opens_is_the_replys_reasoning(tmp_path, one_thread):
    from helpers.reasoning_model import QWEN3_TEMPLATE

    # as DeepSeek-R1's and Qwen3-Thinking-2507's templates: the generation prompt writes "<think>\n" itself
    opening = QWEN3_TEMPLATE.replace(
        "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking",
        "{{- '<|im_start|>assistant\\n<think>\\n' }}{%- if enable_thinking",
    )
    assert opening != QWEN3_TEMPLATE
    write_reasoning_tokenizer(str(tmp_path), opening)
    llm = scripted_llm(Tokenizer.from_hf_folder(tmp_path), CHAT, "I add.\n</think>\n\nIt is 4.")
    gen = llm.chat(CHAT, temperature=0, max_tokens=40)
    assert (gen.reasoning, gen.text) == ("I add.", "It is 4.")
