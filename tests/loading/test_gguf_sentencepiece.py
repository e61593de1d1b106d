"""GGUF files of the SentencePiece families end to end: the vocabulary of a real SentencePiece model,
written as llama.cpp's converter writes it, loads with the model; prompts encode as SentencePiece does,
transformers' own GGUF tokenizer agrees, and streamed text equals the full decode."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest

from helpers.family_models import hf_model, write_family_gguf
from helpers.spm_vocab import train_spm
from tinyllm import LLM
from tinyllm.loading.gguf_tokenizer import gguf_tokenizer
from tinyllm.text.tokenizer import Tokenizer

PADDING = 4  # "[PAD{i}]" pieces the converter adds when the model's vocabulary is larger
TEXTS = [
    "Hello world",
    "the quick brown fox",
    "two  spaces   three",
    "new\nline\n\n",
    "tab\there",
    "Café déjà vu",
    "日本語のテキスト",
    "한국어 텍스트",
    "Emoji 😀👍 🇫🇷",
    "rare ∫ √ ⊕",
    "def f(x):\n    return x\n",
    "trailing  ",
]
LEADING = [" leading", "   three", "\n newline first", "hi</s>the"]


@pytest.fixture(scope="module", params=["llama", "mistral", "phi3", "gemma2", "gemma3"])
def fam(request, tmp_path_factory):
    # Gemma's tokenizer adds no prefix space; the others do (llama.cpp's default for this vocabulary).
    sp = train_spm(add_dummy_prefix=not request.param.startswith("gemma"))
    model = hf_model(request.param, vocab_size=sp.vocab_size() + PADDING)
    folder = str(tmp_path_factory.mktemp("spm"))
    path = write_family_gguf(model, request.param, os.path.join(folder, f"{request.param}.gguf"), spm=sp)
    return SimpleNamespace(name=request.param, sp=sp, folder=folder, path=path, llm=LLM(path))


def test_prompt_ids_are_sentencepiece_ids_after_bos(fam):
    tok = fam.llm.tokenizer
    assert tok.kind == "SentencePiece BPE (GGUF)" and tok.vocab_size == fam.sp.vocab_size() + PADDING
    for text in TEXTS + LEADING[:3]:
        assert tok.encode(text) == [fam.sp.bos_id(), *fam.sp.encode(text)], text


def test_transformers_gguf_tokenizer_agrees(fam):
    """transformers rebuilds the tokenizer per architecture. Its Llama one (Metaspace, prefix only at the
    start) puts no extra "▁" before text that starts with a space or follows a special token, where
    SentencePiece and llama.cpp do; that is compared for the others only."""
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(fam.folder, gguf_file=os.path.basename(fam.path))
    tok = fam.llm.tokenizer
    texts = TEXTS + (LEADING if fam.name in ("phi3", "gemma2", "gemma3") else [])
    for text in texts:
        ids = tok.encode(text)
        assert ids == ref.encode(text), text
        assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.0, seed=7)])
def test_generates_and_streams_the_full_decode(fam, sampling):
    """Random weights pick byte pieces freely, so the output holds cut and ill-formed UTF-8 as well."""
    params = dict(max_tokens=24, ignore_eos=True, **sampling)
    g = fam.llm.generate("the quick brown fox", **params)
    assert len(g.ids) == 24 and g.text == fam.llm.tokenizer.decode(g.ids)
    # SentencePiece's text exactly, which has no control pieces and does not know the padding ones
    known = [i for i in g.ids if i < fam.sp.vocab_size()]
    assert fam.llm.tokenizer.decode(g.ids, skip_special_tokens=True) == fam.sp.decode(known)
    assert "".join(fam.llm.stream("the quick brown fox", **params)) == g.text


def test_same_tokenizer_from_the_file_and_from_its_metadata(fam):
    from tinyllm.loading.gguf_file import open_gguf

    text = "Emoji 😀 the 한국어"
    assert gguf_tokenizer(fam.path).encode(text) == Tokenizer.from_gguf_metadata(open_gguf(fam.path).metadata).encode(
        text
    )


def test_structured_output_over_the_sentencepiece_vocabulary(fam):
    """The grammar engine reads the same tokenizer: "▁" pieces are spaces, <0xXX> pieces bytes."""
    from tinyllm import StructuredOutput

    pattern = "[a-z]{3} [0-9]é日"
    for seed in range(3):
        g = fam.llm.generate("the", structured=StructuredOutput.regex(pattern), temperature=1.0, seed=seed)
        assert re.fullmatch(pattern, g.text) and g.finish_reason == "stop", g.text
