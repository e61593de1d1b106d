"""lm-evaluation-harness's `local-completions` model against a live `tinyllm serve`: its loglikelihood pairs
(logprob, is_greedy), which it reads from /v1/completions echo with logprobs, equal LLM.score on the same
tiny model and the same token ids."""

import pytest

from helpers.live_server import serve
from helpers.model_files import random_tiny_llama, write_hf_folder
from tinyllm import LLM

lm_eval = pytest.importorskip("lm_eval")

REQUESTS = [  # (context, continuation), as a multiple-choice task would ask them
    ("The river runs to the", " sea"),
    ("The river runs to the", " mountain"),
    ("Question: what is the capital of France?\nAnswer:", " Paris"),
    ("Question: what is the capital of France?\nAnswer:", " the heart of the river"),
    ("one two three ", "four five"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("lmeval") / "tiny")
    write_hf_folder(random_tiny_llama(23, max_position_embeddings=128), path)
    return path


@pytest.fixture(scope="module")
def base_url(folder):
    with serve("--model", folder, "--kv-memory-gb", "0.05", "--served-model-name", "tiny") as port:
        yield f"http://127.0.0.1:{port}/v1/completions"


def greedy_request(llm) -> tuple[str, str]:
    """A context and the text of the model's greedy next token after it (so is_greedy must come back True)."""
    candidates = [c for c, _ in REQUESTS] + ["The", "It is", "A", "("]  # a random model often picks a byte token
    for context in dict.fromkeys(candidates):  # the first whose greedy token re-encodes as itself
        ids = llm.tokenizer.encode(context)
        token = llm.generate(ids, temperature=0, max_tokens=1, ignore_eos=True).ids[0]
        text = llm.tokenizer.decode([token])
        if llm.tokenizer.encode(context + text) == ids + [token]:
            return context, text
    raise AssertionError("no context's greedy token re-encodes as itself; add another context")


@pytest.mark.slow
def test_local_completions_loglikelihood_equals_llm_score(folder, base_url):
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    llm = LLM(folder)
    requests = REQUESTS + [greedy_request(llm)]
    # the tiny model's tokenizer.json, loaded by transformers from the folder: no download
    lm = LocalCompletionsAPI(
        base_url=base_url,
        model="tiny",
        tokenizer_backend="huggingface",
        tokenizer=folder,
        max_length=128,
        max_retries=1,
    )
    instances = [Instance("loglikelihood", doc={}, arguments=pair, idx=i) for i, pair in enumerate(requests)]
    got = lm.loglikelihood(instances)

    for (context, continuation), (logprob, is_greedy) in zip(requests, got):
        head, tail = lm._encode_pair(context, continuation)  # lm-eval's split of the ids (trailing spaces move)
        assert head + tail == llm.tokenizer.encode(context + continuation)  # both tokenizers agree
        want = llm.score(head, tail)
        assert logprob == pytest.approx(want.logprob, abs=1e-4)
        assert is_greedy == want.is_greedy
    assert got[-1][1] is True and not all(greedy for _, greedy in got)
    assert len({round(lp, 3) for lp, _ in got}) == len(requests)  # distinct scores, not a constant
