"""The models directory's naming rule (loading/model_names.py), both ways: name -> path -> name."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinyllm.loading.model_names import folder_name, gguf_name, gguf_parts, is_name, is_split_part

PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,8}", fullmatch=True)


@pytest.mark.parametrize(
    "parts, name",
    [
        (["A"], "A"),  # DIR/A.gguf
        (["A", "B"], "A:B"),  # DIR/A/B.gguf
        (["A", "B", "C"], "A/B:C"),  # DIR/A/B/C.gguf
        (["org", "repo", "Q4_K_M"], "org/repo:Q4_K_M"),
    ],
)
def test_a_gguf_path_and_its_name(parts, name):
    assert gguf_name(parts) == name
    expected = None if len(parts) == 1 else [*parts[:-1], parts[-1] + ".gguf"]  # an untagged name: model_store's
    assert gguf_parts(name) == expected


@pytest.mark.parametrize("parts, name", [(["A"], "A"), (["A", "B"], "A/B"), (["org", "my.repo-v2"], "org/my.repo-v2")])
def test_a_folder_path_and_its_name(parts, name):
    assert folder_name(parts) == name


@given(st.lists(PART, min_size=2, max_size=4))
def test_every_tagged_gguf_name_goes_to_its_path_and_back(parts):
    name = gguf_name(parts)
    assert name is not None and name.count(":") == 1
    back = gguf_parts(name)
    assert back[:-1] + [back[-1].removesuffix(".gguf")] == parts


@given(st.lists(PART, min_size=1, max_size=4))
def test_every_folder_name_is_its_path_joined(parts):
    assert folder_name(parts).split("/") == parts


@pytest.mark.parametrize(
    "text", ["", "../x", "a/../b", "/abs", ".hidden", "a//b", "a:b:c", "a:b/c", "a b", "a:", ":b", "a/", "~/x"]
)
def test_what_is_not_a_name(text):
    assert not is_name(text)


def test_paths_that_spell_no_name_give_none():
    assert gguf_name(["a b"]) is None and gguf_name([".x", "y"]) is None
    assert folder_name(["..", "x"]) is None


@pytest.mark.parametrize(
    "file, split", [("m-00001-of-00003.gguf", True), ("M-00003-OF-00003.GGUF", True), ("m-0001-of-0003.gguf", False)]
)
def test_split_parts_are_told_by_their_file_name(file, split):
    assert is_split_part(file) is split
