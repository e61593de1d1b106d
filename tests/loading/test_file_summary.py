"""file_summary: what a GGUF header or a Hugging Face folder says without loading weights, equal to what the
loaded model says of itself (LLM.info), and a summary that says "unknown" for what is not a model."""

import pytest

from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm import LLM
from tinyllm.loading.file_summary import file_summary, summary_of


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("summary")
    model = random_tiny_llama(5)
    gguf = str(root / "tiny.gguf")
    write_gguf(model, gguf, quant_types={"weight": "Q8_0"})
    return gguf, write_hf_folder(model, str(root / "hf"))


@pytest.mark.parametrize("kind", [0, 1], ids=["gguf", "folder"])
def test_the_summary_matches_the_loaded_models_own_info(files, kind):
    path = files[kind]
    summary, info = file_summary(path), LLM(path).info()
    for key in ("architecture", "parameters", "context_length", "hidden_size"):
        assert summary[key] == info[key], key
    assert summary["format"] == info["format"] == ("gguf", "safetensors")[kind]
    if kind == 0:  # a folder's types are its safetensors dtypes ("F32"), the loaded model's torch's ("float32")
        assert summary["weight_types"] == info["weight_types"]
    assert summary_of(path) == summary  # read once, then from its cache


def test_what_is_not_a_model_is_summarised_as_unknown(tmp_path):
    (tmp_path / "notes.gguf").write_bytes(b"not a gguf file")
    for path in (str(tmp_path / "notes.gguf"), str(tmp_path / "missing.gguf"), ""):
        assert summary_of(path)["format"] == "unknown" and summary_of(path)["parameters"] == 0
