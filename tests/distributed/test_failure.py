"""A worker that dies or hangs: the driver fails the requests in flight with an error naming the cause, stops
the others (no process left) and refuses everything afterwards; the server's engine stops (then 503)."""

import asyncio
import os
import signal
import time

import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM, SamplingParams
from tinyllm.distributed.config import ParallelConfig
from tinyllm.engine.async_engine import Accepted, AsyncEngine, EngineStopped, Failed, Sink
from tinyllm.errors import EngineDown
from tinyllm.server.endpoints.serving import engine_error

LONG = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
DEADLINE_S = 30  # the bound on noticing a lost worker


def group(tokenizer, **options):
    model = tiny_llama(5, vocab_size=tokenizer.vocab_size, max_position_embeddings=256)
    return LLM.from_parts(model, tokenizer, parallel=ParallelConfig(2, **options))


def assert_all_gone(llm, all_gone):
    assert all_gone([w.pid for w in llm.tensor_parallel.workers], within_s=0.0)  # stopped before the error


@pytest.mark.slow
def test_a_killed_worker_stops_the_server_engine(smollm_tokenizer, all_gone):
    llm = group(smollm_tokenizer)
    engine = AsyncEngine(llm.engine(block_size=8, num_blocks=64))
    try:
        engine.start()
        worker = llm.tensor_parallel.workers[0]

        async def scenario():
            loop, queue = asyncio.get_running_loop(), asyncio.Queue()
            engine.add("a", [5, 6, 7], LONG, Sink(loop, queue))
            assert isinstance(await queue.get(), Accepted)
            await queue.get()  # a first output: generation is under way
            os.kill(worker.pid, signal.SIGKILL)
            start = time.monotonic()
            while not isinstance(item := await asyncio.wait_for(queue.get(), DEADLINE_S), Failed):
                pass
            assert time.monotonic() - start < DEADLINE_S
            assert "rank 1 exited with signal 9" in str(item.error)
            late = asyncio.Queue()
            engine.add("b", [5, 6, 7], LONG, Sink(loop, late))
            return await asyncio.wait_for(late.get(), DEADLINE_S)

        late = asyncio.run(scenario())
        assert isinstance(late, Failed) and isinstance(late.error, EngineStopped)
        assert engine_error(late.error, "prompt").status == 503
        assert not engine.alive
        assert_all_gone(llm, all_gone)
    finally:
        engine.shutdown()
        llm.close()


@pytest.mark.slow
def test_a_hung_worker_fails_the_stream_after_the_timeout(smollm_tokenizer, all_gone):
    llm = group(smollm_tokenizer, timeout_s=3.0)
    try:
        worker = llm.tensor_parallel.workers[0]
        stream = llm.stream([5, 6, 7], params=LONG)
        next(stream)
        os.kill(worker.pid, signal.SIGSTOP)  # alive, holding its connections, answering nothing
        with pytest.raises(EngineDown, match=r"rank 1 went silent \(no heartbeat for 1\.\d s\)"):
            for _ in stream:
                pass
        assert_all_gone(llm, all_gone)
        with pytest.raises(EngineDown, match="group is down"):
            llm.generate([5, 6], max_tokens=2)
    finally:
        llm.close()


@pytest.mark.slow
def test_a_killed_worker_under_the_server_is_named_in_health_and_the_log(smollm_tokenizer, caplog):
    import httpx

    from tinyllm.server import create_app
    from tinyllm.server.transport.server_thread import ServerThread

    llm = group(smollm_tokenizer)
    body = {"prompt": [5, 6, 7], "max_tokens": 250, "ignore_eos": True, "stream": True}
    try:
        with ServerThread(create_app(llm, block_size=8, num_blocks=64)) as srv, httpx.Client(timeout=60) as c:
            while c.get(f"{srv.url}/health").status_code != 200:
                time.sleep(0.05)
            with c.stream("POST", f"{srv.url}/v1/completions", json=body) as r:
                lines = (line for line in r.iter_lines() if line.startswith("data: "))
                next(lines)  # a first chunk: generation is under way
                os.kill(llm.tensor_parallel.workers[0].pid, signal.SIGKILL)
                rest = list(lines)
            health = c.get(f"{srv.url}/health")
    finally:
        llm.close()
    assert "rank 1 exited with signal 9" in rest[-2]  # the stream's error event, before [DONE]
    assert health.status_code == 503 and health.json()["status"] == "engine_stopped"
    error = health.json()["error"]
    assert error.startswith("the tensor-parallel group is down: rank 1 exited with signal 9") and "\n" not in error
    logged = [
        r.getMessage() for r in caplog.records if r.name == "tinyllm.server" and "engine is down" in r.getMessage()
    ]
    assert len(logged) == 1 and "rank 1 exited with signal 9" in logged[0]  # and its last output, had it any


@pytest.mark.slow
def test_a_worker_killed_while_the_server_is_idle_is_named_in_health(smollm_tokenizer):
    import httpx

    from tinyllm.server import create_app
    from tinyllm.server.transport.server_thread import ServerThread

    llm = group(smollm_tokenizer)
    try:
        with ServerThread(create_app(llm, block_size=8, num_blocks=64)) as srv, httpx.Client(timeout=60) as c:
            while c.get(f"{srv.url}/health").status_code != 200:
                time.sleep(0.05)
            os.kill(llm.tensor_parallel.workers[0].pid, signal.SIGKILL)
            deadline = time.monotonic() + DEADLINE_S
            while (health := c.get(f"{srv.url}/health")).status_code == 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            late = c.post(f"{srv.url}/v1/completions", json={"prompt": [5, 6], "max_tokens": 2})
    finally:
        llm.close()
    assert health.status_code == 503 and health.json()["status"] == "engine_stopped"
    assert health.json()["error"].startswith("the tensor-parallel group is down: rank 1 exited with signal 9")
    assert late.status_code == 503
