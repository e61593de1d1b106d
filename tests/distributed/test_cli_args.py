"""`tinyllm generate --tensor-parallel-size N` as a user runs it, and under torchrun: the workers load the file
themselves, the output equals one process's, and a size the heads do not divide by is one error line."""

import json
import os
import subprocess
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM


def run(*args, launcher=()):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, *launcher, "-m", "tinyllm", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tp") / "tiny.gguf")
    write_gguf(random_tiny_llama(31), path, quant_types={"weight": "Q8_0"})  # 4 heads, 2 KV heads
    return path


def greedy_ids(path):
    return LLM(path).generate("the tin", max_tokens=8, temperature=0, ignore_eos=True).ids


@pytest.mark.slow
def test_generate_over_two_processes_and_a_refused_size(tiny_gguf):
    args = ("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "8", "--json", "--ignore-eos")
    r = run(*args, "--tensor-parallel-size", "2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ids"] == greedy_ids(tiny_gguf)
    r = run(*args, "--tensor-parallel-size", "3")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "tinyllm: error: the model's 4 attention heads do not divide by tensor_parallel_size=3"
    ]


@pytest.mark.slow
def test_torchrun_starts_the_ranks_and_rank_0_drives(tiny_gguf):
    torchrun = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
    args = ("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "8", "--json", "--ignore-eos")
    r = run(*args, launcher=torchrun)
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.strip().splitlines()  # rank 1 served as a worker and printed nothing
    assert json.loads(line)["ids"] == greedy_ids(tiny_gguf)
