"""loading/digest.py: a file's digest is its SHA-256, a folder's covers each file's name and bytes, and a new
version of the file (its size or time changed) is hashed again rather than read from the cache."""

import hashlib
import os

from tinyllm.loading.digest import model_digest


def test_a_files_digest_is_its_sha256_and_follows_a_new_version(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF one")
    assert model_digest(str(path)) == "sha256:" + hashlib.sha256(b"GGUF one").hexdigest()
    path.write_bytes(b"GGUF two!")  # another size
    assert model_digest(str(path)) == "sha256:" + hashlib.sha256(b"GGUF two!").hexdigest()


def test_a_folders_digest_covers_each_files_name_and_bytes(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    first = model_digest(str(tmp_path))
    assert first.startswith("sha256:") and model_digest(str(tmp_path)) == first
    os.rename(tmp_path / "config.json", tmp_path / "other.json")
    renamed = model_digest(str(tmp_path))
    assert renamed != first
    weights = tmp_path / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    weights.write_bytes(b"weightz")  # the same size: a new version by its time alone
    os.utime(weights, ns=(mtime + 10**9, mtime + 10**9))
    assert model_digest(str(tmp_path)) not in (first, renamed)


def test_no_path_no_digest():
    assert model_digest("") is None and model_digest("/no/such/model.gguf") is None
