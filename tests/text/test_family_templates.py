"""Each family's chat template renders as transformers' apply_chat_template renders it: a conversation with
a system message, and for ChatML-with-tools (Qwen2/2.5) the same with tools and a tool call."""

import json
import os

import pytest

from helpers.family_templates import TEMPLATES
from helpers.model_files import tiny_tokenizer_json
from tinyllm.text.tokenizer import Tokenizer

CONVERSATION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is a river?"},
    {"role": "assistant", "content": "Water that flows to the sea."},
    {"role": "user", "content": "  And a bridge?  "},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, in °C.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TOOL_TURNS = [
    {"role": "system", "content": "You may use tools."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": '{"temperature": 21}'},
]


def folder_with(tmp_path, family: str) -> str:
    from tokenizers import Tokenizer as HFTokenizer

    template, bos, eos = TEMPLATES[family]
    folder = str(tmp_path / family)
    os.makedirs(folder)
    tiny_tokenizer_json(folder)
    tok = HFTokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.add_special_tokens([t for t in (bos, eos) if t is not None])
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {"chat_template": template, "eos_token": eos, "add_bos_token": False}
    if bos is not None:
        config["bos_token"] = bos
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return folder


def both(folder: str, messages, tools=None) -> tuple[str, str]:
    from transformers import PreTrainedTokenizerFast

    theirs = PreTrainedTokenizerFast.from_pretrained(folder).apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    ours = Tokenizer.from_hf_folder(folder).apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    return ours, theirs


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_conversation_with_a_system_message_renders_as_transformers(tmp_path, family):
    ours, theirs = both(folder_with(tmp_path, family), CONVERSATION)
    assert ours == theirs
    assert "You answer in one short sentence." in ours


def test_chatml_with_tools_renders_as_transformers(tmp_path):
    folder = folder_with(tmp_path, "qwen2")
    ours, theirs = both(folder, TOOL_TURNS, TOOLS)
    assert ours == theirs
    assert '"name": "get_weather"' in ours and "<tool_response>" in ours and "°C" in ours
    assert both(folder, TOOL_TURNS[:2])[0] != ours  # the tools are in the prompt only when offered


def test_tools_must_be_a_list_of_dicts(tmp_path):
    from tinyllm import TinyLLMError

    tok = Tokenizer.from_hf_folder(folder_with(tmp_path, "qwen2"))
    with pytest.raises(TinyLLMError, match="tools must be a list of dicts"):
        tok.apply_chat_template(CONVERSATION, tools="get_weather")
