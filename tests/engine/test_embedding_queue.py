"""EmbeddingQueue on a tiny random model: an input's vector is the same bits alone and batched with other jobs'
inputs; batches take jobs' inputs in turn; a cancelled job's inputs are skipped; a full queue refuses; close()
finishes the running batch and fails the queued jobs. A queue built and fed before start() batches
deterministically: every job is queued before the first batch is chosen."""

import asyncio
import threading

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny_models import tiny_llama
from tinyllm.engine.embedding_queue import EmbeddingLimits, EmbeddingQueue, QueueClosed, QueueFull
from tinyllm.model.pooling import Pooling, embed_ids

VOCAB = 64


@pytest.fixture(scope="module")
def model(one_thread):
    return tiny_llama(5, vocab_size=VOCAB)


def ids(seed: int, length: int) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def run(coro):
    return asyncio.run(coro)


async def _embed_all(queue: EmbeddingQueue, requests: list, pooling=Pooling.MEAN, normalize=True) -> list:
    jobs = [queue.submit(r, pooling, normalize) for r in requests]
    queue.start()
    try:
        return [await job.future for job in jobs]
    finally:
        queue.close()


@pytest.mark.parametrize(("pooling", "normalize"), [(Pooling.MEAN, True), (Pooling.LAST, False)])
def test_a_vector_is_the_same_bits_alone_and_in_a_batch_of_other_jobs_inputs(model, pooling, normalize):
    x = ids(0, 7)
    (alone,) = run(_embed_all(EmbeddingQueue(model), [[x]], pooling, normalize))
    others = [[ids(s, 7) for s in range(1, 6)] + [ids(9, 3)], [ids(7, 7), x], [ids(8, 7)]]
    queue = EmbeddingQueue(model)
    mixed = run(_embed_all(queue, others, pooling, normalize))
    assert queue.counts().num_forwards == 2  # the nine inputs of length 7 in one forward, the one of length 3 alone
    assert torch.equal(mixed[1][1], alone[0])
    # and each is LLM.embed's vector (padded batches there: equal to the last bits only up to rounding)
    flat = [v for r in others for v in r]
    want = embed_ids(model, flat, pooling, normalize)
    torch.testing.assert_close(torch.cat(mixed), want, atol=1e-5, rtol=0)
    if normalize:
        torch.testing.assert_close(torch.cat(mixed).norm(dim=-1), torch.ones(len(flat)))
    else:
        assert not torch.allclose(F.normalize(want, dim=-1), want)


def _rows(batch) -> list[tuple[str, int]]:
    return [(job.name, i) for job, i in batch.rows]


def test_batches_take_the_jobs_inputs_in_turn_starting_at_the_next_job(model):
    async def batches():
        queue = EmbeddingQueue(model, EmbeddingLimits(batch_tokens=12))
        jobs = {}
        for name, lengths in (("A", [3, 3, 3, 9]), ("B", [3]), ("C", [9, 9])):
            jobs[name] = queue.submit([ids(k, n) for k, n in enumerate(lengths)], Pooling.MEAN, True)
            jobs[name].name = name
        return [_rows(queue._next_batch()), _rows(queue._next_batch()), _rows(queue._next_batch())]

    first, second, third = run(batches())
    assert first == [("A", 0), ("B", 0), ("A", 1), ("A", 2)]  # 12 tokens of length 3, A and B in turn
    assert second == [("C", 0)]  # B is done: C's turn; 9 tokens leave no room for another
    assert third == [("A", 3)]  # then A's again, before C's second input


def test_a_one_token_job_waits_for_one_batch_not_for_a_large_job(model):
    async def order():
        watched = Watched(model)
        queue = EmbeddingQueue(watched, EmbeddingLimits(batch_tokens=16))
        large = queue.submit([ids(k, 8) for k in range(40)], Pooling.MEAN, True)  # 20 forwards of 2 inputs
        small = queue.submit([[5]], Pooling.MEAN, True)
        queue.start()
        await small.future, await large.future
        queue.close()
        return watched.shapes

    shapes = run(order())
    assert shapes[:3] == [(2, 8), (1, 1), (2, 8)] and len(shapes) == 21  # the large job's first batch, then it


def test_a_cancelled_job_drops_its_pending_inputs_and_the_worker_skips_them(model):
    async def cancelled():
        queue = EmbeddingQueue(model, EmbeddingLimits(batch_tokens=16))
        large = queue.submit([ids(k, 8) for k in range(40)], Pooling.MEAN, True)
        small = queue.submit([[5]], Pooling.MEAN, True)
        queue.cancel(large)
        queue.start()
        vector = await small.future
        queue.close()
        return large, vector, queue.counts()

    large, vector, counts = run(cancelled())
    assert large.future.cancelled() and vector.shape == (1, 64)
    assert (counts.num_embedded, counts.num_skipped, counts.num_forwards) == (1, 40, 1)
    assert (counts.num_queued_requests, counts.num_queued_tokens) == (0, 0)


def test_a_full_queue_refuses_with_a_retry_hint_and_takes_work_again_once_it_drains(model):
    async def full():
        queue = EmbeddingQueue(
            model, EmbeddingLimits(max_request_tokens=8, max_queued_requests=2, max_queued_tokens=10)
        )
        first = queue.submit([[1, 2, 3]], Pooling.MEAN, True)
        with pytest.raises(QueueFull, match="3 tokens are waiting.*this request's 8 would pass the limit of 10") as e:
            queue.submit([[1] * 8], Pooling.MEAN, True)
        assert e.value.retry_after_s >= 1
        second = queue.submit([[4]], Pooling.MEAN, True)
        with pytest.raises(QueueFull, match="2 embedding requests are waiting"):
            queue.submit([[5]], Pooling.MEAN, True)
        queue.start()
        await first.future, await second.future
        third = await queue.submit([[1] * 8], Pooling.MEAN, True).future
        queue.close()
        return third

    assert run(full()).shape == (1, 64)


class Watched(torch.nn.Module):
    """The model, recording each forward's ids shape; with `gated`, its first forward waits for `release`."""

    def __init__(self, model, gated: bool = False):
        super().__init__()
        self.inner, self.model, self.config, self.device = model, model.model, model.config, torch.device("cpu")
        self.shapes, self.running, self.release = [], threading.Event(), threading.Event()
        if not gated:
            self.release.set()

    def hidden_states(self, ids, step=None):
        self.shapes.append(tuple(ids.shape))
        self.running.set()
        self.release.wait(30)
        return self.inner.hidden_states(ids, step)


def test_close_lets_the_running_batch_finish_and_fails_the_queued_jobs(model):
    async def closing():
        gated = Watched(model, gated=True)
        queue = EmbeddingQueue(gated).start()
        running = queue.submit([[1, 2]], Pooling.MEAN, True)
        await asyncio.to_thread(gated.running.wait, 30)
        queued = queue.submit([[3, 4, 5]], Pooling.MEAN, True)
        closer = asyncio.ensure_future(asyncio.to_thread(queue.close, 30))
        while not queue.is_closed:
            await asyncio.sleep(0.01)
        with pytest.raises(QueueClosed):
            queue.submit([[1]], Pooling.MEAN, True)
        gated.release.set()
        await closer
        assert not queue.is_running
        with pytest.raises(QueueClosed):
            await queued.future
        return await running.future, queue.counts()

    vector, counts = run(closing())
    assert vector.shape == (1, 64) and counts.num_embedded == 1 and counts.num_queued_requests == 0


def test_closing_a_queue_never_started_fails_its_jobs(model):
    async def unstarted():
        queue = EmbeddingQueue(model)
        job = queue.submit([[1, 2]], Pooling.MEAN, True)
        queue.close()
        with pytest.raises(QueueClosed):
            await job.future
        return queue.counts()

    assert run(unstarted()).num_queued_requests == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_tokens": 0}, "batch_tokens must be a positive integer, got 0"),
        ({"max_queued_requests": 1.5}, "max_queued_requests must be a positive integer, got 1.5"),
        ({"max_request_tokens": 100, "max_queued_tokens": 99}, "max_queued_tokens must be at least max_request"),
    ],
)
def test_limits_validate_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        EmbeddingLimits(**options)


@pytest.mark.parametrize(("pooling", "normalize"), [(Pooling.MEAN, True), (Pooling.LAST, False)])
def test_a_long_input_runs_in_chunks_between_other_jobs_batches_and_keeps_its_bits(model, pooling, normalize):
    long = ids(3, 40)
    limits = EmbeddingLimits(batch_tokens=16)
    (alone,) = run(_embed_all(EmbeddingQueue(model, limits), [[long]], pooling, normalize))
    watched = Watched(model)
    mixed = run(
        _embed_all(EmbeddingQueue(watched, limits), [[long, ids(4, 20)], [[5]], [ids(6, 8)]], pooling, normalize)
    )
    # chunks of 16, 16 and 8 of the long input; every other job's batch between them; its second long input waits
    assert watched.shapes == [(1, 16), (1, 1), (1, 8), (1, 16), (1, 8), (1, 16), (1, 4)]
    assert torch.equal(mixed[0][0], alone[0])
    torch.testing.assert_close(mixed[0], embed_ids(model, [long, ids(4, 20)], pooling, normalize), atol=1e-5, rtol=0)


def test_a_cancelled_job_drops_its_long_input_between_chunks(model):
    async def cancelled():
        watched = Watched(model, gated=True)
        queue = EmbeddingQueue(watched, EmbeddingLimits(batch_tokens=16)).start()
        large = queue.submit([ids(3, 40), ids(4, 40)], Pooling.MEAN, True)
        await asyncio.to_thread(watched.running.wait, 30)  # its first chunk runs
        small = queue.submit([[5]], Pooling.MEAN, True)
        queue.cancel(large)
        watched.release.set()
        await small.future
        queue.close()
        return watched.shapes, queue.counts()

    shapes, counts = run(cancelled())
    assert shapes == [(1, 16), (1, 1)]  # the long input's first chunk, then nothing more of it
    assert (counts.num_embedded, counts.num_skipped, counts.num_queued_requests, counts.num_queued_tokens) == (
        1,
        2,
        0,
        0,
    )


class Failing(Watched):
    """The model, failing every forward of inputs 3 tokens long."""

    def hidden_states(self, ids, step=None):
        if ids.shape[1] == 3:
            raise RuntimeError("a fault in the forward")
        return super().hidden_states(ids, step)


def test_a_failed_forward_fails_its_jobs_alone_and_the_queue_keeps_serving(model, caplog):
    async def failing():
        queue = EmbeddingQueue(Failing(model))
        broken = queue.submit([[1, 2, 3], [4]], Pooling.MEAN, True)
        fine = queue.submit([[5, 6]], Pooling.MEAN, True)
        queue.start()
        with pytest.raises(RuntimeError, match=r"the embedding forward failed \(RuntimeError\)"):
            await broken.future
        vector = await fine.future
        queue.close()
        return vector, queue.counts()

    vector, counts = run(failing())
    assert vector.shape == (1, 64) and (counts.num_queued_requests, counts.num_queued_tokens) == (0, 0)
    assert "an embedding forward failed" in caplog.text
