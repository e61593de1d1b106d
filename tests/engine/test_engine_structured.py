"""Structured output through the engine on a tiny random model with the real SmolLM2 tokenizer: the mask makes
every output valid, and a constrained request gives the reference loop's answer alone, batched with unconstrained
requests, streamed, preempted and with speculative drafts (whose rejection rolls the grammar back)."""

import json
import random
import re

import jsonschema
import pytest
import torch

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams, SpeculativeConfig, StructuredOutput, generate
from tinyllm.engine.engine import Engine

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,6}$"},
                    "age": {"type": "integer", "minimum": 18, "maximum": 99},
                },
                "required": ["name", "age"],
                "additionalProperties": False,
            }
        },
        "required": ["user"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 4}
        },
        "required": ["tags"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {
            "score": {"type": "number", "minimum": -1.5, "maximum": 2.5},
            "count": {"type": "integer", "minimum": 0, "maximum": 10},
        },
        "required": ["score", "count"],
        "additionalProperties": False,
    },
    "optional": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 999},
            "note": {"type": "string", "maxLength": 8},
            "ok": {"type": "boolean"},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    "enum_list": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"kind": {"enum": ["a", "b", None]}, "n": {"type": "integer", "minimum": 0, "maximum": 3}},
            "required": ["kind", "n"],
            "additionalProperties": False,
        },
        "minItems": 1,
        "maxItems": 3,
    },
}
REGEX = r"[A-Z][a-z]{2,6} [0-9]{2,3}-[0-9]{4}( (yes|no))?"  # \d is Unicode digits (versions differ)
PROMPTS = [[5, 90, 310, 7], [44, 12, 900, 1000, 3, 8], [70, 71]]


@pytest.fixture(scope="module")
def llm(smollm_tokenizer):
    model = tiny_llama(21, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512)
    return LLM.from_parts(model, smollm_tokenizer)


def schema_params(name, seed, temperature=1.0):
    return SamplingParams(
        temperature=temperature, seed=seed, max_tokens=160, structured=StructuredOutput.json_schema(SCHEMAS[name])
    )


def reference(llm, prompt, p, **kw):
    return generate(llm.model, llm.tokenizer, prompt, p, eos_ids=llm.eos_ids, grammars=llm.grammars, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_output_validates_against_its_schema(llm, name):
    params = [schema_params(name, seed, temperature) for seed in range(4) for temperature in (0.0, 1.0, 1.5)]
    gens = llm.engine().generate([PROMPTS[i % 3] for i in range(len(params))], params)
    for g in gens:
        assert g.finish_reason == "stop", g.text
        jsonschema.validate(json.loads(g.text), SCHEMAS[name])


def test_regex_outputs_fully_match(llm):
    params = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=40, structured=StructuredOutput.regex(REGEX))
        for s in range(8)
    ]
    for g in llm.engine().generate([PROMPTS[s % 3] for s in range(8)], params):
        assert g.finish_reason == "stop" and re.fullmatch(REGEX, g.text), g.text


def test_grammar_in_lark_and_gbnf_give_the_same_text(llm):
    lark = 'start: "(" item ("," item)* ")"\nitem: /[0-9]/ | "x"'
    gbnf = 'root ::= "(" item ("," item)* ")"\nitem ::= [0-9] | "x"'
    outs = []
    for text in (lark, gbnf):
        p = SamplingParams(temperature=1.0, seed=4, max_tokens=40, structured=StructuredOutput.grammar(text))
        outs.append(llm.generate(PROMPTS[0], params=p))
    assert outs[0].text == outs[1].text and outs[0].finish_reason == "stop"
    assert re.fullmatch(r"\(([0-9]|x)(,([0-9]|x))*\)", outs[0].text)


HEAD_SCALE = 8.0


@pytest.fixture(scope="module")
def peaked_llm(smollm_tokenizer):
    """The tiny model with its head scaled so a few tokens carry most of the probability, as in a trained
    model. Over a near-uniform distribution of 49k tokens the inverse-CDF draw lands within float32 noise of a
    token boundary every few dozen draws, and two paths that sum in different orders then pick neighbours."""
    model = tiny_llama(21, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=512)
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    return LLM.from_parts(model, smollm_tokenizer)


def test_engine_equals_reference_and_batched_with_unconstrained_equals_alone(peaked_llm):
    llm = peaked_llm
    constrained = [schema_params(n, seed=7 + i) for i, n in enumerate(sorted(SCHEMAS))]
    free = [SamplingParams(temperature=1.0, seed=50 + i, max_tokens=12, ignore_eos=True) for i in range(5)]
    params = [p for pair in zip(constrained, free) for p in pair]
    ps = [PROMPTS[i % 3] for i in range(len(params))]
    batched = Engine(llm.parts, max_num_seqs=10, max_num_batched_tokens=64, block_size=8, num_blocks=256).generate(
        ps, params
    )
    for prompt, p, got in zip(ps, params, batched):
        ref = reference(llm, prompt, p)
        assert got.ids == ref.ids and got.text == ref.text
        # 1e-5 of logits of the usual size; scaled logits carry float32 noise scaled alike
        want = [lp.logprob for lp in ref.logprobs]
        assert [lp.logprob for lp in got.logprobs] == pytest.approx(want, abs=1e-5 * HEAD_SCALE)


def test_streamed_equals_generated(llm):
    p = schema_params("nested", seed=3)
    pieces = list(llm.stream(PROMPTS[1], params=p))
    assert len(pieces) > 1 and "".join(pieces) == llm.generate(PROMPTS[1], params=p).text


def test_preempted_equals_not_preempted(llm):
    rng = random.Random(0)
    ps = [[rng.randrange(3, 49152) for _ in range(rng.randint(20, 40))] for _ in range(8)]
    params = [schema_params(sorted(SCHEMAS)[i % 5], seed=i) for i in range(8)]
    roomy = Engine(llm.parts, max_num_seqs=8, max_num_batched_tokens=128, block_size=8, num_blocks=256).generate(
        ps, params
    )
    tight = Engine(llm.parts, max_num_seqs=8, max_num_batched_tokens=128, block_size=8, num_blocks=30)
    ids = tight.add_requests(ps, params)
    while tight.has_unfinished():
        tight.step()
    gens = [tight.generation(i) for i in ids]
    assert [g.ids for g in gens] == [g.ids for g in roomy]
    assert sum(g.stats["preemptions"] for g in gens) > 0  # the pool really was too small


@pytest.mark.parametrize(
    "spec",
    [SpeculativeConfig("ngram", num_draft_tokens=3), SpeculativeConfig("draft", num_draft_tokens=3, draft_layers=2)],
)
@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_constrained_equals_plain_constrained(llm, spec, temperature):
    # the prompt holds JSON like the output, so n-gram lookup finds drafts; most are then rejected
    example = llm.tokenizer.encode('{"tags":["red","green","red"]} {"tags":["blue","blue"]}', False)
    params = [schema_params("array", seed=s, temperature=temperature) for s in range(4)]
    prompts = [example + PROMPTS[s % 3] for s in range(4)]
    plain = llm.engine().generate(prompts, params)
    fast_engine = Engine(llm.parts, speculative=spec)
    fast = fast_engine.generate(prompts, params)
    assert [g.ids for g in fast] == [g.ids for g in plain]
    assert sum(g.stats["drafted"] for g in fast) > 0
    assert sum(g.stats["drafted"] - g.stats["accepted"] for g in fast) > 0  # some drafts were rolled back
    for prompt, p, g in zip(prompts, params, fast):
        assert reference(llm, prompt, p, proposer=None).ids == g.ids


@pytest.fixture(scope="module")
def default_llm(default_model_path, one_thread):
    return LLM(default_model_path)


def chat_prompt(llm, text):
    return llm.tokenizer.encode(llm.tokenizer.apply_chat_template([{"role": "user", "content": text}]), False)


@pytest.mark.slow
def test_default_model_outputs_validate_and_speculation_changes_nothing(default_llm):
    llm = default_llm
    prompts = [chat_prompt(llm, f"Answer in JSON: a {name} example.") for name in sorted(SCHEMAS)]
    params = [schema_params(name, seed=i, temperature=0.7) for i, name in enumerate(sorted(SCHEMAS))]
    gens = llm.engine().generate(prompts, params)
    for name, g in zip(sorted(SCHEMAS), gens):
        assert g.finish_reason == "stop", g.text
        jsonschema.validate(json.loads(g.text), SCHEMAS[name])
    fast = Engine(llm.parts, speculative=SpeculativeConfig("ngram", num_draft_tokens=4)).generate(prompts, params)
    assert [g.ids for g in fast] == [g.ids for g in gens]
    assert sum(g.stats["accepted"] for g in fast) > 0


@pytest.mark.slow
def test_default_model_regex_and_json_object(default_llm):
    llm = default_llm
    regex = SamplingParams(temperature=0.7, seed=1, max_tokens=40, structured=StructuredOutput.regex(REGEX))
    g = llm.generate(chat_prompt(llm, "Write a name and a phone number."), params=regex)
    assert g.finish_reason == "stop" and re.fullmatch(REGEX, g.text)
    obj = SamplingParams(temperature=0, max_tokens=200, structured=StructuredOutput.json_object())
    g = llm.generate(chat_prompt(llm, "Give the capital of France as a JSON object."), params=obj)
    assert g.finish_reason == "stop" and isinstance(json.loads(g.text), dict)
