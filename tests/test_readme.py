"""The README's server snippets (Python and shell) run as shown against a live `tinyllm serve` on 127.0.0.1."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.live_server import serve

README = Path(__file__).resolve().parent.parent / "README.md"
README_PORT = "8000"


def snippets(language: str, marker: str) -> list[str]:
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)
    return [b for b in blocks if marker in b]


@pytest.fixture(scope="module")
def live_server():
    with serve("--max-num-seqs", "4", "--kv-memory-gb", "0.1") as port:
        yield port


def run(cmd: list[str], port: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(README.parent)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_readme_server_snippets_run_as_shown(live_server):
    python, shell = snippets("python", "base_url="), snippets("bash", "curl ")
    assert python and shell
    for code in python:
        out = run([sys.executable, "-c", code.replace(README_PORT, str(live_server))], live_server)
        assert out.strip()  # the answer and its seed
    for code in shell:
        out = run(["bash", "-c", code.replace(README_PORT, str(live_server))], live_server)
        assert '"text_completion"' in out and '"error"' not in out


@pytest.mark.slow
def test_readme_library_snippet_runs_as_shown():
    (code,) = snippets("python", "tinyllm.LLM()")
    env = {**os.environ, "PYTHONPATH": str(README.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
