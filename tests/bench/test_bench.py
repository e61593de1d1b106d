"""Smoke runs of every `tinyllm bench` kind with --quick on a tiny random model: the JSON has the expected
keys and sane values. Benchmarks are never pass/fail on speed, so no timing is asserted."""

import importlib.util
import json
import os

import pytest

from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm.cli import main
from tinyllm.kernels import native

HAS_REFERENCE = importlib.util.find_spec("transformers") is not None
HAS_PLOT = importlib.util.find_spec("matplotlib") is not None
HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model = random_tiny_llama(3, max_position_embeddings=512, num_heads=2, num_kv_heads=1, head_dim=32)
    return write_hf_folder(model, str(tmp_path_factory.mktemp("hf")))


def bench(kind, folder, out, *extra):
    assert main(["bench", kind, "--quick", "--model", folder, "--out", str(out), *extra]) == 0
    with open(os.path.join(out, f"{kind}.json")) as f:
        result = json.load(f)
    assert result["bench"] == kind and result["options"]["quick"] is True
    assert result["machine"]["cpu_count"] >= 1 and result["model"] == os.path.abspath(folder)
    for when in ("compute_before", "compute_after"):  # the cores' FMA rate around the runs
        rates = result["machine"][when]
        assert len(rates) == 2 and all(v is None or positive(v) for v in rates.values())
        assert any(v is not None for v in rates.values()) or native.library() is None
    assert os.path.isfile(os.path.join(out, f"{kind}.png")) == HAS_PLOT  # every kind draws its figure
    return result


def positive(x):
    return isinstance(x, (int, float)) and x > 0


@pytest.mark.slow
def test_load(folder, tmp_path):
    r = bench("load", folder, tmp_path)
    assert positive(r["load"]["ours_s"]) and r["prefill"]["prompt_tokens"] == 32
    assert positive(r["prefill"]["ours_tokens_per_s"]) and positive(r["uncached_decode"]["ours_tokens_per_s"])
    assert r["uncached_decode"]["new_tokens"] == 4
    if HAS_REFERENCE:
        assert positive(r["load"]["reference_s"]) and positive(r["prefill"]["speedup"])
        assert r["uncached_decode"]["same_ids"] is True  # exact engine, same float32 weights


@pytest.mark.slow
def test_decode(folder, tmp_path):
    r = bench("decode", folder, tmp_path)
    modes = {row["mode"] for row in r["rows"]}
    assert {"none", "contiguous", "engine", "engine-f16", "engine-q8kv"} <= modes
    assert {"engine-float", "engine-float-f16"} <= modes  # float32 activations, loaded beside
    assert not modes & {"engine-int8", "engine-int8-f16", "engine-int8-q8kv", "engine-int24", "engine-int24-f16"}
    # (float weights: no integer activations)
    assert ("reference" in modes) == HAS_REFERENCE
    for row in r["rows"]:
        assert row["new_tokens"] in (4, 8) and positive(row["wall_s"]) and positive(row["decode_tokens_per_s"])
        if row["mode"] in ("none", "engine", "reference"):
            assert row["same_ids_as_contiguous"] is True
        floor = row["memory_floor"]  # the main model's cached modes: the bytes their decode steps read at the least
        assert (floor is not None) == (row["mode"] in ("contiguous", "engine", "engine-f16", "engine-q8kv"))
        if floor:
            assert positive(floor["read_gb_per_s"]) and floor["weight_mb_per_step"] > 0 and floor["kv_mb_per_step"] > 0
            assert 0 < row["share_of_memory_floor"] == row["decode_tokens_per_s"] / floor["most_tokens_per_s"]
    f16 = {row["new_tokens"]: row["memory_floor"]["kv_mb_per_step"] for row in r["rows"] if row["mode"] == "engine-f16"}
    f32 = {row["new_tokens"]: row["memory_floor"]["kv_mb_per_step"] for row in r["rows"] if row["mode"] == "engine"}
    assert f16 == pytest.approx({n: v / 2 for n, v in f32.items()})
    q8 = {row["new_tokens"]: row["memory_floor"]["kv_mb_per_step"] for row in r["rows"] if row["mode"] == "engine-q8kv"}
    assert q8 == pytest.approx({n: v * (1 + 2 / 32) / 4 for n, v in f32.items()})  # int8 and a float16 per 32
    assert positive(r["ratios"]["contiguous_over_none"]["8"])
    assert r["ratios"]["aims"]["at"] == 8

    assert r["prefill"]["prompt_tokens"] == 32 and positive(r["prefill"]["ours_tokens_per_s"])
    assert r["prefill"]["llamacpp_tokens_per_s"] is None  # llama.cpp runs GGUF files only


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama-cpp-python is not installed")
def test_decode_and_load_beside_llamacpp(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    write_gguf(
        random_tiny_llama(3, hidden_size=64, max_position_embeddings=512, num_heads=2, num_kv_heads=1, head_dim=32),
        path,
        quant_types={"weight": "Q8_0"},
        pre="gpt-2",
    )
    modes = ("--modes", "engine", "engine-int8", "engine-int24", "engine-q8kv", "--llamacpp-kv", "f16", "q8_0")
    r = bench("decode", path, tmp_path / "d", "--no-reference", *modes)
    rows = {row["mode"]: row for row in r["rows"] if row["new_tokens"] == 8}
    assert set(rows) == {"engine", "engine-int8", "engine-int24", "engine-q8kv", "llama.cpp", "llama.cpp-q8kv"}
    assert all(positive(rows[p]["decode_tokens_per_s"]) for p in ("llama.cpp", "llama.cpp-q8kv"))
    assert positive(r["ratios"]["engine_q8kv_over_llamacpp_q8kv"]["8"])
    q8, theirs = rows["engine-q8kv"]["memory_floor"], rows["llama.cpp-q8kv"]["memory_floor"]
    assert q8["kv_mb_per_step"] == pytest.approx(theirs["kv_mb_per_step"])  # the same layout's bytes
    # the same file's weights for both; llama.cpp keeps keys and values in float16, ours in float32 here
    ours, peer = rows["engine"]["memory_floor"], rows["llama.cpp"]["memory_floor"]
    assert peer["weight_mb_per_step"] == ours["weight_mb_per_step"] and peer["kv_mb_per_step"] * 2 == pytest.approx(
        ours["kv_mb_per_step"]
    )
    assert rows["engine-int8"]["memory_floor"] is None
    assert positive(r["ratios"]["engine_over_llamacpp"]["8"]) and positive(
        r["ratios"]["engine_int8_over_llamacpp"]["8"]
    )
    assert positive(r["prefill"]["ours_int8_tokens_per_s"]) and positive(r["prefill"]["ours_int24_tokens_per_s"])
    assert positive(r["ratios"]["engine_int24_over_llamacpp"]["8"])
    assert positive(r["prefill"]["llamacpp_tokens_per_s"]) and positive(r["prefill"]["ours_over_llamacpp"])
    r = bench("load", path, tmp_path / "l", "--no-reference")
    assert positive(r["load"]["llamacpp_s"]) and r["load"]["ours_rss_added"] is not None


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    model = random_tiny_llama(3, hidden_size=64, max_position_embeddings=512)
    write_gguf(model, path, quant_types={"weight": "Q8_0"}, pre="gpt-2")
    return path


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama-cpp-python is not installed")
def test_throughput_beside_llamacpp(tiny_gguf, tmp_path):
    r = bench("throughput", tiny_gguf, tmp_path, "--no-reference")
    peers = r["llamacpp_batched"]
    assert [p["concurrency"] for p in peers] == [3]  # --quick: the larger of ours, 1 and 3
    for p, ours in zip(peers, r["closed"][1:]):  # the same requests: the same prompt and output tokens
        assert (p["prompt_tokens"], p["output_tokens"]) == (ours["prompt_tokens"], ours["output_tokens"])
        assert positive(p["output_tokens_per_s"]) and p["ttft_s"]["n"] == p["requests"] == ours["requests"]
        assert 0 <= p["ttft_s"]["p50"] <= p["ttft_s"]["p99"] and p["itl_s"]["p50"] > 0
    assert positive(r["comparison"]["output_tokens_per_s_over_llamacpp_at_3"])
    assert positive(r["comparison"]["decode_tokens_per_s_over_llamacpp_at_3"])


@pytest.mark.parametrize("counts", [["0"], ["4", "300"]])
def test_throughput_names_a_llamacpp_count_it_cannot_run(folder, tmp_path, counts, capsys):
    assert main(["bench", "throughput", "--model", folder, "--out", str(tmp_path), "--llamacpp", *counts]) == 2
    err = capsys.readouterr().err
    assert f"--llamacpp {counts[-1]}:" in err and "--max-batched-tokens 256" in err
    assert not os.listdir(tmp_path)  # nothing ran


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama-cpp-python is not installed")
def test_llamacpp_batched_gives_each_request_its_own_tokens(tiny_gguf):
    """Three requests of different prompts run at once, with a budget that splits the prompts over steps,
    each get the tokens llama.cpp's one-sequence decode gives that prompt alone."""
    from tinyllm.bench import llamacpp, llamacpp_batch
    from tinyllm.bench.workload import Work

    prompts = [[5 + i % 50 for i in range(n)] for n in (9, 23, 4)]
    prompts[1][0] = 77  # no two prompts share a first token
    work = [Work(p, m) for p, m in zip(prompts, (6, 3, 8))]
    batched = llamacpp_batch.drive(tiny_gguf, work, threads=1, budget=8, keep_ids=True)
    assert [len(ids) for ids in batched["ids"]] == [6, 3, 8] and batched["steps"] > 23 / 8
    peer = llamacpp.load(tiny_gguf, threads=1)
    try:
        alone = [llamacpp.decode(peer, w.ids, w.max_tokens)["ids"] for w in work]
    finally:
        llamacpp.close(peer)
    assert batched["ids"] == alone
    with pytest.raises(ValueError, match="budget of 2 .* 3 requests"):
        llamacpp_batch.drive(tiny_gguf, work, threads=1, budget=2)


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama-cpp-python is not installed")
def test_llamacpp_repeats_keep_the_prompts_keys_and_give_the_same_tokens(tiny_gguf):
    """A repeat of the prompt the context holds evaluates only its last token again and gives the tokens of a
    run from an empty context; a prompt the context does not start with starts from an empty one."""
    from tinyllm.bench import llamacpp

    a, b = [5 + i % 50 for i in range(40)], [7 + i % 30 for i in range(40)]
    peer = llamacpp.load(tiny_gguf, threads=1)
    resets, reset = [], peer.model.reset
    peer.model.reset = lambda: (resets.append(1), reset())[1]
    try:
        fresh = llamacpp.decode(peer, a, 12)["ids"]
        assert peer.model.n_tokens == 40 + 11 and len(resets) == 1
        again = llamacpp.decode(peer, a, 12)["ids"]
        assert len(resets) == 1  # the repeat kept the prompt's keys
        other = llamacpp.decode(peer, b, 12)["ids"]
        assert len(resets) == 2
        shorter = llamacpp.decode(peer, a[:30], 12)["ids"]  # the context holds b: not a prefix of it
        peer.model.reset()
        assert llamacpp.decode(peer, b, 12)["ids"] == other and llamacpp.decode(peer, a[:30], 12)["ids"] == shorter
    finally:
        llamacpp.close(peer)
    assert again == fresh and other != fresh


def test_decode_rows_of_each_kv_type_keep_their_engine_between_turns(folder):
    """The float32 and float16 KV rows take turns on one LLM; each finds its own engine (and the prompt's keys
    in its prefix cache) again on its next turn."""
    from tinyllm import LLM
    from tinyllm.bench import decode

    llm = LLM(folder)
    ids, engines, made = list(range(3, 60)), {}, {}
    for turn in range(2):
        for kv in ("float32", "float16"):
            run = decode.ours(llm, ids, 4, {"kv_dtype": kv}, engines)
            made.setdefault(kv, llm._shared.engine)
            assert llm._shared.engine is made[kv]
            assert (run["cached_tokens"] > 0) == (turn == 1)
    assert made["float32"] is not made["float16"]
    assert decode.ours(llm, ids, 4, {"kv_dtype": "float32"})["cached_tokens"] == 0  # without: made again


@pytest.mark.slow
def test_step(folder, tmp_path):
    r = bench("step", folder, tmp_path)
    b = r["breakdown"]
    assert r["steps"] == 4 and positive(b["wall_ms_per_token"]) and positive(b["eager_calls_per_token"])
    assert abs(sum(b["ms_per_token"].values()) - b["wall_ms_per_token"]) < 1e-6 * b["wall_ms_per_token"]
    assert b["calls_per_token"]["attention"] == 3  # one attention call per layer of the tiny model
    assert positive(b["ms_per_token"]["matmul"])
    assert r["engine"] == {"native_step": False}  # float weights: the engine runs the module path


@pytest.mark.slow
def test_step_native(folder, tmp_path):
    """Quantized at load: the engine's decode steps run natively, and their parts add up to the token's time
    (less the call into the native step itself)."""
    e = bench("step", folder, tmp_path, "--quantize", "int8")["engine"]
    assert e["native_step"] and positive(e["wall_ms_per_token"])
    parts = e["ms_per_token"]
    assert all(ms >= 0 for ms in parts.values()) and positive(parts["matmul (layers)"])
    assert 0.5 * e["wall_ms_per_token"] <= sum(parts.values()) <= e["wall_ms_per_token"] * (1 + 1e-9)


@pytest.mark.slow
def test_step_times_a_verification_of_k_rows(folder, tmp_path):
    """--verify-rows K: the engine's forwards with K rows of one sequence (K - 1 drafts, proposed at every step
    whatever was accepted) are timed beside its one-row decode forwards."""
    r = bench("step", folder, tmp_path, "--quantize", "int8", "--verify-rows", "3", "5")
    v = r["verification"]
    assert list(v["forward_ms"]) == ["1", "3", "5"] and all(positive(ms) for ms in v["forward_ms"].values())
    assert list(v["over_one_row"]) == ["1", "3", "5"] and v["forwards_measured"] == 3 * r["steps"]


@pytest.mark.slow
def test_throughput(folder, tmp_path):
    r = bench("throughput", folder, tmp_path)
    assert [c["concurrency"] for c in r["closed"]] == [1, 3]
    assert [c["kv_dtype"] for c in r["closed"]] == ["float32", "float32"]
    assert [c["kv_pool_prefaulted"] for c in r["closed"]] == [True, True]
    for run in r["closed"] + r["poisson"]:
        assert 3 <= run["output_tokens"] / run["requests"] <= 6  # outputs drawn from --output-range 3 6
        assert positive(run["output_tokens_per_s"]) and run["ttft_s"]["n"] == run["requests"]
        assert 0 <= run["ttft_s"]["p50"] <= run["ttft_s"]["p99"] and run["itl_s"]["p50"] >= 0
    assert r["poisson"][0]["rate"] == 8.0
    for c in r["closed"]:  # each request's (prompt, output, cached) tokens, and the run's float32 floor from them
        assert [sum(t[i] for t in c["request_tokens"]) for i in range(3)] == [
            c["prompt_tokens"],
            c["output_tokens"],
            c["cached_tokens"],
        ]
        floor = c["float32_floor"]
        if native.library() is None:
            assert floor is None
            continue
        assert floor["float32_floor_s"] == pytest.approx(floor["float32_gmacs"] / floor["fma_gmacs_per_s"])
        assert 0 < floor["share_of_floor"] < 1 and floor["most_output_tokens_per_s"] > c["output_tokens_per_s"]
    assert len(r["reference_static"]) == (1 if HAS_REFERENCE else 0)
    if HAS_REFERENCE:
        hf = r["reference_static"][0]
        assert hf["batch_size"] == 2 and hf["output_tokens"] == r["closed"][1]["output_tokens"]
        assert positive(r["comparison"]["output_tokens_per_s_over_hf_batch_2"])


@pytest.mark.slow
def test_throughput_with_a_half_precision_kv_cache(folder, tmp_path):
    r = bench("throughput", folder, tmp_path, "--kv-dtype", "float16", "--cold-pool", "--rates", "--hf-batch")
    assert [c["kv_dtype"] for c in r["closed"]] == ["float16", "float16"]
    assert [c["kv_pool_prefaulted"] for c in r["closed"]] == [False, False]
    assert all(positive(c["output_tokens_per_s"]) for c in r["closed"])


@pytest.mark.slow
def test_prefix(folder, tmp_path):
    r = bench("prefix", folder, tmp_path)
    on, off = r["sharing"], r["no_sharing"]
    assert r["same_ids"] is True and r["requests"] == 4
    assert on["cached_tokens"] > 0 and off["cached_tokens"] == 0
    again = r["repeated"]  # each prompt sent again alone: all but its last token cached, or nothing
    assert again["sharing"]["requests"] == again["no_sharing"]["requests"] == 4
    assert again["sharing"]["cached_tokens"] == r["prompt_tokens"] - 4 and again["no_sharing"]["cached_tokens"] == 0
    assert positive(again["sharing"]["ttft_s"]["p50"]) and positive(r["repeated_ttft_p50_speedup"])
    assert 0 < off["peak_blocks_used"] <= r["blocks_without_sharing_in_theory"]
    assert 0 < on["blocks_per_running_request"] < off["blocks_per_running_request"]
    assert positive(on["all_prefilled_s"]) and on["output_tokens"] == off["output_tokens"] == 4 * 3


@pytest.mark.slow
@pytest.mark.parametrize("max_num_seqs", [None, 1])
def test_serve(folder, tmp_path, max_num_seqs):
    extra = [] if max_num_seqs is None else ["--max-num-seqs", str(max_num_seqs)]
    r = bench("serve", folder, tmp_path, "--threads", "1", *extra)
    assert r["options"]["max_num_seqs"] == max_num_seqs and [c["concurrency"] for c in r["http"]] == [1, 2]
    for http, row in zip(r["http"], r["comparison"]):
        assert row["texts_identical"] == f"{http['requests']}/{http['requests']}"  # the server's text is the engine's
        assert 4 * http["requests"] <= http["output_tokens"] <= 8 * http["requests"]
        assert 1 <= http["peak_streaming"] <= http["requests"] and row["http_streams_at_once"] == http["peak_streaming"]
    # the in-process engine runs with the server's settings: both clients at once, or one at a time
    assert [e["peak_running"] for e in r["engine"]] == [1, 2 if max_num_seqs is None else 1]


def test_bench_help_lists_every_kind(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    for kind in ("load", "decode", "throughput", "prefix"):
        assert kind in text


@pytest.mark.slow
def test_speculative(folder, tmp_path):
    r = bench("speculative", folder, tmp_path, "--draft-model", folder)  # the target as its own draft model
    tasks = {row["task"] for row in r["rows"]}
    assert tasks == {"repeat", "code-edit", "free-text"}
    drafted = [row for row in r["rows"] if row["mode"] == "draft-model"]
    assert len(drafted) == 3 and all(row["acceptance_rate"] == 1.0 for row in drafted)
    for row in r["rows"]:
        assert row["same_ids_as_plain"] is True  # speculation never changes greedy output
        assert positive(row["decode_tokens_per_s"]) and positive(row["speedup_vs_plain"])
        if row["mode"] != "plain":
            assert 0.0 <= row["acceptance_rate"] <= 1.0 and row["tokens_per_target_forward"] >= 1.0


@pytest.mark.slow
def test_structured(folder, tmp_path):
    r = bench("structured", folder, tmp_path)
    assert positive(r["compile"]["vocabulary_s"]) and positive(r["compile"]["json_schema_ms"])
    for kind in ("json_schema", "regex", "tool_call"):
        mask = r["mask"][kind]
        assert mask["steps"] == sum(mask["tokens_per_generation"]) > 0
        assert 0 < mask["p50_ms"] <= mask["p99_ms"]
    decode = r["decode"]
    assert decode["batch1_constrained_tokens"] >= 1
    assert positive(decode["batch1_unconstrained_decode_tokens_per_s"])
    assert positive(decode["concurrent_half_constrained_tokens_per_s"])
