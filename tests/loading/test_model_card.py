"""loading/model_card.py: the license a model's files name, from a GGUF's metadata or a folder's README."""

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm.loading.model_card import model_license


def test_a_folders_readme_front_matter_names_the_license(tmp_path):
    (tmp_path / "README.md").write_text(
        "---\nlanguage: en\nlicense: 'mit'\ntags: [x]\n---\n# A model\nlicense: not this\n"
    )
    assert model_license(str(tmp_path)) == "mit"
    (tmp_path / "README.md").write_text("# No front matter\nlicense: apache-2.0\n")
    assert model_license(str(tmp_path)) is None


def test_a_gguf_without_the_key_and_no_file_name_none(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_gguf(random_tiny_llama(1), str(path))
    assert model_license(str(path)) is None
    assert model_license(str(tmp_path / "absent.gguf")) is None and model_license("") is None
