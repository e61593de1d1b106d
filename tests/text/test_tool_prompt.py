"""Conversations with tools through a chat template: a template that reads `tools` renders exactly as
transformers renders it (given the arguments as dicts, as its templates expect), and the default model's
template, which knows nothing of tools, gets them written into the system prompt in Hermes' format."""

import json

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.text.chat_template import render_chat, uses_tools
from tinyllm.text.tool_calls import HERMES
from tinyllm.text.tool_prompt import tools_section

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
]
# A template in the style of those that take tools (our own, written for this test).
TOOL_TEMPLATE = """\
{%- if tools %}<|im_start|>system
Tools:{% for t in tools %}
{{ t | tojson }}{% endfor %}<|im_end|>
{% endif %}
{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- for c in m.tool_calls or [] %}<tool_call>
{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}
</tool_call>{% endfor %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def test_a_template_that_takes_tools_renders_as_transformers_does(smollm_tokenizer):
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast(tokenizer_object=smollm_tokenizer.hf)
    call_as_dict = {**CALL, "function": {**CALL["function"], "arguments": {"city": "Paris"}}}
    as_dicts = [{**m, "tool_calls": [call_as_dict]} if m.get("tool_calls") else m for m in CONVERSATION]
    expected = reference.apply_chat_template(
        as_dicts, tools=TOOLS, chat_template=TOOL_TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assert uses_tools(TOOL_TEMPLATE)
    assert render_chat(TOOL_TEMPLATE, CONVERSATION, True, {}, TOOLS) == expected
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in expected


def test_the_default_template_gets_the_tools_in_its_system_prompt(smollm_tokenizer):
    assert not uses_tools(smollm_tokenizer.chat_template)
    text = smollm_tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS)
    section = tools_section(TOOLS, HERMES)
    assert text == (
        f"<|im_start|>system\n{section}<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nSunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert json.dumps(TOOLS[0]) in section and "<tool_call>" in section


def test_a_system_message_keeps_its_text_before_the_tools(smollm_tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, *CONVERSATION[:1]]
    text = smollm_tokenizer.apply_chat_template(messages, tools=TOOLS)
    assert text.startswith(f"<|im_start|>system\nBe brief.\n\n{tools_section(TOOLS, HERMES)}<|im_end|>\n")


def test_without_tools_the_conversation_renders_as_before(smollm_tokenizer):
    plain = [{"role": "user", "content": "hi"}]
    assert smollm_tokenizer.apply_chat_template(plain, tools=None) == smollm_tokenizer.apply_chat_template(plain)
    assert smollm_tokenizer.apply_chat_template(plain, tools=[]) == smollm_tokenizer.apply_chat_template(plain)


@pytest.mark.parametrize(
    "message, words",
    [
        ({"role": "user", "content": None, "tool_calls": [CALL]}, "only on an assistant"),
        ({"role": "assistant", "content": None, "tool_calls": CALL}, "as a list"),
        ({"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}, "function"),
        ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}, "JSON"),
        ({"role": "assistant", "content": None}, '"content"'),
        ({"role": "tool", "content": "x", "tool_call_id": 5}, "tool_call_id"),
    ],
)
def test_malformed_tool_messages_are_refused(smollm_tokenizer, message, words):
    with pytest.raises(TinyLLMError, match="messages\\[0\\]") as info:
        smollm_tokenizer.apply_chat_template([message])
    assert words in str(info.value)
