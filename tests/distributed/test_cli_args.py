"""`tinyllm generate --tensor-parallel-size N` as a user runs it: the workers load the file themselves, the
output equals one process's, and a size the heads do not divide by is one error line."""

import json
import os
import subprocess
import sys

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM


def run(*args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "tinyllm", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_generate_over_two_processes_and_a_refused_size(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    write_gguf(random_tiny_llama(31), path, quant_types={"weight": "Q8_0"})  # 4 heads, 2 KV heads
    args = ("generate", "the tin", "--model", path, "--max-tokens", "8", "--json", "--ignore-eos")
    r = run(*args, "--tensor-parallel-size", "2")
    assert r.returncode == 0, r.stderr
    want = LLM(path).generate("the tin", max_tokens=8, temperature=0, ignore_eos=True)
    assert json.loads(r.stdout)["ids"] == want.ids and len(want.ids) == 8
    r = run(*args, "--tensor-parallel-size", "3")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "tinyllm: error: the model's 4 attention heads do not divide by tensor_parallel_size=3"
    ]
