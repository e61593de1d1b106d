"""`tinyllm perplexity` against HF transformers on the same weights: the strided-window loop written out here
over transformers' own logits gives the same perplexity; the window rule scores every token but the first
exactly once; bad input is one error line and exit 2."""

import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_cli import run

from helpers.model_files import random_tiny_llama, write_hf_folder
from tinyllm import LLM
from tinyllm.errors import TinyLLMError
from tinyllm.perplexity import make_windows, perplexity, window_size

TEXT = (
    "The river runs to the sea, and yet the sea is never full; to the place the river comes from, "
    "there it returns again. "
) * 5


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ppl") / "tiny")
    write_hf_folder(random_tiny_llama(17, max_position_embeddings=64), path)
    return path


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "river.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.fixture(scope="module")
def hf_model(folder):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hf_window_nlls(model, ids: list[int], context: int, stride: int) -> list[float]:
    """Each window's summed NLL from transformers' logits, windows stepping by stride, each scoring only the
    tokens no earlier window scored (and never a window's first token, which has no context in it)."""
    nlls, prev_end = [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + context, len(ids))
        window = torch.tensor([ids[begin:end]])
        with torch.no_grad():
            logp = torch.log_softmax(model(window).logits[0].double(), dim=-1)  # [T, V]
        targets = range(max(prev_end, begin + 1), end)
        if targets:
            nlls.append(-sum(logp[t - begin - 1, ids[t]].item() for t in targets))
        prev_end = end
        if end == len(ids):
            break
    return nlls


@pytest.mark.parametrize("context, stride", [(40, 40), (33, 7), (63, 20)])
def test_perplexity_equals_transformers_on_the_same_windows(folder, hf_model, one_thread, context, stride):
    llm = LLM(folder)
    ids = llm.tokenizer.encode(TEXT)
    result = perplexity(llm, ids, context, stride)
    want = hf_window_nlls(hf_model, ids, context, stride)
    assert [w.nll for w in result.windows] == pytest.approx(want, rel=1e-5)
    assert result.num_scored == len(ids) - 1 - (len(result.windows) - 1) * (stride == context)
    assert result.perplexity == pytest.approx(math.exp(sum(want) / result.num_scored), rel=1e-4)


@pytest.mark.slow
def test_cli_prints_and_writes_the_transformers_perplexity(folder, hf_model, text_file, tmp_path):
    out = tmp_path / "ppl.json"
    r = run("perplexity", text_file, "--model", folder, "--context", "48", "--stride", "16", "--json", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    ids = LLM(folder).tokenizer.encode(TEXT)
    want = hf_window_nlls(hf_model, ids, 48, 16)
    assert got["tokens"] == len(ids) and got["tokens_scored"] == len(ids) - 1
    assert [w["nll"] for w in got["windows"]] == pytest.approx(want, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(sum(want) / (len(ids) - 1)), rel=1e-4)
    assert got["mean_nll"] == pytest.approx(sum(want) / (len(ids) - 1), rel=1e-4)
    assert f"perplexity: {got['perplexity']:.4f}" in r.stdout


@given(st.integers(2, 300), st.integers(2, 64), st.data())
def test_windows_score_each_token_but_the_first_once(num_tokens, context, data):
    stride = data.draw(st.integers(1, context))
    windows = make_windows(num_tokens, context, stride)
    scored = [t for w in windows for t in range(w.first_scored, w.end)]
    if stride < context:  # overlapping windows leave no token unscored
        assert scored == list(range(1, num_tokens))
    else:  # back-to-back windows: each window's first token has no context in it
        assert scored == [t for t in range(1, num_tokens) if t % context]
    assert all(w.end - w.start <= context and w.start < w.first_scored < w.end for w in windows)
    assert [w.start for w in windows] == [k * stride for k in range(len(windows))]


def test_window_size_defaults_and_limits():
    assert window_size(None, 8192) == 512 and window_size(None, 100) == 99
    for bad in (1, 100):
        with pytest.raises(TinyLLMError, match="context"):
            window_size(bad, 100)
    with pytest.raises(TinyLLMError, match="stride"):
        make_windows(50, 10, 11)
    with pytest.raises(TinyLLMError, match="at least 2"):
        make_windows(1, 10, 10)


@pytest.mark.parametrize(
    "args, message",
    [
        (["perplexity", "/no/such/file.txt", "--model", "TINY"], "does not exist"),
        (["perplexity", "EMPTY", "--model", "TINY"], "is empty"),
        (["perplexity", "TEXT", "--model", "TINY", "--context", "1"], "at least 2"),
        (["perplexity", "TEXT", "--model", "TINY", "--context", "64"], "more than the model"),
        (["perplexity", "TEXT", "--model", "TINY", "--context", "16", "--stride", "17"], "stride"),
    ],
)
@pytest.mark.slow
def test_cli_errors_are_one_line_and_exit_2(folder, text_file, tmp_path, args, message):
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    names = {"TINY": folder, "TEXT": text_file, "EMPTY": str(empty)}
    r = run(*[names.get(a, a) for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
