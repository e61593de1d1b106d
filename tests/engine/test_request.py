"""Token acceptance (the stop-id rule, stop strings, the budget) over every finish case, and the one
Generation builder; no model."""

import pytest

from tinyllm.engine.request import Request, RequestStatus, accept_tokens, make_generation
from tinyllm.outputs import STATS_KEYS
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.sampler import SampleResult

EOS = 2


def results(ids):
    return [SampleResult(t, -0.5, [(t, -0.5)], 0.1) for t in ids]


def request(tok, max_new=10, eos=(EOS,), **params):
    p = SamplingParams(temperature=0, **params)
    return Request.create("r", tok.encode("Hi"), p, max_new, tok, eos)


def test_tokens_are_accepted_in_order_and_their_text_streams(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode(" one two three")
    req = request(tok)
    a = accept_tokens(req, results(ids[:2]), now=1.0)
    b = accept_tokens(req, results(ids[2:]), now=2.0)
    assert a.finish is None and b.finish is None and a.num_new == 2 and b.num_new == len(ids) - 2
    assert a.text + b.text == " one two three" and req.output_ids == ids
    assert req.times.first_token == 1.0 and req.times.token_times == [1.0, 1.0] + [2.0] * (len(ids) - 2)


def test_a_stop_id_ends_the_request_and_is_never_emitted(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode(" one two")
    req = request(tok)
    acc = accept_tokens(req, results(ids + [EOS] + tok.encode(" three")), now=0.0)
    assert acc.finish is RequestStatus.FINISHED_STOPPED and req.output_ids == ids and acc.text == " one two"
    req = request(tok, stop_token_ids=(ids[1],))
    acc = accept_tokens(req, results(ids), now=0.0)
    assert acc.finish is RequestStatus.FINISHED_STOPPED and req.output_ids == ids[:1]


def test_ignore_eos_emits_eos_but_stop_token_ids_still_stop(smollm_tokenizer):
    tok = smollm_tokenizer
    req = request(tok, ignore_eos=True, stop_token_ids=(77,))
    acc = accept_tokens(req, results([EOS, 40, 77, 41]), now=0.0)
    assert req.output_ids == [EOS, 40] and acc.finish is RequestStatus.FINISHED_STOPPED


def test_a_stop_string_cuts_the_text_and_ends_the_request(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode(" alpha beta. gamma")
    req = request(tok, stop=(". g",))
    acc = accept_tokens(req, results(ids), now=0.0)
    assert acc.finish is RequestStatus.FINISHED_STOPPED and acc.text == " alpha beta"
    assert req.out.text == " alpha beta"


def test_the_budget_ends_with_length_and_flushes_held_back_text(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode(" alpha beta")
    req = request(tok, max_new=len(ids), stop=(" beta gamma",))
    acc = accept_tokens(req, results(ids + [99, 100]), now=0.0)
    # " beta" was held back as a possible start of the stop string; the end releases it
    assert acc.finish is RequestStatus.FINISHED_LENGTH and acc.text == " alpha beta"
    assert req.output_ids == ids


def test_several_results_stop_at_the_first_that_ends(smollm_tokenizer):
    """Speculative verification hands over several tokens; the ones after an end are dropped."""
    tok = smollm_tokenizer
    req = request(tok, max_new=2)
    acc = accept_tokens(req, results([40, 41, 42, 43]), now=0.0)
    assert acc.num_new == 2 and req.output_ids == [40, 41] and acc.finish is RequestStatus.FINISHED_LENGTH


@pytest.mark.parametrize(
    "status", [RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED]
)
def test_generation_has_one_set_of_stats_keys(smollm_tokenizer, status):
    req = request(smollm_tokenizer)
    accept_tokens(req, results([40, 41]), now=req.times.arrival + 1)
    req.num_sampling_forwards = 2
    req.status, req.times.finished = status, req.times.arrival + 3
    g = make_generation(req)
    assert tuple(g.stats) == STATS_KEYS and g.finish_reason == status.finish_reason.value
    assert g.stats["tokens_per_target_forward"] == 1.0 and g.stats["completion_tokens"] == 2
    assert g.timings.ttft_s == pytest.approx(1.0) and g.timings.total_s == pytest.approx(3.0)
    assert g.stats["decode_tokens_per_s"] == pytest.approx(1 / 2.0)
