"""The scheduler with fabricated requests and no model: a long prefill leaves room for a short newcomer."""

import pytest

from tinyllm.cache.block_pool import BlockPool
from tinyllm.engine.kv_manager import KVManager
from tinyllm.engine.request import Request
from tinyllm.engine.scheduler import Scheduler, default_long_prefill_threshold
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.rng import request_rng
from tinyllm.text.output_stream import OutputStream

P = 16


def request(rid: str, num_prompt: int) -> Request:
    # The scheduler reads ids and counts only: no decoder or stop matcher is needed.
    return Request(
        rid,
        list(range(1, num_prompt + 1)),
        SamplingParams(temperature=0),
        8,
        OutputStream(decoder=None, matcher=None),
        request_rng(0),
    )


def scheduler(budget: int = 256, num_blocks: int = 1024, **kw) -> Scheduler:
    return Scheduler(KVManager(BlockPool(num_blocks, P)), max_num_seqs=8, max_num_batched_tokens=budget, **kw)


def run_step(s: Scheduler) -> dict[str, tuple[int, int]]:
    """Schedule one step and account for it as the engine would (no sampling: prefills only here)."""
    plan = s.schedule()
    for c in plan.chunks:
        c.request.num_computed += c.num_tokens
    assert plan.num_tokens <= s.max_num_batched_tokens
    return {c.request.request_id: (c.start, c.num_tokens) for c in plan.chunks}


def test_a_short_request_gets_its_first_chunk_in_the_step_after_it_arrives():
    s = scheduler()
    s.add(request("long", 8000))
    assert run_step(s) == {"long": (0, 256)}  # alone: the whole budget
    assert run_step(s) == {"long": (256, 256)}
    s.add(request("short", 4))
    step = run_step(s)
    assert step["short"] == (0, 4)  # the whole short prompt, at once
    start, n = step["long"]
    assert start == 512 and n == s.long_prefill_token_threshold == 128 and (start + n) % P == 0
    assert run_step(s)["long"] == (640, 256)  # nobody waits: the long prompt has the budget again


def test_capped_chunks_still_end_on_block_boundaries():
    s = scheduler(budget=100, long_prefill_token_threshold=40)
    s.add(request("long", 1000))
    s.add(request("a", 3))
    s.add(request("b", 3))
    step = run_step(s)
    assert step["long"] == (0, 32)  # 40 rounded down to whole blocks of 16
    assert step["a"] == (0, 3) and step["b"] == (0, 3)


def test_partial_prefills_share_one_allowance_and_a_short_prompt_overtakes():
    s = scheduler(budget=256)
    for rid in ("long1", "long2", "short"):
        s.add(request(rid, 4000 if rid.startswith("long") else 5))
    step = run_step(s)
    assert step == {"long1": (0, 128), "short": (0, 5)}  # long2 waits its turn at the head of the queue
    assert [r.request_id for r in s.waiting] == ["long2"]
    assert run_step(s)["long2"] == (0, 128)  # nobody behind it: admitted, with the rest of the budget


def test_threshold_default_and_validation():
    assert default_long_prefill_threshold(256, 16) == 128
    assert default_long_prefill_threshold(24, 16) == 16  # never below one block
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        scheduler(long_prefill_token_threshold=8)
