"""Hugging Face ids (loading/hub.py): how an id is read and which of a repo's files it names. The downloads, the
cache and offline mode run against a local Hub in tests/test_cli_models.py."""

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.loading.hub import HubFiles, HubId, choose_files, parse_hub_id
from tinyllm.loading.model_store_edits import pulled_name


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("org/name", HubId("org/name")),
        ("org/name:Q8_0", HubId("org/name", tag="Q8_0")),
        ("org/name/file.gguf", HubId("org/name", file="file.gguf")),
        ("org/name/sub/File.GGUF", HubId("org/name", file="sub/File.GGUF")),
        ("Org-1/na.me_2:q4_k_m", HubId("Org-1/na.me_2", tag="q4_k_m")),
    ],
)
def test_the_three_forms_of_an_id(text, parsed):
    assert parse_hub_id(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["name", "org/", "/name", "org/name:", "org/name:a:b", "org/name/file.bin", "a b/c"])
def test_what_is_not_an_id(text):
    assert parse_hub_id(text) is None


GGUF_REPO = ["README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-Q4_K_S.gguf", "mmproj-m-F16.gguf", "sub/m-F16.gguf"]


@pytest.mark.parametrize(
    "hub_id, files",
    [
        (HubId("o/m", tag="q8_0"), ["m-Q8_0.gguf"]),  # any case
        (HubId("o/m", tag="F16"), ["sub/m-F16.gguf"]),  # not the vision projector
        (HubId("o/m"), ["m-Q4_K_M.gguf"]),  # several: Q4_K_M
        (HubId("o/m", file="M-Q4_K_S.gguf"), ["m-Q4_K_S.gguf"]),
    ],
)
def test_a_gguf_repo_gives_the_named_file(hub_id, files):
    assert choose_files(hub_id, GGUF_REPO) == files


def test_a_gguf_repo_of_one_file_gives_it_without_a_tag():
    assert choose_files(HubId("o/m"), ["README.md", "only.gguf"]) == ["only.gguf"]


@pytest.mark.parametrize(
    "hub_id, files, message",
    [
        (HubId("o/m", tag="Q4_K"), GGUF_REPO, r"2 \.gguf files of o/m have 'Q4_K' in their names \(m-Q4_K_M\.gguf, "),
        (HubId("o/m", tag="Q5_0"), GGUF_REPO, r"no \.gguf file of o/m has 'Q5_0' in its name; its \.gguf files are: "),
        (HubId("o/m"), ["a-Q8_0.gguf", "a-F16.gguf"], r"o/m holds 2 \.gguf files \(a-F16\.gguf, a-Q8_0\.gguf\); "),
        (HubId("o/m", file="x.gguf"), GGUF_REPO, r"no \.gguf file of o/m is named 'x\.gguf'"),
        (HubId("o/m"), ["README.md", "model.bin"], "o/m holds no .gguf file and no config.json with .safetensors"),
        (HubId("o/m", tag="Q8_0"), ["config.json", "model.safetensors"], r"its \.gguf files are: none"),
    ],
)
def test_what_names_no_one_file_says_which_there_are(hub_id, files, message):
    with pytest.raises(TinyLLMError, match=message):
        choose_files(hub_id, files)


@pytest.mark.parametrize(
    "hub_id", [HubId("o/m", tag="Q8_0"), HubId("o/m"), HubId("o/m", file="m-Q8_0-00001-of-00002.gguf")]
)
def test_split_gguf_parts_are_refused_by_name(hub_id):
    files = ["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
    with pytest.raises(TinyLLMError, match="is one part of a split GGUF, which tinyllm cannot load; merge the parts"):
        choose_files(hub_id, files)


def test_a_safetensors_repo_gives_what_a_model_needs():
    files = [".gitattributes", "README.md", "config.json", "generation_config.json", "tokenizer.json"]
    files += ["tokenizer_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    files += ["model.safetensors.index.json", "pytorch_model.bin", "onnx/model.onnx", "sub/x.safetensors"]
    assert choose_files(HubId("o/m"), files) == [
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


@pytest.mark.parametrize(
    "hub_id, file, name",
    [
        (HubId("o/m", tag="q8_0"), "m-Q8_0.gguf", "o/m:Q8_0"),  # the tag asked for
        (HubId("o/m"), "m-Q4_K_M.gguf", "o/m:Q4_K_M"),  # the type the file name ends with
        (HubId("o/m"), "SmolLM2.IQ4_XS.gguf", "o/m:IQ4_XS"),
        (HubId("o/m", file="sub/model.gguf"), "sub/model.gguf", "o/m:model"),  # else the file's name
    ],
)
def test_the_name_a_pulled_gguf_gets(hub_id, file, name):
    assert pulled_name(hub_id, HubFiles("/cache/snap", (file,))) == name


def test_a_pulled_safetensors_repo_is_named_by_the_repo():
    assert pulled_name(HubId("o/m"), HubFiles("/cache/snap", ("config.json", "model.safetensors"))) == "o/m"
