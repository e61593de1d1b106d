"""SamplingParams' field table (sampling/params.py) against the fronts that read it: every field reaches
SamplingParams from each surface that the table names for it (the OpenAI request, Ollama's options, the command
line, the `llm` plugin), with the value sent, and is not taken by a surface the table leaves it off. A new field is
checked here as soon as it is declared: its sample value comes from its rule."""

import dataclasses
import functools
import json
from types import SimpleNamespace

import pytest

from tinyllm.cli import build_parser, make_structured, sampling
from tinyllm.cli_checks import max_tokens_of, read_structured
from tinyllm.grammar.structured import StructuredOutput
from tinyllm.sampling.params import FIELDS, SURFACES, SamplingParams, names_on
from tinyllm.server.checks.sampling_params import chat_params, completion_params, per_choice
from tinyllm.server.checks.structured import structured_from
from tinyllm.server.ollama.options import sampling_of
from tinyllm.server.ollama.protocol import ChatBody
from tinyllm.server.ollama.requests import chat_request
from tinyllm.server.wire.protocol import ChatCompletionRequest, CompletionRequest

HI = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
NUMBERS, INTEGERS = [0.5, 0.25, 1.5, 3.0], [3, 2, 5, 1]


def sample(name: str):
    """(the value a client sends for the field, the value SamplingParams then holds): not the default."""
    spec = FIELDS[name]
    kind = spec.rule.kind
    if kind in ("number", "integer"):
        for value in NUMBERS if kind == "number" else INTEGERS:
            try:
                held = spec.rule.check(name, value, SamplingParams())
            except ValueError:
                continue
            if held != spec.default:
                return value, held
        raise AssertionError(f"no sample value for {name}")
    fixed = {
        "bool": (True, True),
        "strings": (["x", "yz"], ("x", "yz")),
        "ids": ([3, 4], (3, 4)),
        "bias": ({"3": 1.5}, ((3, 1.5),)),
        "constraint": (SCHEMA, StructuredOutput.json_schema(json.dumps(SCHEMA))),
    }
    return fixed[kind]


def openai_params(name: str, wire: str, sent) -> SamplingParams:
    """The completions route's SamplingParams for a request sending `sent` as `wire` (the seed as the route
    takes it)."""
    body = {"prompt": "x", wire: sent}
    if wire == "response_format":
        body[wire] = {"type": "json_schema", "json_schema": {"name": "a", "schema": sent}}
    req = CompletionRequest.model_validate(body)
    values, names = completion_params(req)
    structured, _ = structured_from(req)
    if structured is not None:
        values["structured"] = structured
    return per_choice(values, names, req.seed if req.seed is not None else 0, 1)[0]


def chat_logprobs_params(sent) -> SamplingParams:
    values, names = chat_params(
        ChatCompletionRequest.model_validate({"messages": HI, "logprobs": True, "top_logprobs": sent})
    )
    return per_choice(values, names, 0, 1)[0]


def ollama_params(name: str, option: str, sent) -> SamplingParams:
    """A chat's SamplingParams with options {option: sent}, through the OpenAI request they become."""
    fields = sampling_of({option: sent}, 1024)
    req = chat_request(ChatBody(model="tiny", options={option: sent}), fields, HI)
    values, names = chat_params(req)
    return per_choice(values, names, req.seed if req.seed is not None else 0, 1)[0]


def flag_params(name: str, flag: str, sent, tmp_path) -> SamplingParams:
    """`tinyllm generate` with the flag: the SamplingParams it runs with."""
    if flag == "--json-schema":
        path = tmp_path / "schema.json"
        path.write_text(json.dumps(sent))
        argv = [flag, str(path)]
    elif isinstance(sent, bool):
        argv = [flag]
    elif isinstance(sent, list):
        argv = [a for item in sent for a in (flag, item)]
    else:
        argv = [flag, str(sent)]
    args = parser().parse_args(["generate", "hi", *argv])
    structured = make_structured(args, read_structured(args))
    return SamplingParams(**sampling(args, structured), max_tokens=max_tokens_of(args.max_tokens))


def plugin_params(name: str, option: str, sent) -> SamplingParams:
    """What `llm -m tinyllm -o OPTION VALUE` (or --schema) samples with."""
    llm_plugin = pytest.importorskip("tinyllm.llm_plugin", reason="the llm command line tool is not installed")
    if option == "schema":
        prompt = SimpleNamespace(options=llm_plugin.TinyLLM.Options(), schema=sent)
    else:
        prompt = SimpleNamespace(options=llm_plugin.TinyLLM.Options(**{option: sent}), schema=None)
    return SamplingParams(**llm_plugin.sampling_of(prompt))


DECLARED = [(name, surface) for name in FIELDS for surface in SURFACES if getattr(FIELDS[name], surface) is not None]
ABSENT = [(name, surface) for name in FIELDS for surface in SURFACES if getattr(FIELDS[name], surface) is None]


@pytest.mark.parametrize("name, surface", DECLARED, ids=[f"{n}-{s}" for n, s in DECLARED])
def test_each_field_reaches_sampling_params_from_each_surface_it_names(name, surface, tmp_path):
    alias = getattr(FIELDS[name], surface)
    sent, held = sample(name)
    if surface == "openai":
        params = openai_params(name, alias, sent)
    elif surface == "ollama":
        params = ollama_params(name, alias, sent)
    elif surface == "flag":
        params = flag_params(name, alias, sent, tmp_path)
    else:
        params = plugin_params(name, alias, sent)
    assert getattr(params, name) == held
    if name == "logprobs" and surface == "openai":  # chat spells it top_logprobs, with logprobs true
        assert chat_logprobs_params(sent).logprobs == held


@functools.cache
def parser():
    return build_parser()


@functools.cache
def flags() -> set[str]:
    generate = next(a for a in parser()._actions if a.dest == "command").choices["generate"]
    return {flag for action in generate._actions for flag in action.option_strings}


@pytest.mark.parametrize("name, surface", ABSENT, ids=[f"{n}-{s}" for n, s in ABSENT])
def test_a_surface_the_table_leaves_a_field_off_does_not_take_it(name, surface):
    if surface == "openai":
        assert name not in ChatCompletionRequest.model_fields and name not in CompletionRequest.model_fields
    elif surface == "ollama":
        notes = sampling_of({name: sample(name)[0]}, 1024).notes
        assert notes == (f"options {name} are not options this server knows: ignored",)
    elif surface == "flag":
        assert "--" + name.replace("_", "-") not in flags()
    else:
        llm_plugin = pytest.importorskip("tinyllm.llm_plugin", reason="the llm command line tool is not installed")
        assert name not in llm_plugin.TinyLLM.Options.model_fields


def test_every_field_is_in_the_table_with_a_help_text_and_its_own_default():
    for field in dataclasses.fields(SamplingParams):
        spec = FIELDS[field.name]
        assert spec.help and spec.help == spec.help.strip(), field.name
        assert spec.default == field.default == getattr(SamplingParams(), field.name)


def test_each_surface_names_its_fields_as_its_clients_spell_them():
    """The names are the surfaces' public contract (OpenAI's and Ollama's wire names, the CLI's flags, the `llm`
    plugin's options), written out here rather than read from the table under test."""
    same = ["temperature", "top_k", "top_p", "typical_p", "min_p", "tfs_z", "mirostat", "mirostat_tau"]
    same += ["mirostat_eta", "repetition_penalty", "presence_penalty", "frequency_penalty"]
    openai = {n: n for n in same} | {"penalty_last_n": "repeat_last_n", "seed": "seed", "max_tokens": "max_tokens"}
    openai |= {n: n for n in ["min_tokens", "stop", "stop_token_ids", "ignore_eos", "logprobs", "prompt_logprobs"]}
    openai |= {"logit_bias": "logit_bias", "structured": "response_format"}
    assert names_on("openai", by_hand=True) == openai
    ollama = {n: n for n in same} | {"repetition_penalty": "repeat_penalty", "penalty_last_n": "repeat_last_n"}
    ollama |= {"seed": "seed", "max_tokens": "num_predict", "stop": "stop"}
    assert names_on("ollama", by_hand=True) == ollama
    flags = ["temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty"]
    flags += ["frequency_penalty", "seed", "max_tokens", "stop", "ignore_eos", "logprobs"]
    expected = {n: "--" + n.replace("_", "-") for n in flags} | {"structured": "--json-schema"}
    assert names_on("flag", by_hand=True) == expected
    plugin = ["temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty"]
    plugin += ["frequency_penalty", "seed", "max_tokens", "stop"]
    assert names_on("plugin", by_hand=True) == {n: n for n in plugin} | {"structured": "schema"}


def test_the_package_exports_load_on_first_use_as_the_modules_own_objects():
    import importlib

    import tinyllm.sampling as package

    for name in package.__all__:
        module = importlib.import_module(package._EXPORTS[name])
        assert getattr(package, name) is getattr(module, name), name
