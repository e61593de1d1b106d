"""Token acceptance (the stop-id rule, stop strings, max_tokens) over every finish case, and the one
Generation builder; no model."""

import pytest

from tinyllm.engine.request import Request, RequestStatus, accept_tokens, make_generation
from tinyllm.outputs import STATS_KEYS
from tinyllm.sampling.params import SamplingParams
from tinyllm.sampling.sampler import SampleResult

EOS = 2


def results(ids):
    return [SampleResult(t, -0.5, [(t, -0.5)], 0.1) for t in ids]


def request(tok, max_tokens=10, eos=(EOS,), **params):
    p = SamplingParams(temperature=0, **params)
    return Request.create("r", tok.encode("Hi"), p, max_tokens, tok, eos)


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


def test_max_tokens_ends_with_length_and_flushes_held_back_text(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode(" alpha beta")
    req = request(tok, max_tokens=len(ids), stop=(" beta gamma",))
    acc = accept_tokens(req, results(ids + [99, 100]), now=0.0)
    # " beta" was held back as a possible start of the stop string; the end releases it
    assert acc.finish is RequestStatus.FINISHED_LENGTH and acc.text == " alpha beta"
    assert req.output_ids == ids


def test_several_results_stop_at_the_first_that_ends(smollm_tokenizer):
    """Speculative verification hands over several tokens; the ones after an end are dropped."""
    tok = smollm_tokenizer
    req = request(tok, max_tokens=2)
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


# -- min_tokens --------------------------------------------------------------------------


def test_min_tokens_puts_every_stop_id_in_the_params_the_sampler_sees(smollm_tokenizer):
    tok = smollm_tokenizer
    plain = request(tok, stop_token_ids=(7,))
    assert plain.params.stop_token_ids == (7,) and plain.stop_ids == {7, EOS}
    held = request(tok, stop_token_ids=(7,), min_tokens=3)
    assert held.params.stop_token_ids == (EOS, 7) and held.stop_ids == {7, EOS}
    ignoring = request(tok, stop_token_ids=(7,), min_tokens=3, ignore_eos=True)
    assert ignoring.params.stop_token_ids == (7,) and ignoring.stop_ids == {7}


def test_stop_strings_are_not_searched_before_the_min_tokens_th_token(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = [t for piece in (" stop", " here.", " stop", " there.", " end") for t in tok.encode(piece)]
    first, second = [i for i, t in enumerate(ids) if tok.decode([t]) == " stop"]
    for min_tokens, text in [
        (0, ""),  # no minimum: the first token is the stop string
        (first + 1, ""),  # the min_tokens-th token is searched
        (first + 2, " stop here."),  # the first is before the minimum; the second ends it
        (second + 2, " stop here. stop there. end"),  # none counts: max_tokens ends it
    ]:
        req = request(tok, max_tokens=len(ids), stop=(" stop",), min_tokens=min(min_tokens, len(ids)))
        acc = accept_tokens(req, results(ids), now=0.0)
        assert acc.text == text, min_tokens
        expected = RequestStatus.FINISHED_LENGTH if min_tokens > second + 1 else RequestStatus.FINISHED_STOPPED
        assert acc.finish is expected


@pytest.fixture(scope="module")
def eos_loving_llm(smollm_tokenizer):
    from helpers.tiny_models import tiny_llama
    from tinyllm import LLM

    model = tiny_llama(5, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=128)
    return LLM.from_parts(model, smollm_tokenizer)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_model_that_wants_to_stop_at_once_keeps_going_until_min_tokens(eos_loving_llm, temperature):
    from tinyllm import generate

    llm = eos_loving_llm
    eos = llm.eos_ids[0]
    bias = {eos: 100.0}  # EOS is the greedy token at every step, and almost surely the sampled one
    stopped = llm.generate([5, 90, 310], params=SamplingParams(temperature=temperature, seed=1, logit_bias=bias))
    assert stopped.ids == [] and stopped.finish_reason == "stop"
    p = SamplingParams(temperature=temperature, seed=1, logit_bias=bias, min_tokens=6, max_tokens=20)
    held = llm.generate([5, 90, 310], params=p)
    assert len(held.ids) == 6 and eos not in held.ids and held.finish_reason == "stop"
    assert generate(llm.model, llm.tokenizer, [5, 90, 310], p, eos_ids=llm.eos_ids).ids == held.ids
