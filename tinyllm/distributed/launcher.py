"""The worker processes this machine starts (ranks 1 .. num_local_ranks - 1), and their end.

Each is `python -m tinyllm worker ...`, the command a rank on another machine runs: a fresh interpreter that
never imports the caller's main module, so a script without a main guard, `python -c`, a notebook or an
interactive session can start a group. Its stdout and stderr go to a file in the group's private folder, whose
last lines a failure report quotes; a model built in memory goes there too, as a file it loads.
"""

from __future__ import annotations

import contextlib
import os
import site
import subprocess
import sys
from collections import deque

import torch

from ..errors import TinyLLMError
from .config import ParallelConfig
from .worker import ModelSource

JOIN_S = 5.0  # a worker asked to stop gets this long before it is killed
TAIL_LINES = 8  # of a worker's output, quoted when it stops
MODEL_FILE = "model.pt"  # an in-memory model, saved for the local workers
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")  # torchrun's, not for our workers


class LocalWorker:
    """One worker process started here: its rank, process and output file."""

    def __init__(self, rank: int, process: subprocess.Popen, log_path: str):
        self.rank, self.process, self.log_path = rank, process, log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def exit_text(self) -> str | None:
        """'exited with code 3' or 'exited with signal 9'; None while it runs."""
        code = self.process.poll()
        if code is None:
            return None
        return "exited with " + (f"signal {-code}" if code < 0 else f"code {code}")

    def last_output(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 16384))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        lines = deque((line[:300] for line in text.splitlines() if line.strip()), maxlen=TAIL_LINES)
        return "\n".join(lines)

    def stop(self, grace_s: float) -> None:
        """Wait up to grace_s for it to exit, then kill it (SIGKILL also ends a stopped process)."""
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def threads_per_rank(config: ParallelConfig) -> int | None:
    """On the CPU, ranks on one machine share its cores; an explicit OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // config.num_local_ranks)


def worker_command(rank: int, config: ParallelConfig, source: ModelSource, model_file: str | None) -> list[str]:
    """The `tinyllm worker` command line of one local rank."""
    command = [sys.executable, "-m", "tinyllm", "worker", "--rank", str(rank)]
    command += ["--tensor-parallel-size", str(config.tensor_parallel_size), "--tp-timeout", repr(config.timeout_s)]
    command += ["--tp-startup-timeout", repr(config.startup_timeout_s)]
    command += ["--master-addr", config.master_addr, "--master-port", str(config.master_port)]
    command += ["--device", source.device, "--dtype", str(source.dtype).removeprefix("torch.")]
    if model_file is not None:
        return command + ["--model-file", model_file]
    for flag, value in (("--model", source.path), ("--weights", source.weights), ("--quantize", source.quantize)):
        if value is not None:
            command += [flag, str(value)]
    return command


def worker_environment(threads: int | None) -> dict[str, str]:
    """This environment, with this tinyllm's source tree first on the path (whatever the working directory),
    without torchrun's variables (this process's rank is not the worker's)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    installed = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:  # a source tree (a site-packages folder on the path would shadow the stdlib)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def start_workers(config: ParallelConfig, source: ModelSource, folder: str) -> list[LocalWorker]:
    """Start ranks 1 .. num_local_ranks - 1; their output and an in-memory model go to `folder`."""
    model_file = None
    if source.module is not None and config.num_local_ranks > 1:
        model_file = os.path.join(folder, MODEL_FILE)
        torch.save(source.module, model_file)
    threads = threads_per_rank(config) if source.device == "cpu" else None
    env, workers = worker_environment(threads), []
    try:
        for rank in range(1, config.num_local_ranks):
            log_path = os.path.join(folder, f"rank{rank}.log")
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    worker_command(rank, config, source, model_file),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            workers.append(LocalWorker(rank, process, log_path))
    except OSError as exc:
        stop_workers(workers, 0.0)
        raise TinyLLMError(f"cannot start tensor-parallel rank {len(workers) + 1} ({exc})") from None
    except BaseException:
        stop_workers(workers, 0.0)
        raise
    return workers


def drop_model_file(folder: str) -> None:
    """Every worker has loaded the model: its copy on disk is no longer needed (nor left behind by a crash)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(folder, MODEL_FILE))


def stop_workers(workers: list[LocalWorker], grace_s: float = JOIN_S) -> None:
    for worker in workers:
        worker.stop(grace_s)
