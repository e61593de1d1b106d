"""`tinyllm serve` in a child process on 127.0.0.1, as a user would start it; stopped when the block ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tinyllm.server.transport.server_thread import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serve(*args: str, ready_s: float = 180):
    """Yield the port of a live `tinyllm serve ARGS` once /health answers 200."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tinyllm", "serve", "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(
        [*cmd, "--log-level", "warning", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("tinyllm serve did not become ready")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def tiny_llm(tokenizer):
    """A tiny random Llama (seed 11, a 1024-token context) with the given tokenizer: the model the client suites
    (openai, LangChain, Ollama, embeddings) serve in a thread."""
    from helpers.tiny_models import tiny_llama
    from tinyllm import LLM

    return LLM.from_parts(tiny_llama(11, vocab_size=tokenizer.vocab_size, max_position_embeddings=1024), tokenizer)
