"""DuplicateKeyGuard against a slow twin: for every candidate token, parse history + token from scratch with a
plain recursive-descent reader and ask whether a key that its object already holds closes inside the token.
Exhaustive over a small vocabulary built to stress escapes, split keys, nesting and multi-quote tokens (random
JSON streams, cut into tokens at random, walked forward and back), and over SmolLM2's own quote tokens."""

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyllm.grammar.json_keys import DuplicateKeyGuard

SPACE = b" \t\r\n"
STRUCTURAL = b'{}[]:,"'


class _End(Exception):
    """The text ended, or stopped being JSON."""


def duplicate_closes(text: bytes) -> list[int]:
    """Positions of the quotes in `text` that close a key its object already holds, read by recursive descent
    up to the end of the text or the first byte that cannot be JSON (scalars: runs of non-structural bytes)."""
    reader = _Reader(text)
    try:
        reader.ws()
        reader.value()
        reader.ws()
        if reader.pos < len(text):
            raise _End
    except _End:
        pass
    return reader.found


class _Reader:
    """The recursive-descent reader of duplicate_closes: `pos` the next byte, `found` the duplicates' quotes."""

    def __init__(self, text: bytes):
        self.text, self.pos, self.found = text, 0, []

    def peek(self):
        if self.pos >= len(self.text):
            raise _End
        return self.text[self.pos]

    def ws(self):
        while self.pos < len(self.text) and self.text[self.pos] in SPACE:
            self.pos += 1

    def expect(self, byte):
        if self.peek() != byte:
            raise _End
        self.pos += 1

    def string(self):
        self.expect(ord('"'))
        start = self.pos
        while True:
            c = self.peek()
            if c == ord("\\"):
                self.pos += 1
                self.peek()
            elif c == ord('"'):
                self.pos += 1
                return self.text[start : self.pos - 1]
            self.pos += 1

    def value(self):
        c = self.peek()
        if c == ord("{"):
            self.obj()
        elif c == ord("["):
            self.arr()
        elif c == ord('"'):
            self.string()
        elif c in SPACE or c in STRUCTURAL:
            raise _End
        else:
            while (
                self.pos < len(self.text) and self.text[self.pos] not in SPACE and self.text[self.pos] not in STRUCTURAL
            ):
                self.pos += 1

    def obj(self):
        self.expect(ord("{"))
        self.ws()
        if self.peek() == ord("}"):
            self.pos += 1
            return
        keys = set()
        while True:
            self.ws()
            raw = self.string()
            try:
                key = json.loads(b'"' + raw + b'"')
            except ValueError:
                key = None
            if key is not None and key in keys:
                self.found.append(self.pos - 1)
            elif key is not None:
                keys.add(key)
            self.ws()
            self.expect(ord(":"))
            self.ws()
            self.value()
            self.ws()
            if self.peek() == ord("}"):
                self.pos += 1
                return
            self.expect(ord(","))

    def arr(self):
        self.expect(ord("["))
        self.ws()
        if self.peek() == ord("]"):
            self.pos += 1
            return
        while True:
            self.ws()
            self.value()
            self.ws()
            if self.peek() == ord("]"):
                self.pos += 1
                return
            self.expect(ord(","))


def slow_forbidden(vocab, history_bytes: bytes, candidates) -> list[int]:
    return [t for t in candidates if any(p >= len(history_bytes) for p in duplicate_closes(history_bytes + vocab[t]))]


PIECES = [
    *(bytes([b]) for b in b'{}[]:," \n\\0123456789abcdefABulnt-.'),
    *(bytes([b]) for b in "é😀".encode()),
    b'"a"', b'":', b'","', b'":"', b'"}', b'"]', b'a"', b'ab"', b'A"', b'b":', b'"a":', b'\\"', b'\\\\', b'\\"a"',
    b"\\u0041", b"\\u00", b'41"', b'1"', b"\\u0061", b'\\u0061"', b'\\ud83d', b'\\ude00"', "é\"".encode(),
    "😀".encode()[:2], "😀".encode()[2:] + b'"', b'"a":1,"a"', b'"""', b'{"', b'},"', b'}],"a":', b'null', b'12',
    b'":{"', b'","a":"', b'a":"a","a', b' "', b'" ', b'\\\\"', b'\\\\\\"',
]  # fmt: skip


@pytest.fixture
def guard():  # built per test (cheap), so each test that reads it also runs the index building
    return DuplicateKeyGuard(PIECES)


def json_texts():
    """Random JSON with few key names (duplicates are common), keys and strings spelled with escapes at random."""
    key = st.sampled_from(["a", "b", "A", "ab", "é", "😀", '"', "\\"])
    spelled = st.tuples(key, st.lists(st.booleans(), min_size=4, max_size=4)).map(lambda kb: spell(*kb))
    scalar = st.sampled_from(["1", "12", "null", "-0.5"]) | spelled
    values = st.recursive(
        scalar,
        lambda inner: (
            st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")
            | st.lists(st.tuples(spelled, inner), max_size=4).map(
                lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"
            )
        ),
        max_leaves=10,
    )
    return st.tuples(values, st.booleans()).map(lambda vs: vs[0].replace(",", ", ") if vs[1] else vs[0])


def spell(text: str, choices) -> str:
    """A JSON string for `text`, each character written plainly or escaped (\\uXXXX, a surrogate pair for an
    astral one, or \\" and \\\\ for the two that must be escaped)."""
    out = []
    for i, ch in enumerate(text):
        escape = choices[i % len(choices)]
        if ch in '"\\':
            out.append(f"\\u{ord(ch):04x}" if escape else "\\" + ch)
        elif escape:
            out.append(json.dumps(ch)[1:-1] if ord(ch) > 0xFFFF else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def tokens_for(data: bytes, rng: random.Random) -> list[int]:
    """`data` cut into pieces of PIECES, each chosen at random among those that fit."""
    ids, pos = [], 0
    while pos < len(data):
        fits = [t for t, piece in enumerate(PIECES) if data.startswith(piece, pos)]
        assert fits, data[pos:]
        t = rng.choice(fits)
        ids.append(t)
        pos += len(PIECES[t])
    return ids


@pytest.mark.slow
# The guard is only read here (each stream makes its own state): sharing it across examples is safe.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=json_texts(), seed=st.integers(0, 2**16), cut=st.integers(0, 10))
def test_forbidden_equals_the_slow_twin_on_random_streams_forward_and_back(guard, text, seed, cut):
    rng = random.Random(seed)
    ids = tokens_for(text.encode()[: len(text.encode()) - cut], rng)
    state = guard.new_state()
    everything = range(len(PIECES))
    order = list(range(len(ids) + 1)) + [rng.randint(0, len(ids)) for _ in range(6)]  # then jumps back and forth
    for n in order:
        history = ids[:n]
        expected = slow_forbidden(PIECES, b"".join(PIECES[t] for t in history), everything)
        assert state.forbidden(history) == expected, (b"".join(PIECES[t] for t in history), expected)


EMOJI = "😀".encode()


@pytest.mark.parametrize(
    "history, forbidden",
    [
        (b'{"a":1,"', [b'a"', b'\\u0061"', b'a":"a","a']),  # plain and escaped spellings of one key
        (b'{"A":1,"\\u00', [b'41"']),  # a key split inside an escape
        (b'{"a":1,"\\u006', [b'1"']),
        (b'{"A":{"A":1},"', [b'A"']),  # the outer object's key, not the inner one's
        (b'{"A":{"b":1,"', [b'b":']),
        (b'{"A":{"b":1},"b":{"', []),  # a new object's first key
        (b'{"a":"', [b'","a":"']),  # in a value string only a token that closes it and writes a key
        (b'{"a":1,', [b'"a"', b'"a":', b'"a":1,"a"']),
        (b'{"a":1', []),  # `1"` is not JSON
        (b'{"a":[{"b":1', [b'}],"a":']),
        (b'{"\\\\":1,"', [b'\\\\"']),  # the key made of one backslash; `\\\\\\"` does not close
        (b'{"' + EMOJI + b'":1,"' + EMOJI[:2], [EMOJI[2:] + b'"']),  # a key split inside a UTF-8 character
        (b'{"\\ud83d\\ude00":1,"\\ud83d', [b'\\ude00"']),  # a surrogate pair split over tokens
        (b'{"\\ud83d\\ude00":1,"' + EMOJI[:2], [EMOJI[2:] + b'"']),  # escaped, then written plainly
        (b'[{"a":1},{"', []),
        (b'{"a":1,"b":2}', []),
        (b"{1", []),  # not JSON: nothing forbidden
    ],
)
def test_chosen_histories(guard, history, forbidden):
    ids = tokens_for(history, random.Random(0))
    got = guard.new_state().forbidden(ids)
    assert [PIECES[t] for t in got] == forbidden
    assert got == slow_forbidden(PIECES, history, range(len(PIECES)))


TEXTS = [
    '{"name":"Tom","age":3,"cat_name":"Tom","age_year":3,"age_year":3}',
    '{"a":{"a":[{"a":"\\"a\\""},{"b":1,"b":2}]},"a":null,"\\u0061":1}',
    '{"x": 1, "y": [1, 2, {"x": "y"}], "x": "\\\\"}',
]


@pytest.mark.parametrize("text", TEXTS)
def test_smollm_quote_tokens_against_the_slow_twin(ll_tokenizer, smollm_tokenizer, text):
    vocab = [ll_tokenizer.decode_bytes([i]) for i in range(smollm_tokenizer.vocab_size)]
    guard = DuplicateKeyGuard(vocab)
    quoted = [t for t, b in enumerate(vocab) if b'"' in b]
    others = random.Random(1).sample([t for t, b in enumerate(vocab) if b'"' not in b], 300)
    ids = ll_tokenizer.tokenize_str(text)
    state = guard.new_state()
    num_nonempty = 0
    for n in range(len(ids) + 1):
        got = state.forbidden(ids[:n])
        history = ll_tokenizer.decode_bytes(ids[:n])
        assert got == slow_forbidden(vocab, history, quoted)
        assert not set(got) & set(others)
        num_nonempty += bool(got)
    assert num_nonempty >= 1  # the texts do reach keys that could be repeated


def test_a_history_with_a_duplicate_already_in_it_still_guards_the_rest(guard):
    ids = tokens_for(b'{"a":1,"a":2,"', random.Random(3))
    assert b'a"' in [PIECES[t] for t in guard.new_state().forbidden(ids)]


# An empty container closes at once (`{}`, `[]`): the scanner must pop it and keep the keys of the objects
# around it, at every depth.
ESCAPED_A = [b'a"', b'\\u0061"', b'a":"a","a']  # the tokens that close the key "a" from inside a new key


@pytest.mark.parametrize(
    "history, forbidden",
    [
        (b'{"a":[{', [b'"a":1,"a"', b'}],"a":']),  # closing the empty object and the array repeats "a"
        (b'{"a":{},"', ESCAPED_A),
        (b'{"a":[],"', ESCAPED_A),
        (b'{"a":[[]],"', ESCAPED_A),
        (b'{"a":[{},[]],"', ESCAPED_A),
        (b'{"a":[{}] ,"', ESCAPED_A),
        (b'{"a":[{}],', [b'"a"', b'"a":', b'"a":1,"a"']),
        (b'{"a":{"b":[{}]},"', ESCAPED_A),
        (b'[{"a":[{}],"', ESCAPED_A),
        (b'{"b":{"a":{},"', ESCAPED_A),  # the inner object's key
        (b'{"a":[{}],"b":{},"', [b'a"', b'b":', b'\\u0061"', b'a":"a","a']),
        (b'{"a":{"b":{}},"b":{},"', [b'a"', b'b":', b'\\u0061"', b'a":"a","a']),
        (b'{"b":{},"a":{"', []),  # a new object after an empty one: no key yet
    ],
)
def test_empty_containers_at_any_depth_keep_the_outer_keys(guard, history, forbidden):
    ids = tokens_for(history, random.Random(0))
    assert [PIECES[t] for t in guard.new_state().forbidden(ids)] == forbidden
    assert guard.new_state().forbidden(ids) == slow_forbidden(PIECES, history, range(len(PIECES)))


KEYS = ["a", "b", "ab"]
# single bytes for everything, and one token per key that closes it: `a"`, `b"`, `ab"`
KEY_VOCAB = [bytes([b]) for b in b'{}[]:," 1abnul'] + [k.encode() + b'"' for k in KEYS]
CLOSES = {k: KEY_VOCAB.index(k.encode() + b'"') for k in KEYS}
QUOTE = KEY_VOCAB.index(b'"')


def nested_json():
    """Complete JSON values over KEYS with many empty containers: `{}`, `[]` and nests of them."""
    leaf = st.sampled_from(["1", "null", '"a"', "{}", "[]", "[{}]", "[[]]", '{"a":{}}'])
    return st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")
            | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3).map(
                lambda d: "{" + ",".join(f'"{k}":{v}' for k, v in d.items()) + "}"
            )
        ),
        max_leaves=8,
    )


@st.composite
def open_objects(draw):
    """A JSON prefix that opens containers down to some depth and ends inside an object that has some keys,
    after `,"` (a new key starts): (the prefix, the keys of that innermost object)."""
    text = ""
    for _ in range(draw(st.integers(0, 3))):  # the containers around the innermost object
        if draw(st.booleans()):
            values = draw(st.lists(nested_json(), max_size=2))
            text += "[" + "".join(v + "," for v in values)
        else:
            pairs = draw(st.dictionaries(st.sampled_from(KEYS), nested_json(), max_size=2))
            key = draw(st.sampled_from([k for k in KEYS if k not in pairs] or KEYS))
            text += "{" + "".join(f'"{k}":{v},' for k, v in pairs.items()) + f'"{key}":'
    pairs = draw(st.dictionaries(st.sampled_from(KEYS), nested_json(), min_size=1, max_size=3))
    return text + "{" + ",".join(f'"{k}":{v}' for k, v in pairs.items()) + ',"', set(pairs)


@settings(max_examples=50, deadline=None)
@given(case=open_objects())
def test_the_guard_refuses_exactly_the_keys_the_innermost_open_object_holds(case):
    text, keys = case
    state = DuplicateKeyGuard(KEY_VOCAB).new_state()
    ids = [KEY_VOCAB.index(bytes([b])) for b in text.encode()]
    assert state.forbidden(ids) == sorted(CLOSES[k] for k in keys), text
    for k in KEYS:  # the key written out: its closing quote is refused exactly when the object has it
        typed = ids + [KEY_VOCAB.index(bytes([b])) for b in k.encode()]
        assert (QUOTE in state.forbidden(typed)) == (k in keys), (text, k)


@pytest.mark.parametrize(
    "history, forbidden",
    [
        (b'{"a":1 ,"', ESCAPED_A),  # a scalar ended by a space
        (b'[{"a":1 },{"a":2,"', ESCAPED_A),  # ... inside an array, which goes on after the object closes
        (b'{"\\c":1,"a":2,"', ESCAPED_A),  # a key whose bytes do not decode is never a duplicate, nor kept
        # not JSON (a closer of the other kind, a second colon, a comma for a value, a scalar for a key):
        # the scanner is lost and forbids nothing
        (b'{"a":[1},"', []),
        (b'{"a":{"b":1],"', []),
        (b'{"a"::1,"', []),
        (b'{"a":,"', []),
        (b'{"a":1,b,"', []),
        (b'{"a":1 2,"', []),
    ],
)
def test_scalars_spaces_undecodable_keys_and_text_that_is_not_json(guard, history, forbidden):
    ids = tokens_for(history, random.Random(0))
    assert [PIECES[t] for t in guard.new_state().forbidden(ids)] == forbidden
    assert guard.new_state().forbidden(ids) == slow_forbidden(PIECES, history, range(len(PIECES)))
