"""Starting a group as users call it: local workers are `python -m tinyllm worker` processes, so a script without
a main guard (a file, `python -c`) works; a worker that crashes or hangs at start-up fails the call with its rank,
exit status and last output, leaving no process; a dropped LLM closes its group, so a new one can start."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from helpers.tiny_models import tiny_llama
from tinyllm import LLM, TinyLLMError
from tinyllm.distributed import driver, launcher
from tinyllm.distributed.config import ParallelConfig

DEADLINE_S = 60  # far below the start-up timeout: a worker that is gone is not waited for

SCRIPT = """\
import json, sys
from tinyllm import LLM
llm = LLM(sys.argv[1], tensor_parallel_size=2)
ids = llm.generate("the tin", max_tokens=8, temperature=0, ignore_eos=True).ids
print(json.dumps({"ids": ids, "pids": [w.pid for w in llm.tensor_parallel.workers]}))
"""  # no main guard, no close(): the group ends with the process


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tp") / "tiny.gguf")
    write_gguf(random_tiny_llama(31), path, quant_types={"weight": "Q8_0"})  # 4 heads, 2 KV heads
    return path


@pytest.mark.slow
def test_a_script_without_a_main_guard_as_a_file_and_as_python_c(tiny_gguf, tmp_path, all_gone):
    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT)
    commands = [[sys.executable, str(script), tiny_gguf], [sys.executable, "-c", SCRIPT, tiny_gguf]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for c in commands]
    want = LLM(tiny_gguf).generate("the tin", max_tokens=8, temperature=0, ignore_eos=True).ids
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        result = json.loads(out)
        assert result["ids"] == want
        assert len(result["pids"]) == 1 and all_gone(result["pids"])


class Fault:
    """Unpickled in the worker as it loads the model: runs `code` there."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def faulty_model(vocab_size: int, code: str):
    model = tiny_llama(5, vocab_size=vocab_size, max_position_embeddings=256)
    model.fault = Fault(code)  # travels with the model to the local ranks
    return model


@pytest.mark.slow
def test_a_worker_that_crashes_at_start_up_fails_the_call_with_its_output(smollm_tokenizer):
    crash = "import sys; print('injected fault: no GPU here', file=sys.stderr); sys.exit(3)"
    model = faulty_model(smollm_tokenizer.vocab_size, crash)
    started = time.monotonic()
    with pytest.raises(TinyLLMError) as error:
        LLM.from_parts(model, smollm_tokenizer, tensor_parallel_size=2)
    assert time.monotonic() - started < DEADLINE_S
    first, *rest = str(error.value).splitlines()
    assert first == "the tensor-parallel group of 2 ranks failed to start: rank 1 exited with code 3"
    assert rest == ["rank 1's last output:", "    injected fault: no GPU here"]


@pytest.mark.slow
def test_a_worker_that_hangs_at_start_up_is_stopped_after_the_startup_timeout(smollm_tokenizer, monkeypatch, all_gone):
    started = []

    def start_workers(*args):
        started.extend(launcher.start_workers(*args))
        return started

    monkeypatch.setattr(driver, "start_workers", start_workers)
    model = faulty_model(smollm_tokenizer.vocab_size, "import time; time.sleep(3600)")
    with pytest.raises(TinyLLMError) as error:
        LLM.from_parts(model, smollm_tokenizer, parallel=ParallelConfig(2, startup_timeout_s=4))
    assert str(error.value) == "the tensor-parallel group of 2 ranks failed to start: rank 1 not ready within 4 s"
    assert len(started) == 1 and all_gone([started[0].pid], within_s=0.0)


@pytest.mark.slow
def test_a_dropped_llm_closes_its_group_and_a_new_group_of_4_starts(smollm_tokenizer, all_gone):
    def model():
        return tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=256)

    want = LLM.from_parts(model(), smollm_tokenizer).generate([5, 6, 7], max_tokens=6, temperature=0).ids
    llm = LLM.from_parts(model(), smollm_tokenizer, tensor_parallel_size=2)
    assert os.listdir(llm.tensor_parallel.folder) == ["rank1.log"]  # the model's file, loaded, is gone
    assert llm.generate([5, 6, 7], max_tokens=6, temperature=0).ids == want
    dropped = [w.pid for w in llm.tensor_parallel.workers]
    del llm  # no close(): its finalizer stops the workers once the LLM is collected
    with LLM.from_parts(model(), smollm_tokenizer, tensor_parallel_size=4) as llm:
        assert all_gone(dropped, within_s=0.0)
        assert llm.generate([5, 6, 7], max_tokens=6, temperature=0).ids == want
        workers = [w.pid for w in llm.tensor_parallel.workers]
    assert len(workers) == 3 and all_gone(workers, within_s=0.0)
    with pytest.raises(ConnectionRefusedError), socket.socket() as s:  # the store is closed with the group
        s.connect(("127.0.0.1", llm.tensor_parallel.config.master_port))
    llm.close()  # idempotent
