"""Scheduler and KV manager driven alone with fabricated requests and no model (no tensors at all)."""

import pytest

from tinyllm.cache.block_pool import BlockPool, block_key
from tinyllm.engine.kv_manager import KVManager
from tinyllm.engine.request import Request, RequestStatus
from tinyllm.engine.scheduler import Scheduler
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.rng import request_rng
from tinyllm.text.output_stream import OutputStream

P = 4  # block size


class NoTokenizer:
    """Fabricated requests never decode text; the stream only needs an object to hold."""

    def decode(self, ids, **kw):
        return ""


def fake_request(rid: str, prompt: list[int], max_tokens: int = 8) -> Request:
    out = OutputStream.create(NoTokenizer(), ())
    return Request(rid, list(prompt), SamplingParams(temperature=0), max_tokens, out, request_rng(0))


def make(num_blocks=16, max_num_seqs=8, budget=32, prefix=True):
    pool = BlockPool(num_blocks, P)
    kv = KVManager(pool, prefix)
    return pool, kv, Scheduler(kv, max_num_seqs, budget)


def finish_step(sched: Scheduler, plan) -> None:
    """What the engine does after a forward: computed positions move, full blocks are registered, and
    a request that reached the end of its known tokens gets one new output token."""
    for c in plan.chunks:
        c.request.num_computed += c.num_tokens
        if c.samples:
            c.request.out.ids.append(7)
        sched.kv.commit(c.request)


def test_budget_split_decodes_first_then_block_aligned_prefill_chunks():
    pool, kv, sched = make(budget=10)
    a = fake_request("a", range(3))
    sched.add(a)
    finish_step(sched, plan := sched.schedule())
    assert [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks] == [("a", 0, 3)]
    b = fake_request("b", range(100, 130))  # 30 tokens: longer than the budget
    sched.add(b)
    plan = sched.schedule()
    # a decodes one token; b gets the rest of the budget (9) cut back to a block boundary (8)
    assert [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks] == [("a", 3, 1), ("b", 0, 8)]
    assert plan.num_tokens <= 10
    finish_step(sched, plan)
    plan = sched.schedule()
    assert [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks] == [("a", 4, 1), ("b", 8, 8)]
    assert all((c.start + c.num_tokens) % P == 0 for c in plan.chunks if c.request is b)


def test_a_budget_under_one_block_still_makes_progress():
    pool, kv, sched = make(budget=3)
    a = fake_request("a", range(10))
    sched.add(a)
    starts = []
    while a.num_computed < 10:
        plan = sched.schedule()
        starts.append((plan.chunks[0].start, plan.chunks[0].num_tokens))
        finish_step(sched, plan)
    assert starts == [(0, 3), (3, 3), (6, 3), (9, 1)]


def test_admission_stops_at_max_num_seqs_and_at_the_budget():
    pool, kv, sched = make(max_num_seqs=2, budget=64)
    reqs = [fake_request(str(i), range(5)) for i in range(3)]
    for r in reqs:
        sched.add(r)
    plan = sched.schedule()
    assert [c.request.request_id for c in plan.chunks] == ["0", "1"]
    assert [r.status for r in reqs] == [RequestStatus.RUNNING, RequestStatus.RUNNING, RequestStatus.WAITING]
    pool, kv, sched = make(budget=6)
    for r in [fake_request(str(i), range(4)) for i in range(3)]:
        sched.add(r)
    plan = sched.schedule()
    # 4 tokens for the first; 2 left do not reach a block boundary for the second, so it waits
    assert [(c.request.request_id, c.num_tokens) for c in plan.chunks] == [("0", 4)]


def test_preemption_takes_the_most_recently_admitted_and_frees_its_blocks():
    pool, kv, sched = make(num_blocks=4, budget=64)
    a, b = fake_request("a", range(7)), fake_request("b", range(50, 57))
    sched.add(a)
    sched.add(b)
    finish_step(sched, sched.schedule())  # each holds 2 blocks (7 prompt tokens + room for 1)
    assert pool.num_free == 0
    finish_step(sched, plan := sched.schedule())  # position 7 fits block 1 of each: no new block yet
    assert plan.preempted == []
    plan = sched.schedule()  # position 8 needs a third block for a: b (admitted last) is preempted
    assert plan.preempted == [b] and b.status is RequestStatus.WAITING and b.num_computed == 0
    assert [c.request for c in plan.chunks] == [a] and b.num_preemptions == 1
    assert sched.waiting[0] is b and b.request_id not in kv.tables


def test_prefix_hit_of_an_exact_multiple_of_the_block_size_computes_the_last_token_only():
    pool, kv, sched = make(budget=64)
    first = fake_request("first", range(8))  # exactly two full blocks
    sched.add(first)
    finish_step(sched, sched.schedule())
    sched.finish(first, RequestStatus.FINISHED_STOPPED)
    again = fake_request("again", range(8))
    sched.add(again)
    plan = sched.schedule()
    (chunk,) = plan.chunks
    # block 0 is reused whole, block 1 for its first three positions: the last prompt token's logits are needed
    assert again.num_cached_tokens == 7 and (chunk.start, chunk.num_tokens) == (7, 1) and chunk.samples
    longer = fake_request("longer", list(range(8)) + [99])
    sched.add(longer)
    finish_step(sched, plan)
    plan = sched.schedule()
    assert longer.num_cached_tokens == 8  # both full blocks come from the cache


def test_copy_on_write_pairs_for_a_write_into_a_shared_block():
    pool, kv, sched = make(budget=64)
    a = fake_request("a", range(8))
    sched.add(a)
    finish_step(sched, sched.schedule())
    b = fake_request("b", [0, 1, 2, 3, 50, 51, 52, 53])  # a's block 1 does not start with 50: one block
    assert kv.match_prefix(b) == 4
    shared = kv.tables["b"].blocks[0]
    assert pool.is_shared(shared)
    b.num_computed = 2  # a rollback into the shared block: the next write must not touch a's KV
    kv.truncate(b, 2)
    copies = kv.allocate(b, 2)
    assert copies == [(shared, kv.tables["b"].blocks[0])] and kv.tables["b"].blocks[0] != shared
    assert not pool.is_shared(shared) and kv.tables["a"].blocks[0] == shared


@pytest.mark.parametrize("switch, cached", [((), 4), ((False,), 0)])
def test_a_manager_reuses_prefixes_unless_told_not_to(switch, cached):
    kv = KVManager(BlockPool(16, P), *switch)  # caching is on by default
    sched = Scheduler(kv, 8, 64)
    sched.add(fake_request("a", range(8)))
    finish_step(sched, sched.schedule())
    assert kv.match_prefix(fake_request("b", [0, 1, 2, 3, 50, 51, 52, 53])) == cached


def test_the_copies_of_every_request_admitted_in_one_step_are_kept():
    pool, kv, sched = make(budget=64)
    sched.add(fake_request("a", range(8)))
    finish_step(sched, sched.schedule())
    for rid, tail in (("c1", [99, 98]), ("c2", [97, 96])):  # each agrees with a's block 1 for two positions
        sched.add(fake_request(rid, [0, 1, 2, 3, 4, 5, *tail]))
    plan = sched.schedule()
    shared = kv.tables["a"].blocks[1]
    assert plan.block_copies == [(shared, kv.tables["c1"].blocks[1]), (shared, kv.tables["c2"].blocks[1])]


def test_allocate_changes_nothing_when_blocks_run_out():
    pool, kv, sched = make(num_blocks=2)
    a = fake_request("a", range(6))
    assert kv.allocate(a, 6) is not None and pool.num_free == 0
    a.num_computed = 6
    before = (list(kv.tables["a"].blocks), pool.num_free)
    assert kv.allocate(a, 3) is None  # position 8 would need a third block
    assert (kv.tables["a"].blocks, pool.num_free) == before


def test_truncate_releases_whole_blocks_past_the_kept_positions():
    pool, kv, _ = make(num_blocks=8)
    a = fake_request("a", range(11))
    kv.allocate(a, 11)
    assert len(kv.tables["a"]) == 3 and pool.num_free == 5
    kv.truncate(a, 5)
    assert len(kv.tables["a"]) == 2 and pool.num_free == 6
    kv.free(a)
    assert pool.num_free == 8 and "a" not in kv.tables


@pytest.mark.parametrize("prefix", [True, False])
def test_every_block_returns_to_the_pool(prefix):
    pool, kv, sched = make(num_blocks=12, budget=12, prefix=prefix)
    reqs = [fake_request(str(i), range(i, i + 9), max_tokens=5) for i in range(5)]
    for r in reqs:
        sched.add(r)
    while sched.has_unfinished():
        plan = sched.schedule()
        finish_step(sched, plan)
        for r in list(sched.running):
            if r.tokens_left <= 0:
                sched.finish(r, RequestStatus.FINISHED_LENGTH)
    assert pool.stats().used == 0


def test_a_finished_requests_partial_block_serves_the_same_prompt_again():
    pool, kv, sched = make(budget=64)
    first = fake_request("first", range(10))  # blocks 0-3, 4-7 full; 8, 9 in a partial third
    sched.add(first)
    finish_step(sched, sched.schedule())
    third = kv.tables["first"].blocks[2]
    sched.finish(first, RequestStatus.FINISHED_STOPPED)
    assert pool.tail_of[third][1] == (8, 9) and pool.stats().cached_free == 3
    again = fake_request("again", range(10))
    sched.add(again)
    (chunk,) = sched.schedule().chunks
    assert again.num_cached_tokens == 9 and (chunk.start, chunk.num_tokens) == (9, 1)
    assert kv.tables["again"].blocks[2] == third  # held alone: written in place, no longer a tail
    assert third not in pool.tail_of
    sched.finish(again, RequestStatus.FINISHED_STOPPED)
    other = fake_request("other", [*range(9), 77, 78])  # agrees with the (new) tail on position 8 only
    sched.add(other)
    (chunk,) = sched.schedule().chunks
    assert other.num_cached_tokens == 9 and (chunk.start, chunk.num_tokens) == (9, 2)


def test_a_tail_holds_only_positions_of_committed_tokens():
    """A verification step that ended its request computed drafts past the last accepted one: those positions
    hold the drafts' KV, not the committed tokens', and are left out of the tail."""
    pool, kv, _ = make()
    req = fake_request("r", range(5))
    assert kv.allocate(req, 8) == []  # positions 0..7: the prompt, one output token and two drafts fed
    req.num_computed = 4
    kv.commit(req)  # block 0 registered, as after an earlier step
    req.num_computed = 8
    req.out.ids.extend([30, 31])  # two committed outputs: positions 5 (30) and 6 (31, sampled, no KV yet)
    block = kv.tables["r"].blocks[1]
    kv.free(req)
    assert pool.tail_of == {block: (block_key(None, [0, 1, 2, 3]), (4, 30))}


def test_the_block_a_requests_last_step_filled_is_registered_when_it_finishes():
    """No commit follows a request's last step (the engine commits unfinished requests only): freeing it
    registers the full blocks that step completed, so the same prompt again finds them."""
    pool, kv, sched = make(budget=64)
    first = fake_request("first", range(7))
    sched.add(first)
    finish_step(sched, sched.schedule())  # positions 0..6, output 7 sampled
    (chunk,) = sched.schedule().chunks
    assert (chunk.start, chunk.num_tokens) == (7, 1)
    first.num_computed += 1  # position 7 (the output 7): block 1 is full now
    first.out.ids.append(8)
    sched.finish(first, RequestStatus.FINISHED_LENGTH)
    assert pool.lookup(block_key(None, [0, 1, 2, 3]), [4, 5, 6, 7]) is not None
    again = fake_request("again", [0, 1, 2, 3, 4, 5, 6, 7, 8])
    sched.add(again)
    (chunk,) = sched.schedule().chunks
    assert again.num_cached_tokens == 8 and (chunk.start, chunk.num_tokens) == (8, 1)


class HeldMask:
    """Stands in for a grammar's Constraint: the scheduler only asks whether the next masks are ready."""

    def __init__(self, ready: bool = True):
        self.ready = ready

    def is_ready(self) -> bool:
        return self.ready


def test_a_running_constrained_request_whose_mask_is_not_ready_sits_out_the_step():
    pool, kv, sched = make(budget=64)
    plain, constrained = fake_request("plain", range(5)), fake_request("constrained", range(20, 25))
    constrained.constraint = mask = HeldMask()
    sched.add(plain)
    sched.add(constrained)
    finish_step(sched, sched.schedule())  # both prefilled, each sampled its first token
    mask.ready = False
    for _ in range(3):  # the plain one decodes every step; the constrained one keeps its place and blocks
        plan = sched.schedule()
        assert [(c.request.request_id, c.num_tokens) for c in plan.chunks] == [("plain", 1)]
        assert constrained.status is RequestStatus.RUNNING and constrained in sched.running
        assert plan.preempted == [] and constrained.request_id in kv.tables
        finish_step(sched, plan)
    mask.ready = True
    plan = sched.schedule()
    assert [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks] == [
        ("plain", 8, 1),
        ("constrained", 5, 1),
    ]


def test_a_constrained_prefill_runs_its_middle_chunks_while_the_mask_is_not_ready_and_holds_the_last():
    pool, kv, sched = make(budget=8)
    req = fake_request("r", range(20))  # 20 tokens: chunks of 8, 8, then the last 4 that is sampled
    sched.add(req)
    finish_step(sched, plan := sched.schedule())  # admitted while it had no grammar
    assert [(c.start, c.num_tokens) for c in plan.chunks] == [(0, 8)]
    req.constraint = mask = HeldMask(ready=False)
    finish_step(sched, plan := sched.schedule())  # no logits are sampled: the mask is not needed yet
    assert [(c.start, c.num_tokens, c.samples) for c in plan.chunks] == [(8, 8, False)]
    assert sched.schedule().chunks == []  # the last chunk samples: it waits for the mask
    mask.ready = True
    assert [(c.start, c.num_tokens, c.samples) for c in sched.schedule().chunks] == [(16, 4, True)]


def test_a_request_preempted_after_its_decode_was_scheduled_loses_that_chunk():
    pool, kv, sched = make(num_blocks=2, budget=8)
    a, b = fake_request("a", range(20)), fake_request("b", range(50, 53))
    sched.add(a)
    sched.add(b)
    finish_step(sched, plan := sched.schedule())  # a gets the partial allowance (4), b its whole prompt
    assert [(c.request.request_id, c.num_tokens) for c in plan.chunks] == [("a", 4), ("b", 3)]
    plan = sched.schedule()  # b's decode is scheduled first; a's next chunk then needs b's block
    assert [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks] == [("a", 4, 4)]
    assert plan.preempted == [b] and b.num_computed == 0 and b.num_preemptions == 1
