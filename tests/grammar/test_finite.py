"""What can never finish is refused at construction: schemas with no finite instance and grammars with no finite
sentence (each against a naive fixpoint over random specs), named in one sentence; what the readers do not
follow is left alone; and a compiled matcher's empty language is seen from its first mask."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm import StructuredOutput, TinyLLMError
from tinyllm.grammar.finite import check_grammar_finite, check_schema_finite, is_empty_language

STOP_IDS = (0, 2)


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]},
            "property 'x' of # is required, which leads back to #",
        ),
        (
            {
                "$defs": {
                    "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                    "B": {"type": "array", "items": {"$ref": "#/$defs/A"}, "minItems": 1},
                },
                "$ref": "#/$defs/A",
            },
            "property 'b' of #/$defs/A is required, items of #/$defs/B are required (minItems 1), which leads back",
        ),
        (
            {"type": "object", "properties": {"x": {"allOf": [{"$ref": "#"}]}}, "required": ["x"]},
            "property 'x' of # is required, which leads back to #",
        ),
        (
            {"type": "object", "properties": {"x": {"oneOf": [{"$ref": "#"}]}}, "required": ["x"]},
            "property 'x' of # is required, which leads back to #",
        ),
        (
            {"type": "object", "properties": {"x": {"anyOf": [{"$ref": "#"}, {"$ref": "#/properties/x"}]}}},
            None,  # optional: {} is an instance
        ),
        (
            {"type": "array", "prefixItems": [{"type": "null"}, {"$ref": "#"}], "minItems": 2},
            "item 1 of # is required (minItems 2), which leads back to #",
        ),
        ({"type": "object", "properties": {"x": False}, "required": ["x"]}, "and #/properties/x matches nothing"),
        ({"$ref": "#"}, "# refers to itself"),
        ({"type": ["object", "null"], "properties": {"x": {"$ref": "#"}}, "required": ["x"]}, None),
        ({"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"], "patternProperties": {}}, "x"),
        ({"type": "object", "required": ["x"], "patternProperties": {"^x$": {}}, "additionalProperties": False}, None),
        ({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}, "required": ["x"]}, None),
        ({"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"], "enum": [{"x": 1}]}, None),
        ({"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"], "const": {"x": 1}}, None),
        ({"type": "object", "properties": {"x": "not a schema"}, "required": ["x"], "allOf": [7]}, None),
        ({"type": "object", "properties": {"a/b~": {"$ref": "#"}}, "required": ["a/b~"]}, "property 'a/b~' of #"),
    ],
)
def test_schemas_without_a_finite_instance_are_named(schema, message):
    if message is None:
        check_schema_finite(schema)
        return
    with pytest.raises(TinyLLMError, match="the json_schema has no finite instance: .*" + re.escape(message)) as info:
        StructuredOutput.json_schema(schema)
    assert "\n" not in str(info.value)


def test_the_issues_self_referential_tool_parameters_are_refused_at_construction():
    body = '{"type":"object","properties":{"x":{"$ref":"#"}},"required":["x"]}'
    with pytest.raises(TinyLLMError, match="property 'x' of # is required, which leads back to #"):
        StructuredOutput.json_schema(body)


def test_strict_refuses_a_required_property_it_closes_out():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}
    StructuredOutput.json_schema(schema)  # open: "b" may be any value
    with pytest.raises(TinyLLMError, match="property 'b' of # is required but the object allows no such property"):
        StructuredOutput.json_schema(schema, strict=True)


@pytest.mark.parametrize(
    "grammar, refused",
    [
        ('start: "a" start', "rule 'start' never finishes, as each of its alternatives needs 'start' again"),
        ('start: a\na: "x" a | b\nb: "y" b', "rules 'start', 'a', 'b' never finish, as each of their alternatives"),
        ('start: x{0,3} y\ny: y "a"', "rules 'start', 'y' never finish"),
        ("start: [ start ] start", "rule 'start' never finishes"),
        ('root ::= "a" root\n', "rule 'start' never finishes"),  # GBNF, read as the Lark it converts to
        ('start: "a" start | "b"', None),
        ('start: ( "a" start )*', None),
        ('start: x+\nx: "a" | "(" x ")"', None),
        ('?start: expr\n?expr: expr "+" term\n    | term\nterm: NUMBER | "(" expr ")"\n%import common.NUMBER', None),
        ('%llguidance {}\nstart: %json {\n  "type": "object"\n}\n', None),
        ("start: A\nA: /a/ & ~/b/", None),  # an intersection is not judged
        ('start: a ~ 0\na: "x" a', None),
        ('start: "a" start\nsep{x}: x', None),  # a template: syntax the reader leaves to the grammar engine
        ('start: "a" start -> alias', "rule 'start' never finishes"),
        ('start: start "a" -> alias', "rule 'start' never finishes"),  # an alias after a terminal
        ('start: x ":" "0".."9"\nx: "a" x', "rules 'start', 'x' never finish"),  # a range is one terminal
        ('start: x{2}\nx: "a" x', "rules 'start', 'x' never finish"),  # at least two x
        ('start: x ~ 2\nx: "a" x', "rules 'start', 'x' never finish"),
        ('%import common.WS\nstart: "a" start', "rule 'start' never finishes"),  # a directive's line alone skipped
        ('start: %regex {"substrings": ["a"]} start', "rule 'start' never finishes"),
        ("start: <|im_end|> | start", None),
        ('start: "a" <|im_end|> start', "rule 'start' never finishes"),  # a special token is one terminal
        ('start: ( "a" start )+', "rule 'start' never finishes"),  # at least once
        ('root ::= x | "b"{2,3}\nx ::= [a-z]+ "c"?  # comment\n', None),
    ],
)
def test_grammars_without_a_finite_sentence_are_named(grammar, refused):
    if refused is None:
        StructuredOutput.grammar(grammar)
        return
    with pytest.raises(TinyLLMError, match="the grammar has no finite sentence: .*" + re.escape(refused)):
        StructuredOutput.grammar(grammar)


def test_a_quantifier_cut_short_at_the_end_of_a_rule_is_left_to_the_grammar_engine():
    check_grammar_finite('start: "a" ~ 2 ..')  # `~n..` without its m: syntax the reader does not follow


def test_a_json_directive_without_its_schema_is_left_to_the_grammar_engine():
    check_grammar_finite('start: "a" start | %json')  # no `{...}` after it, at the very end of the text


SELF_REFERENCE = '{"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}'


def test_a_grammar_whose_every_way_needs_an_infinite_json_schema_is_refused():
    with pytest.raises(TinyLLMError, match=re.escape("rule 'start' needs a %json schema with no finite instance (")):
        StructuredOutput.grammar(f'start: "<call>" fn "</call>"\nfn: %json {SELF_REFERENCE}')
    StructuredOutput.grammar(f'start: fn | other\nfn: %json {SELF_REFERENCE}\nother: %json {{"type": "null"}}')
    StructuredOutput.grammar("start: %json " + '{"items": ' * 3000 + "{}" + "}" * 3000)  # left to the engine


def test_a_tool_call_to_a_function_that_contains_itself_is_refused():
    from tinyllm.text.tool_calls import FORMATS, call_grammar

    looping = {"name": "f", "parameters": json.loads(SELF_REFERENCE)}  # "#": the parameters, rebased in the call
    plain = {"name": "g", "parameters": {"type": "object", "properties": {"y": {"type": "integer"}}}}
    fmt = next(f for f in FORMATS if f.args_key == "arguments")
    with pytest.raises(TinyLLMError, match="needs a %json schema with no finite instance"):
        StructuredOutput.grammar(call_grammar(fmt, [looping]))
    StructuredOutput.grammar(call_grammar(fmt, [looping, plain]))  # another function can be called


NAMES = ["start", "a", "b", "c"]
QUANTIFIERS = [""] * 8 + ["?", "*", "+", "~2", "~0", "{1,2}", "{0,3}", "{2}"]


def items(depth):
    name = st.tuples(st.just("name"), st.sampled_from(NAMES))
    term = st.tuples(st.just("term"), st.sampled_from(['"x"', "/[0-9]+/", '"a".."z"', "<|im_end|>", '""']))
    atom = st.one_of(name, name, name, term)  # names three times as often: about a fifth of the grammars never end
    if depth > 0:
        atom = st.one_of(atom, st.tuples(st.sampled_from(["group", "opt"]), alternatives(depth - 1)))
    return st.lists(st.tuples(atom, st.sampled_from(QUANTIFIERS)), min_size=1, max_size=3)


def alternatives(depth=2):
    return st.lists(items(depth), min_size=1, max_size=2)


def render(alts):
    out = []
    for alt in alts:
        parts = []
        for (kind, value), quant in alt:
            if kind in ("name", "term"):
                parts.append(value + quant)
            else:
                parts.append((f"({render(value)})" if kind == "group" else f"[{render(value)}]") + quant)
        out.append(" ".join(parts))
    return " | ".join(out)


def naive_finishing(grammar):
    """Iterate 'can finish' over the rule structure until nothing changes."""

    def alts_ok(alts, done):
        return any(all(item_ok(atom, quant, done) for atom, quant in alt) for alt in alts)

    def item_ok(atom, quant, done):
        if quant in ("?", "*", "~0", "{0,3}"):
            return True
        kind, value = atom
        return kind in ("term", "opt") or (value in done if kind == "name" else alts_ok(value, done))

    done, changed = set(NAMES) - set(grammar), True  # a name defined nowhere (an import) finishes
    while changed:
        changed = False
        for name, alts in grammar.items():
            if name not in done and alts_ok(alts, done):
                done.add(name)
                changed = True
    return done


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(grammar=st.dictionaries(st.sampled_from(NAMES), alternatives(), min_size=1).filter(lambda g: "start" in g))
def test_the_grammar_check_agrees_with_a_naive_fixpoint(grammar):
    text = "\n".join(f"{name}: {render(alts)}" for name, alts in grammar.items())
    if "start" in naive_finishing(grammar):
        check_grammar_finite(text)
    else:
        with pytest.raises(TinyLLMError, match="the grammar has no finite sentence"):
            check_grammar_finite(text)


DEFS = ["A", "B", "C"]
SUBSCHEMAS = st.recursive(
    st.one_of(
        st.sampled_from([{"type": "null"}, {"type": "string"}, True, False]),
        st.builds(lambda d: {"$ref": f"#/$defs/{d}"}, st.sampled_from(DEFS)),
    ),
    lambda inner: st.one_of(
        st.builds(
            lambda props, req: {"type": "object", "properties": props, "required": sorted(set(req) & set(props))},
            st.dictionaries(st.sampled_from("xyz"), inner, max_size=3),
            st.lists(st.sampled_from("xyz")),
        ),
        st.builds(lambda i, n: {"type": "array", "items": i, "minItems": n}, inner, st.integers(0, 2)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=8,
)


def naive_has_instance(schema):
    """The same rules, evaluated by plain recursion over small schemas, iterated over the $defs to a fixpoint."""
    done, changed = set(), True
    while changed:
        changed = False
        for name, node in schema["$defs"].items():
            if name not in done and naive_ok(node, done):
                done.add(name)
                changed = True
    return "A" in done


def naive_ok(node, done):
    """Whether `node` has an instance, given the names of the $defs known to have one."""
    if isinstance(node, bool):
        return node
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1] in done
    if "anyOf" in node:
        return any(naive_ok(n, done) for n in node["anyOf"])
    if "allOf" in node:
        return all(naive_ok(n, done) for n in node["allOf"])
    if node.get("type") == "object":
        return all(naive_ok(node["properties"][k], done) for k in node["required"])
    if node.get("type") == "array":
        return node["minItems"] == 0 or naive_ok(node["items"], done)
    return True


@settings(max_examples=400, deadline=None)
@given(defs=st.fixed_dictionaries(dict.fromkeys(DEFS, SUBSCHEMAS)))
def test_the_schema_check_agrees_with_a_naive_fixpoint(defs):
    schema = {"$defs": defs, "$ref": "#/$defs/A"}
    if naive_has_instance(schema):
        check_schema_finite(json.loads(json.dumps(schema)))
    else:
        with pytest.raises(TinyLLMError, match="the json_schema has no finite instance"):
            check_schema_finite(json.loads(json.dumps(schema)))


@pytest.mark.parametrize(
    "pattern, empty",
    [(r"[^\s\S]", True), (r"a[^\s\S]", True), (r"a|b", False), (r"(a[^\s\S])|c", False), (r"x?", False)],
)
def test_an_empty_regex_is_seen_from_its_first_mask(ll_matcher, pattern, empty):
    matcher = ll_matcher(StructuredOutput.regex(pattern))
    assert is_empty_language(matcher, STOP_IDS) is empty
    assert is_empty_language(matcher, STOP_IDS) is empty and not matcher.is_error()  # the template is untouched
