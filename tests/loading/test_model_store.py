"""Models by name (loading/model_store.py): the models directory, what stored_models lists, and what
resolve_model makes of each kind of --model value. A models directory in tmp_path, tiny random model files."""

import os
import shutil
import warnings

import pytest

from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm.errors import TinyLLMError
from tinyllm.loading.loader import load
from tinyllm.loading.model_store import (
    StoredModel,
    check_model_spec,
    find_stored,
    models_dir,
    resolve_model,
    stored_models,
)


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """A tiny GGUF file and a tiny Hugging Face folder to copy into models directories."""
    folder = tmp_path_factory.mktemp("tiny")
    model = random_tiny_llama(5)
    write_gguf(model, str(folder / "tiny.gguf"))
    write_hf_folder(model, str(folder / "hf"))
    return folder / "tiny.gguf", folder / "hf"


@pytest.fixture
def models(tmp_path, monkeypatch, tiny_files):
    """A models directory (TINYLLM_MODELS) and a function that puts a GGUF or a folder at a path in it."""
    gguf, hf = tiny_files
    root = tmp_path / "models"
    root.mkdir()
    monkeypatch.setenv("TINYLLM_MODELS", str(root))

    def put(relative: str) -> str:
        dest = root / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(hf, dest) if relative.endswith("/") else shutil.copyfile(gguf, dest)
        return str(dest)

    return root, put


def test_the_models_directory_is_read_at_each_call(tmp_path, monkeypatch):
    monkeypatch.delenv("TINYLLM_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir() == str(tmp_path / "home" / ".cache" / "tinyllm" / "models")
    monkeypatch.setenv("TINYLLM_MODELS", str(tmp_path / "elsewhere"))
    assert models_dir() == str(tmp_path / "elsewhere")


RULES = {  # path in the models directory -> its name (a trailing / marks a Hugging Face folder)
    "A.gguf": "A",
    "B/C.gguf": "B:C",
    "org/repo/Q8_0.gguf": "org/repo:Q8_0",
    "hf/": "hf",
    "org/hfrepo/": "org/hfrepo",
}


def test_every_rule_both_ways(models, default_model_path):
    root, put = models
    paths = {name: put(relative) for relative, name in RULES.items()}
    listed = stored_models()
    assert [m.name for m in listed] == ["smollm2:135m", *sorted(RULES.values())]  # the default first, then by name
    assert listed[0].path == default_model_path
    for m in listed[1:]:
        assert os.path.normpath(m.path) == os.path.normpath(paths[m.name])  # path -> name
        assert os.path.normpath(find_stored(m.name)) == os.path.normpath(m.path)  # name -> path
        assert m.format == ("safetensors" if os.path.isdir(m.path) else "gguf")
        assert m.size == (os.path.getsize(m.path) if m.format == "gguf" else _folder_size(m.path))


def _folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def test_a_name_without_a_tag_finds_the_one_model_under_it(models):
    _, put = models
    only = put("org/repo/Q8_0.gguf")
    assert find_stored("org/repo") == only
    assert find_stored("org/repo:latest") == only  # :latest is dropped where no latest.gguf is


def test_latest_is_a_tag_where_a_file_is_named_so(models):
    _, put = models
    a, latest = put("m/a.gguf"), put("m/latest.gguf")
    assert find_stored("m:latest") == latest and find_stored("m") == latest and find_stored("m:a") == a
    plain = put("p.gguf")
    assert find_stored("p:latest") == plain


def test_a_tag_is_found_in_any_case(models):
    _, put = models
    path = put("org/repo/Q8_0.gguf")
    assert find_stored("org/repo:q8_0") == path


def test_ambiguous_names_list_the_candidates(models):
    _, put = models
    put("org/two/Q8_0.gguf")
    put("org/two/F16.gguf")
    with pytest.raises(TinyLLMError, match=r"'org/two' names 2 models \(org/two:F16, org/two:Q8_0\)"):
        find_stored("org/two")
    put("x.gguf")
    put("x/")
    with pytest.raises(TinyLLMError, match="'x' names both .*x.gguf and the folder .*x"):
        find_stored("x")


def test_what_names_nothing(models):
    _, put = models
    put("org/repo/Q8_0.gguf")
    for name in ("org/repo:Q4_0", "org", "../models/org/repo:Q8_0", "org/repo/Q8_0.gguf", "nothing"):
        assert find_stored(name) is None, name


def test_split_parts_and_other_files_are_skipped_with_one_warning(models):
    root, put = models
    put("ok.gguf")
    put("big/m-00001-of-00002.gguf")
    (root / "notes.txt").write_text("not a model")
    (root / ".hidden.gguf.part").write_text("a pull under way")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = [m.name for m in stored_models()]
    assert names[1:] == ["ok"]
    assert len(caught) == 1 and "m-00001-of-00002.gguf" in str(caught[0].message)
    assert "notes.txt" not in str(caught[0].message)


def test_the_default_models_aliases(models, default_model_path):
    (default,) = stored_models()
    base = os.path.basename(default_model_path)
    assert default.name == "smollm2:135m"
    assert default.aliases == {"smollm2", "smollm2:latest", base, base.removesuffix(".gguf")}


def test_aliases_are_file_names_and_never_shared(models):
    _, put = models
    put("org/repo/Q8_0.gguf")
    put("mine/Q8_0.gguf")
    put("org/other/Special.gguf")
    put("hf/")
    aliases = {m.name: m.aliases for m in stored_models()}
    assert aliases["org/other:Special"] == {"Special.gguf", "Special"}
    assert aliases["org/repo:Q8_0"] == set() and aliases["mine:Q8_0"] == set()  # both files are Q8_0.gguf
    assert aliases["hf"] == {"hf:latest"}  # its folder's name is its name


def test_a_stored_model_checks_its_format():
    with pytest.raises(ValueError, match="format must be one of gguf, safetensors, got 'bin'"):
        StoredModel("m", "/x", "bin", 1, frozenset())


def test_resolve_each_kind_of_value(models, default_model_path, tmp_path):
    _, put = models
    stored = put("org/repo/Q8_0.gguf")
    for spec in (None, "smollm2:135m", "smollm2", "SmolLM2:latest"):
        assert resolve_model(spec) == default_model_path, spec
    assert resolve_model(stored) == stored  # an existing path is itself
    assert resolve_model("org/repo:Q8_0") == stored == resolve_model("org/repo")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope.gguf", "model path 'nope.gguf' does not exist (expected a .gguf file or a Hugging Face folder)"),
        ("/no/such/dir", "model path '/no/such/dir' does not exist"),
        ("./x", "model path './x' does not exist"),
        ("a/b/c", "model path 'a/b/c' does not exist"),
        (
            "bogus",
            "model 'bogus' is not a file, a folder, a name from `tinyllm list` or a Hugging Face id "
            "(org/name, org/name:QUANT or org/name/file.gguf)",
        ),
        ("llama3:8b", "model 'llama3:8b' is not a file, a folder, a name from `tinyllm list`"),
        ("bad name!", "model 'bad name!' is not a file"),
    ],
)
def test_values_that_name_nothing_say_what_was_expected(models, spec, message):
    for check in (resolve_model, check_model_spec):
        with pytest.raises(TinyLLMError) as exc:
            check(spec)
        assert message in str(exc.value)


def test_the_checks_take_hub_ids_without_the_network(models, tmp_path):
    for spec in ("org/name", "org/name:Q8_0", "org/name/sub/file.gguf"):
        check_model_spec(spec)  # spelled as a Hub id: looked up only when loaded
    (tmp_path / "empty").mkdir()
    with pytest.raises(TinyLLMError, match="has no config.json"):
        check_model_spec(str(tmp_path / "empty"))


def test_load_takes_a_name(models):
    _, put = models
    path = put("tiny/q.gguf")
    loaded = load("tiny:q")
    assert loaded.path == path and loaded.format == "gguf"
    folder = put("org/tinyhf/")
    assert load("org/tinyhf").path == folder


def test_a_linked_folder_is_listed_and_a_loop_is_walked_once(models, tmp_path, tiny_files):
    root, put = models
    outside = tmp_path / "outside"
    shutil.copytree(tiny_files[1], outside / "hfmodel")
    os.symlink(outside, root / "linked")
    os.symlink(root, root / "loop")
    names = [m.name for m in stored_models()]
    assert names[1:] == ["linked/hfmodel"]
    assert find_stored("linked/hfmodel") == str(root / "linked" / "hfmodel")
