"""generate(): the loop end to end on scripted and tiny random models with the real SmolLM2 tokenizer."""

import pytest
import torch

from helpers.tiny_models import ScriptedModel, tiny_llama
from tinyllm import KVCache, SamplingParams, cache_dims, generate
from tinyllm.sampling.rng import request_rng
from tinyllm.sampling.sampler import process_logits

GREEDY = SamplingParams(temperature=0, max_tokens=20)


def scripted(tok, text_tokens, prompt="Hi", **kw):
    prompt_ids = tok.encode(prompt)
    return ScriptedModel(text_tokens, len(prompt_ids), vocab_size=tok.vocab_size, **kw), prompt_ids


def test_generate_greedy_follows_the_script(smollm_tokenizer):
    tok = smollm_tokenizer
    script = tok.encode(" there, friend. How are you?")
    model, prompt = scripted(tok, script + [2])
    pieces = []
    g = generate(model, tok, prompt, GREEDY.replace(max_tokens=50), on_text=pieces.append, eos_ids=(2,))
    assert g.ids == script and g.text == " there, friend. How are you?" == "".join(pieces)
    assert g.finish_reason == "stop"
    assert len(g.logprobs) == len(script) and all(lp.logprob <= 0 for lp in g.logprobs)
    assert g.stats["prompt_tokens"] == len(prompt) and g.stats["completion_tokens"] == len(script)
    assert g.timings.ttft_s > 0 and g.timings.total_s >= g.timings.ttft_s


def test_eos_stops_and_is_not_emitted(smollm_tokenizer):
    tok = smollm_tokenizer
    script = tok.encode(" one two") + [2] + tok.encode(" three")
    model, prompt = scripted(tok, script)
    g = generate(model, tok, prompt, GREEDY, eos_ids=(2,))
    assert g.ids == tok.encode(" one two") and g.text == " one two" and g.finish_reason == "stop"
    assert "<|im_end|>" not in g.text
    g = generate(model, tok, prompt, GREEDY.replace(ignore_eos=True, max_tokens=len(script)), eos_ids=(2,))
    assert g.ids == script and g.finish_reason == "length"
    g = generate(model, tok, prompt, GREEDY.replace(stop_token_ids=(script[1],)))
    assert g.ids == script[:1] and g.finish_reason == "stop"


def test_stop_strings_cut_and_stream_safely(smollm_tokenizer):
    tok = smollm_tokenizer
    text = " alpha beta. gamma delta"
    script = tok.encode(text)
    model, prompt = scripted(tok, script)
    for stop, cut in ((". g", " alpha beta"), ("ta. ", " alpha be"), ("lph", " a"), ("zzz", text)):
        pieces = []
        g = generate(model, tok, prompt, GREEDY.replace(stop=[stop], max_tokens=len(script)), on_text=pieces.append)
        assert g.text == cut and "".join(pieces) == cut, stop
        streamed = ""
        for piece in pieces:
            streamed += piece
            assert cut.startswith(streamed)
        assert g.finish_reason == ("length" if stop == "zzz" else "stop")


def test_max_len_limits_generation(smollm_tokenizer):
    tok = smollm_tokenizer
    model, prompt = scripted(tok, list(range(100, 160)), max_len=len(tok.encode("Hi")) + 5)
    g = generate(model, tok, prompt, GREEDY.replace(max_tokens=None))
    assert len(g.ids) == 5 and g.finish_reason == "length"
    g = generate(model, tok, prompt, GREEDY.replace(max_tokens=3))
    assert len(g.ids) == 3 and g.finish_reason == "length"
    with pytest.raises(ValueError, match="context length is 6"):
        generate(model, tok, list(range(10, 17)), GREEDY)
    with pytest.raises(ValueError, match="empty"):
        generate(model, tok, "", GREEDY)
    with pytest.raises(ValueError, match="out of range"):
        generate(model, tok, [1, 10**6], GREEDY)


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_cache_modes_give_the_same_greedy_ids_and_logprobs(smollm_tokenizer, chunk):
    model = tiny_llama(11, vocab_size=smollm_tokenizer.vocab_size)
    p = GREEDY.replace(max_tokens=16, logprobs=3)
    a = generate(model, smollm_tokenizer, [5, 900, 31, 7000, 12], p, cache="none")
    b = generate(model, smollm_tokenizer, [5, 900, 31, 7000, 12], p, cache="contiguous", prefill_chunk=chunk)
    assert a.ids == b.ids and len(a.ids) == 16
    for x, y in zip(a.logprobs, b.logprobs):
        assert abs(x.logprob - y.logprob) < 1e-5 and abs(x.entropy - y.entropy) < 1e-5
        assert [t for t, _ in x.top] == [t for t, _ in y.top]


def test_seeded_sampling_uses_the_request_stream(smollm_tokenizer):
    """Replay the sampler by hand: same ids, logprobs and entropy; the prompt counts for the repetition penalty."""
    tok = smollm_tokenizer
    model = tiny_llama(12, vocab_size=tok.vocab_size)
    prompt = [50, 51, 52, 50, 9000]
    p = SamplingParams(
        temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.3, frequency_penalty=0.2, seed=1234, max_tokens=12
    )
    g = generate(model, tok, prompt, p)
    rng, ids = request_rng(1234), []
    with torch.no_grad():
        for t, lp in enumerate(g.logprobs):
            logits = model(torch.tensor([prompt + ids]))[0, -1]
            dist = torch.log_softmax(process_logits(logits, p, prompt, ids), -1).double()
            cdf = dist.exp().cumsum(0)
            token = int(
                torch.searchsorted(
                    cdf, torch.tensor([rng.uniform(t) * float(cdf[-1])], dtype=torch.float64), right=True
                )[0]
            )
            assert token == lp.token == g.ids[t]
            assert abs(float(dist[token]) - lp.logprob) < 1e-4
            p_ = dist.exp()
            entropy = -float((p_[p_ > 0] * dist[p_ > 0]).sum())
            assert abs(entropy - lp.entropy) < 1e-4
            ids.append(token)
    again = generate(model, tok, prompt, p, prefill_chunk=2)
    assert again.ids == g.ids


class FixedLogits(torch.nn.Module):
    """Every step: token 7 scores 2.0, token 9 scores 1.9, the rest 0."""

    def __init__(self, vocab_size):
        super().__init__()
        self.config = tiny_llama(0).config.__class__(**{**vars(tiny_llama(0).config), "vocab_size": vocab_size})
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids, step=None):
        logits = torch.zeros(ids.shape[0], ids.shape[1], self.config.vocab_size)
        if step is not None and step.logit_rows is not None:
            logits = logits[:, step.logit_rows]
        logits[..., 7], logits[..., 9] = 2.0, 1.9
        return logits


def test_repetition_penalty_counts_the_prompt_and_presence_does_not(smollm_tokenizer):
    model = FixedLogits(smollm_tokenizer.vocab_size)
    p = SamplingParams(temperature=0, max_tokens=1, repetition_penalty=1.3)
    assert generate(model, smollm_tokenizer, [7, 3], p, cache="none").ids == [9]  # 2.0 / 1.3 < 1.9
    assert generate(model, smollm_tokenizer, [3, 3], p, cache="none").ids == [7]
    presence = SamplingParams(temperature=0, max_tokens=2, presence_penalty=0.5)
    assert generate(model, smollm_tokenizer, [7, 3], presence, cache="none").ids == [7, 9]  # only generated ids


def test_cache_modes_and_dims(smollm_tokenizer):
    model = tiny_llama(13, vocab_size=smollm_tokenizer.vocab_size)
    with pytest.raises(ValueError, match="cache must be one of"):
        generate(model, smollm_tokenizer, [1, 2], GREEDY, cache="ring")
    n_layers, n_kv, d_head, max_len = cache_dims(model)
    own = KVCache(n_layers, n_kv, d_head, 64)
    g = generate(model, smollm_tokenizer, [1, 2, 3], GREEDY.replace(max_tokens=5), cache=own)
    assert own.seq_len() == 3 + 5 - 1  # the last sampled token is never fed back
    assert g.ids == generate(model, smollm_tokenizer, [1, 2, 3], GREEDY.replace(max_tokens=5), cache="none").ids
    with pytest.raises(ValueError, match="must be empty"):
        generate(model, smollm_tokenizer, [1, 2, 3], GREEDY, cache=own)

    class HFStyle:
        config = type(
            "C",
            (),
            dict(
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=2,
                hidden_size=256,
                max_position_embeddings=512,
            ),
        )()

    assert cache_dims(HFStyle()) == (4, 2, 32, 512)
    assert cache_dims(model) == (3, 2, 16, 128)
