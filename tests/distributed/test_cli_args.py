"""`tinyllm generate --tensor-parallel-size N` as a user runs it, and under torchrun: the workers load the file
themselves, the output equals one process's, and a size the heads do not divide by is one error line."""

import json
import os
import signal
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


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task"), reason="finds the worker through /proc")
def test_a_worker_killed_mid_generate_ends_the_command_with_one_line_naming_its_rank(tmp_path):
    path = str(tmp_path / "long.gguf")
    write_gguf(random_tiny_llama(31, max_position_embeddings=4096), path, quant_types={"weight": "Q8_0"})
    cmd = [sys.executable, "-m", "tinyllm", "generate", "the tin", "--model", path, "--max-tokens", "4000"]
    cmd += ["--ignore-eos", "--tensor-parallel-size", "2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    driver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert driver.stdout.read(1), driver.stderr.read().decode()  # text streams: the group is running
        (worker,) = children(driver.pid)
        os.kill(worker, signal.SIGKILL)
        driver.wait(timeout=60)
        err = driver.stderr.read().decode()
        assert driver.returncode == 3, err
        assert "Traceback" not in err
        (line,) = [x for x in err.splitlines() if x.strip()]
        assert line.startswith("tinyllm: error:") and "rank 1" in line, err
    finally:
        driver.kill()
        driver.wait()
