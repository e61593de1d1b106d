"""The two-machine recipe on one machine, over loopback: a driver with ranks 0 and 1 and two `tinyllm worker`
commands started on their own (ranks 2 and 3) give one process's greedy ids; a worker killed mid-run fails the
step naming its rank; a driver killed mid-run leaves no worker behind (checked by PID)."""

import json
import os
import select
import signal
import socket
import subprocess
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM

WITHIN_S = 10  # a lost driver or worker is noticed within a heartbeat or two; this leaves room for a busy machine
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")

DRIVER = """\
import json, sys
from tinyllm import LLM
from tinyllm.distributed.config import ParallelConfig
llm = LLM(sys.argv[1], parallel=ParallelConfig(4, master_port=int(sys.argv[2]), num_local_ranks=2))
ids = llm.generate("the tin", max_tokens=8, temperature=0, ignore_eos=True).ids
print(json.dumps({"ids": ids, "pids": [w.pid for w in llm.tensor_parallel.workers]}))
for piece in llm.stream("the tin", max_tokens=3000, temperature=0, ignore_eos=True):
    print("streaming")
"""


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tp") / "tiny.gguf")
    model = random_tiny_llama(31, max_position_embeddings=4096)  # room for a run long enough to interrupt
    write_gguf(model, path, quant_types={"weight": "Q8_0"})
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tinyllm(*args, log) -> subprocess.Popen:
    command = [sys.executable, "-m", "tinyllm", *args]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=ENV)


def remote_workers(path: str, port: int, folder) -> dict[int, subprocess.Popen]:
    """Ranks 2 and 3 as the other machine would start them, each its own command."""
    group = ("--model", path, "--tensor-parallel-size", "4", "--master-addr", "127.0.0.1", "--master-port", str(port))
    logs = {rank: open(folder / f"rank{rank}.log", "wb") for rank in (2, 3)}
    return {rank: tinyllm("worker", *group, "--rank", str(rank), log=log) for rank, log in logs.items()}


def read_line(process: subprocess.Popen, timeout_s: float = 300) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, "the driver printed nothing"
    return process.stdout.readline().decode()


def local_workers(driver_pid: int) -> list[int]:
    """The `tinyllm worker` processes a driver started (Linux /proc)."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                is_worker = b"worker" in f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if parent == driver_pid and is_worker:
            pids.append(int(entry))
    return pids


@pytest.mark.slow
def test_the_recipe_gives_one_process_s_ids_and_a_killed_driver_leaves_no_worker(tiny_gguf, tmp_path, all_gone):
    port = free_port()
    workers = remote_workers(tiny_gguf, port, tmp_path)
    command = [sys.executable, "-c", DRIVER, tiny_gguf, str(port)]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "wb"), env=ENV)
    try:
        result = json.loads(read_line(driver))
        assert result["ids"] == LLM(tiny_gguf).generate("the tin", max_tokens=8, temperature=0, ignore_eos=True).ids
        assert read_line(driver) == "streaming\n"
        driver.send_signal(signal.SIGKILL)  # no close(), no atexit: only the workers' own watch can end them
        driver.wait()
        (local,) = result["pids"]
        assert all_gone([local, *(w.pid for w in workers.values())], within_s=WITHIN_S)
    finally:
        for process in (driver, *workers.values()):
            process.kill()
            process.wait()


@pytest.mark.slow
def test_a_worker_killed_mid_run_fails_the_step_naming_its_rank(tiny_gguf, tmp_path, all_gone):
    port = free_port()
    workers = remote_workers(tiny_gguf, port, tmp_path)
    recipe = ("--tensor-parallel-size", "4", "--num-local-ranks", "2", "--master-port", str(port))
    run = ("generate", "the tin", "--model", tiny_gguf, "--max-tokens", "3000", "--ignore-eos", *recipe)
    log = tmp_path / "driver.log"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tinyllm", *run], stdout=subprocess.PIPE, stderr=open(log, "wb"), env=ENV
    )
    try:
        ready, _, _ = select.select([driver.stdout], [], [], 300)
        assert ready and driver.stdout.read(1), log.read_text()  # the text is streaming: every rank is at work
        local = local_workers(driver.pid)
        workers[3].send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
        assert driver.returncode != 0
        error = log.read_text()
        assert "the tensor-parallel group is down: rank 3 went silent (no heartbeat for" in error, error
        assert len(local) == 1 and all_gone([*local, workers[2].pid], within_s=WITHIN_S)
    finally:
        for process in (driver, *workers.values()):
            process.kill()
            process.wait()
