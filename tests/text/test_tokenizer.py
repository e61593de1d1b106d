"""Tokenizer: ids equal the references, text round-trips, chat templates render as transformers does."""

import json
import os
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from tinyllm.errors import TinyLLMError
from tinyllm.loading.gguf_file import GGUFFile
from tinyllm.loading.gguf_tokenizer import gguf_tokenizer
from tinyllm.text.pretokenizers import PRE_TOKENIZERS
from tinyllm.text.tokenizer import Tokenizer

CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock!",
    "Café déjà vu, señor Müller: ñandú, über, naïve.",
    "日本語のテキストと中文文本，한국어 텍스트도。",
    "Emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and 🏳️‍🌈",
    "12345678",
    "3.14159",
    "pi is 3.14159 and e is 2.71828, year 2024",
    "x1y22z333",
    "two  spaces   three    four",
    "tab\there\t\tthere",
    "new\nline",
    "\n\n\n",
    "trailing spaces   ",
    "   leading spaces",
    " ",
    "",
    "\r\n windows\r\n",
    "a\u00a0non-breaking space",
    "def f(x):\n    if x:\n        return x * 2\n    return None\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>more<|endoftext|>",
    "don't I'LL we've THEY'RE she'd it's",
    "Hello , world ! it 's  ( spaced ) punctuation ... ?!",
    "¿Qué? ¡Sí! «quotes» “curly” — dash… ellipsis",
    "Ünïcödé ÀÉÎÕÜ ßẞ ĳ Ω≈ç√∫",
]
# A digit after two or more whitespace characters is where SmolLM2's tokenizer.json (digits are
# split off first) and transformers' GGUF conversion (plain GPT-2 splitting) disagree.
DIGIT_AFTER_SPACES = ["  3", "a  12", "\n\n1", "x\t 7 y", "total:   42", "1.\n\n2.", "  ½"]


# ---- the real SmolLM2 tokenizer against its references ---------------------------------


@pytest.fixture(scope="module")
def reference(default_model_path):
    """transformers' own tokenizer for the same GGUF file."""
    from transformers import AutoTokenizer

    folder, name = os.path.split(default_model_path)
    return AutoTokenizer.from_pretrained(folder, gguf_file=name)


@pytest.fixture(scope="module")
def tokenizer_json(reference):
    """The same vocabulary with the pre-tokenizer SmolLM2's tokenizer.json states:
    Digits(individual_digits=True), then ByteLevel with the GPT-2 regex."""
    hf = HFTokenizer.from_str(reference.backend_tokenizer.to_str())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return hf


def _has_digit_after_spaces(text):
    return any(
        text[i].isspace() and text[i + 1].isspace() and unicodedata.category(text[i + 2])[0] == "N"
        for i in range(len(text) - 2)
    )


def test_metadata_of_default_model(smollm_tokenizer):
    tok = smollm_tokenizer
    assert tok.kind == "byte-level BPE (pre-tokenizer: smollm)"
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    assert tok.eot_ids == (0, 2)  # <|endoftext|> and <|im_end|>
    assert tok.stop_ids == (0, 2)
    assert tok.chat_template.startswith("{% for message in messages %}")


@pytest.mark.slow
@pytest.mark.parametrize("text", CORPUS)
def test_encode_equals_transformers(smollm_tokenizer, reference, text):
    assert not _has_digit_after_spaces(text)
    expected = reference.encode(text, add_special_tokens=False)
    assert smollm_tokenizer.encode(text, add_special_tokens=False) == expected
    # Neither adds BOS for this model (tokenizer.ggml.add_bos_token is false).
    assert smollm_tokenizer.encode(text) == reference.encode(text) == expected


@pytest.mark.parametrize("text", CORPUS + DIGIT_AFTER_SPACES)
def test_encode_equals_tokenizer_json(smollm_tokenizer, tokenizer_json, text):
    assert smollm_tokenizer.encode(text) == tokenizer_json.encode(text, add_special_tokens=False).ids


def test_digit_after_spaces_is_split_like_tokenizer_json(smollm_tokenizer, reference):
    # "  3" is "  " then "3" (256 = "ĠĠ", 35 = "3"); transformers' GGUF path gives " ", " 3" instead.
    assert smollm_tokenizer.encode("  3") == [256, 35]
    assert reference.encode("  3", add_special_tokens=False) == [216, 216, 35]


def test_known_ids(smollm_tokenizer):
    # Ids llama.cpp produces for this vocabulary.
    assert smollm_tokenizer.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]
    assert smollm_tokenizer.encode("  multiple   spaces") == [216, 2701, 256, 5600]
    assert smollm_tokenizer.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text())
def test_encode_equals_tokenizer_json_on_any_text(smollm_tokenizer, tokenizer_json, text):
    assert smollm_tokenizer.encode(text) == tokenizer_json.encode(text, add_special_tokens=False).ids


def _byte_spelling():
    """GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the rest
    are moved up past U+00FF in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = iter(range(256, 512))
    return {b: chr(b) if b in printable else chr(next(moved)) for b in range(256)}


@pytest.fixture(scope="module")
def missing_bytes(smollm_tokenizer):
    """Bytes with no token in SmolLM2's vocabulary (some control characters, and UTF-8 lead bytes
    of never-used planes); characters containing them cannot be encoded by any implementation."""
    vocab = smollm_tokenizer.hf.get_vocab()
    return {b for b, c in _byte_spelling().items() if c not in vocab}


def test_missing_bytes_are_dropped_like_the_references(smollm_tokenizer, reference, missing_bytes):
    assert {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2} <= missing_bytes
    text = "a\x04b\U00040000c"  # \U00040000 is F1 80 80 80 in UTF-8
    assert smollm_tokenizer.encode(text) == reference.encode(text, add_special_tokens=False)
    assert smollm_tokenizer.decode(smollm_tokenizer.encode(text)) == "ab\ufffd\ufffd\ufffdc"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decode_encode_round_trip(smollm_tokenizer, missing_bytes, data):
    encodable = st.characters(exclude_categories=["Cs"]).filter(
        lambda c: not missing_bytes.intersection(c.encode("utf-8"))
    )
    text = data.draw(st.text(alphabet=encodable))
    assert smollm_tokenizer.decode(smollm_tokenizer.encode(text)) == text


@pytest.mark.parametrize("text", CORPUS)
def test_decode_keeps_text_exactly(smollm_tokenizer, text):
    assert smollm_tokenizer.decode(smollm_tokenizer.encode(text)) == text


def test_decode_special_tokens(smollm_tokenizer):
    ids = smollm_tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
    assert smollm_tokenizer.decode(ids) == "<|im_start|>user\nhi<|im_end|>"
    assert smollm_tokenizer.decode(ids, skip_special_tokens=True) == "user\nhi"


def test_token_text(smollm_tokenizer):
    tok = smollm_tokenizer
    assert tok.token_text(216) == " "
    assert tok.token_text(2) == "<|im_end|>"
    assert tok.token_text(905) == " world"
    first_byte_of_e_acute = tok.hf.token_to_id("Ã")  # 0xC3 alone is not a whole character
    assert tok.token_text(first_byte_of_e_acute) == "\ufffd"


@pytest.mark.parametrize("bad", [[-1], [49152], [1.5], ["a"]])
def test_decode_rejects_bad_ids(smollm_tokenizer, bad):
    with pytest.raises(TinyLLMError, match=re.escape(repr(bad[0]))):
        smollm_tokenizer.decode(bad)


def test_encode_rejects_non_text(smollm_tokenizer):
    with pytest.raises(TinyLLMError, match="bytes"):
        smollm_tokenizer.encode(b"hi")


CONVERSATIONS = [
    [{"role": "user", "content": "Hi there!"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_equals_transformers(smollm_tokenizer, reference, messages, add_generation_prompt):
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert smollm_tokenizer.apply_chat_template(messages, add_generation_prompt) == expected


def test_chat_template_default_adds_generation_prompt(smollm_tokenizer):
    text = smollm_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "messages",
    ["hi", [{"role": "user"}], [{"role": "user", "content": 3}], [("user", "hi")], {"role": "user", "content": "hi"}],
)
def test_chat_template_rejects_malformed_messages(smollm_tokenizer, messages):
    with pytest.raises(TinyLLMError, match="expected"):
        smollm_tokenizer.apply_chat_template(messages)


def _metadata_like(tok):
    """GGUF metadata rebuilt from a tokenizer: its vocabulary, merges and control tokens."""
    model = json.loads(tok.hf.to_str())["model"]
    tokens = [tok.hf.id_to_token(i) for i in range(tok.vocab_size)]
    control = {t.content for t in tok.hf.get_added_tokens_decoder().values() if t.special}
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t in control else 1 for t in tokens],
        "tokenizer.ggml.merges": [m if isinstance(m, str) else " ".join(m) for m in model["merges"]],
        "tokenizer.ggml.bos_token_id": tok.bos_id,
        "tokenizer.ggml.eos_token_id": tok.eos_id,
    }


def test_rebuilt_from_its_own_metadata_encodes_the_same(smollm_tokenizer):
    tok = Tokenizer.from_gguf_metadata(_metadata_like(smollm_tokenizer))
    for text in CORPUS + DIGIT_AFTER_SPACES:
        assert tok.encode(text) == smollm_tokenizer.encode(text)


def test_from_hf_folder_of_saved_reference(reference, tmp_path):
    reference.save_pretrained(tmp_path)
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    for text in CORPUS:
        assert tok.encode(text) == reference.encode(text)
    messages = CONVERSATIONS[1]
    assert tok.apply_chat_template(messages) == reference.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


# ---- a tiny byte-level BPE built in the test -----------------------------------------------

BYTES = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 one-character byte spellings
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("Ġw", "o"), ("1", "2"), ("12", "3")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|custom_end|>"]
TEMPLATE = (
    "{% for m in messages %}{{ bos_token }}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}{{ bos_token }}assistant: {% endif %}"
)


def _tiny_tokens():
    return BYTES + ["".join(pair) for pair in MERGES] + SPECIALS


def tokens_index(text):
    return _tiny_tokens().index(text)


def _write_tiny_folder(folder, config=None, generation=None, bos_post_processor=False):
    tokens = _tiny_tokens()
    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=MERGES))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    if bos_post_processor:
        hf.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", tokens.index("<|im_start|>"))]
        )
    hf.save(str(folder / "tokenizer.json"))
    for name, content in (("tokenizer_config.json", config), ("generation_config.json", generation)):
        if content is not None:
            (folder / name).write_text(json.dumps(content))
    return tokens


def test_tiny_hf_folder(tmp_path):
    tokens = _write_tiny_folder(
        tmp_path,
        config={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": TEMPLATE},
        generation={"eos_token_id": [tokens_index("<|im_end|>"), tokens_index("<|custom_end|>")]},
    )
    tok = Tokenizer.from_hf_folder(tmp_path)
    ids = {t: i for i, t in enumerate(tokens)}
    assert tok.kind == "byte-level BPE (tokenizer.json)"
    assert tok.vocab_size == len(tokens)
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (ids["<|im_start|>"], ids["<|im_end|>"], False)
    # <|im_end|> and <|endoftext|> are found by their text, <|custom_end|> from generation_config.json
    assert tok.stop_ids == tuple(sorted([ids["<|im_end|>"], ids["<|endoftext|>"], ids["<|custom_end|>"]]))
    assert tok.encode("hello world 123") == [
        ids["hello"],
        ids["Ġwo"],
        ids["r"],
        ids["l"],
        ids["d"],
        ids["Ġ"],
        ids["123"],
    ]
    assert tok.encode("<|im_end|>hello") == [ids["<|im_end|>"], ids["hello"]]
    assert tok.decode(tok.encode("hello  wörld\n")) == "hello  wörld\n"
    messages = [{"role": "user", "content": "hello"}]
    assert tok.apply_chat_template(messages) == "<|im_start|>user: hello<|im_end|>\n<|im_start|>assistant: "
    assert tok.apply_chat_template(messages, add_generation_prompt=False) == "<|im_start|>user: hello<|im_end|>\n"


def test_tiny_hf_folder_bos_from_post_processor(tmp_path):
    _write_tiny_folder(tmp_path, config={"bos_token": "<|im_start|>"}, bos_post_processor=True)
    tok = Tokenizer.from_hf_folder(tmp_path)
    bos = tokens_index("<|im_start|>")
    assert tok.add_bos and tok.bos_id == bos
    assert tok.encode("hello") == [bos, tokens_index("hello")]
    assert tok.encode("hello", add_special_tokens=False) == [tokens_index("hello")]
    assert tok.decode(tok.encode("hello")[1:]) == "hello"


def test_tiny_hf_folder_config_overrides_post_processor(tmp_path):
    _write_tiny_folder(
        tmp_path, config={"bos_token": {"content": "<|im_start|>"}, "add_bos_token": False}, bos_post_processor=True
    )
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert not tok.add_bos and tok.bos_id == tokens_index("<|im_start|>")
    assert tok.encode("hello") == [tokens_index("hello")]


def test_tiny_hf_folder_chat_template_file_and_named_list(tmp_path):
    _write_tiny_folder(
        tmp_path,
        config={"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ 'D' }}"}]},
    )
    assert Tokenizer.from_hf_folder(tmp_path).chat_template == "{{ 'D' }}"
    (tmp_path / "chat_template.jinja").write_text("{{ 'J' }}")
    assert Tokenizer.from_hf_folder(tmp_path).apply_chat_template([]) == "J"


def test_hf_folder_without_tokenizer_json(tmp_path):
    with pytest.raises(TinyLLMError, match="tokenizer.json"):
        Tokenizer.from_hf_folder(tmp_path)


def test_no_chat_template(tmp_path):
    _write_tiny_folder(tmp_path)
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert tok.chat_template is None and tok.bos_id is None
    assert tok.stop_ids == (tokens_index("<|endoftext|>"), tokens_index("<|im_end|>"))
    with pytest.raises(TinyLLMError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_template_raise_exception_becomes_user_error(tmp_path):
    _write_tiny_folder(tmp_path, config={"chat_template": "{{ raise_exception('roles must alternate') }}"})
    with pytest.raises(TinyLLMError, match="roles must alternate"):
        Tokenizer.from_hf_folder(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}])


def test_template_helpers_match_transformers(tmp_path):
    template = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson }}{% endfor %}"
    _write_tiny_folder(tmp_path, config={"chat_template": template})
    out = Tokenizer.from_hf_folder(tmp_path).apply_chat_template(
        [{"role": "user", "content": "é <b>"}, {"role": "user", "content": "x"}]
    )
    assert out == '{"role": "user", "content": "é <b>"}'


# ---- GGUF metadata built by hand --------------------------------------------------------------


def _tiny_metadata(pre, **extra):
    merged = ["".join(pair) for pair in MERGES]
    tokens = BYTES + merged + ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * (len(tokens) - 4) + [3, 3, 3, 4],
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in MERGES],
        "tokenizer.ggml.bos_token_id": tokens.index("<|im_start|>"),
        "tokenizer.ggml.eos_token_id": tokens.index("<|endoftext|>"),
        "tokenizer.chat_template": TEMPLATE,
    }
    metadata.update(extra)
    return metadata, {t: i for i, t in enumerate(tokens)}


def _spell(pieces):
    return [p.replace(" ", "Ġ").replace("\n", "Ċ") for p in pieces]


PROBE = "I'LL  go 12345\n\n x"
EXPECTED_PIECES = {
    "smollm": ["I", "'", "LL", " ", " go", " ", "1", "2", "3", "4", "5", "\n\n", " x"],
    "gpt2": ["I", "'", "LL", " ", " go", " 12345", "\n\n", " x"],
    "llama-bpe": ["I", "'LL", " ", " go", " ", "123", "45", "\n\n", " x"],
    "qwen2": ["I", "'LL", " ", " go", " ", "1", "2", "3", "4", "5", "\n\n", " x"],
}


@pytest.mark.parametrize("pre", sorted(PRE_TOKENIZERS))
def test_from_gguf_metadata_each_pre_tokenizer(pre):
    metadata, ids = _tiny_metadata(pre)
    tok = Tokenizer.from_gguf_metadata(metadata)
    spec = PRE_TOKENIZERS[pre]
    assert tok.kind == f"byte-level BPE (pre-tokenizer: {spec.name})"
    assert tok.vocab_size == len(ids)
    assert (tok.bos_id, tok.eos_id) == (ids["<|im_start|>"], ids["<|endoftext|>"])
    assert tok.stop_ids == (ids["<|endoftext|>"], ids["<|im_end|>"])
    assert tok.add_bos == (spec.name == "llama-bpe")  # llama.cpp's default when the file is silent
    body = tok.encode("<|im_start|>hello<think>", add_special_tokens=False)
    assert body == [ids["<|im_start|>"], ids["hello"], ids["<think>"]]
    assert tok.encode("hello") == ([ids["<|im_start|>"]] if tok.add_bos else []) + [ids["hello"]]
    assert tok.hf.encode("hello").ids == tok.encode("hello")  # hf's post-processor agrees about BOS
    assert tok.decode(tok.encode(PROBE, add_special_tokens=False)) == PROBE
    # control tokens are skipped as special, user-defined ones are kept as text (as llama.cpp does)
    assert tok.decode(body, skip_special_tokens=True) == "hello<think>"
    pieces = [p for p, _ in tok.hf.pre_tokenizer.pre_tokenize_str(PROBE)]
    assert pieces == _spell(EXPECTED_PIECES[spec.name])


def test_from_gguf_accepts_opened_file():
    metadata, ids = _tiny_metadata("smollm")
    tok = gguf_tokenizer(GGUFFile(path="tiny.gguf", metadata=metadata, tensors={}))
    assert tok.encode("hello") == [ids["hello"]]


def test_from_gguf_missing_file(tmp_path):
    with pytest.raises(TinyLLMError, match="does not exist"):
        gguf_tokenizer(tmp_path / "missing.gguf")


def test_gguf_add_bos_token_flag_wins():
    metadata, ids = _tiny_metadata("smollm", **{"tokenizer.ggml.add_bos_token": True})
    tok = Tokenizer.from_gguf_metadata(metadata)
    assert tok.add_bos and tok.encode("hello") == [ids["<|im_start|>"], ids["hello"]]
    assert tok.decode(tok.encode("hello")[1:]) == "hello"
    metadata, ids = _tiny_metadata("llama-bpe", **{"tokenizer.ggml.add_bos_token": False})
    assert Tokenizer.from_gguf_metadata(metadata).encode("hello") == [ids["hello"]]


def test_gguf_digit_merges_follow_pre_tokenizer():
    for pre, expected in (
        ("gpt2", ["123"]),
        ("llama-bpe", ["123"]),
        ("smollm", ["1", "2", "3"]),
        ("qwen2", ["1", "2", "3"]),
    ):
        metadata, ids = _tiny_metadata(pre, **{"tokenizer.ggml.add_bos_token": False})
        assert Tokenizer.from_gguf_metadata(metadata).encode("123") == [ids[t] for t in expected], pre


def test_gguf_ignore_merges_for_llama3():
    # "hello" is a vocabulary entry whose merges are missing: Llama 3 (ignore_merges) uses it whole.
    merges = [f"{a} {b}" for a, b in MERGES if (a, b) != ("hell", "o")]
    for pre, whole in (("llama-bpe", True), ("gpt2", False)):
        metadata, ids = _tiny_metadata(pre, **{"tokenizer.ggml.merges": merges, "tokenizer.ggml.add_bos_token": False})
        expected = [ids["hello"]] if whole else [ids["hell"], ids["o"]]
        assert Tokenizer.from_gguf_metadata(metadata).encode("hello") == expected, pre


def test_gguf_add_space_prefix():
    metadata, ids = _tiny_metadata("gpt2", **{"tokenizer.ggml.add_space_prefix": True})
    tok = Tokenizer.from_gguf_metadata(metadata)
    assert tok.encode("wo") == [ids["Ġwo"]]
    assert tok.encode(" wo") == [ids["Ġwo"]]
    assert tok.encode("hello wo") == [ids["Ġ"], ids["hello"], ids["Ġwo"]]


def test_gguf_chat_template(tmp_path):
    metadata, _ = _tiny_metadata("qwen2")
    tok = Tokenizer.from_gguf_metadata(metadata)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user: hi<|endoftext|>\n<|im_start|>assistant: "
    )
    del metadata["tokenizer.chat_template"]
    with pytest.raises(TinyLLMError, match="no chat template"):
        Tokenizer.from_gguf_metadata(metadata).apply_chat_template([{"role": "user", "content": "hi"}])


def test_gguf_unknown_pre_tokenizer():
    metadata, _ = _tiny_metadata("falcon-9000")
    with pytest.raises(TinyLLMError, match="'falcon-9000'.*smollm") as info:
        Tokenizer.from_gguf_metadata(metadata)
    for name in ("gpt2", "llama-bpe", "qwen2"):
        assert name in str(info.value)


@pytest.mark.parametrize("model", ["t5", "bert", None])
def test_gguf_unsupported_model(model):
    metadata, _ = _tiny_metadata("smollm", **{"tokenizer.ggml.model": model})
    with pytest.raises(TinyLLMError, match=re.escape(repr(model))):
        Tokenizer.from_gguf_metadata(metadata)


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("tokenizer.ggml.merges", ["h e", "nospace"], "nospace"),
        ("tokenizer.ggml.merges", ["q z"], "BPE"),
        ("tokenizer.ggml.tokens", None, "tokenizer.ggml.tokens"),
        ("tokenizer.ggml.bos_token_id", 10_000, "10000"),
    ],
)
def test_gguf_bad_metadata(key, value, named):
    metadata, _ = _tiny_metadata("smollm", **{key: value})
    with pytest.raises(TinyLLMError, match=named):
        Tokenizer.from_gguf_metadata(metadata)
