"""llama.cpp (through llama-cpp-python, the `bench` extra) as a peer on the same GGUF file: load time and
resident memory added, prefill of a prompt, and greedy decode of a fixed number of tokens that ignores EOS,
from the same prompt ids with the same thread count as ours.

Greedy is an argmax over the logits llama.cpp hands back after each evaluation, so both engines do the same
work per token: one forward of one new token, then the choice of the next."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def rss_bytes() -> int | None:
    """Resident memory of this process now (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure_load(fn, *args, **kwargs) -> tuple[object, float, int | None]:
    """(fn's result, seconds, resident bytes it added)."""
    before = rss_bytes()
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    seconds = time.perf_counter() - t0
    after = rss_bytes()
    return result, seconds, None if before is None or after is None else after - before


@dataclass
class LlamaCpp:
    model: object  # llama_cpp.Llama
    threads: int
    load_s: float
    rss_added: int | None


KV_TYPES = {"f16": 1, "q8_0": 8}  # ggml's type ids (GGML_TYPE_F16, GGML_TYPE_Q8_0)


def load(path: str, threads: int, n_ctx: int = 2048, kv: str = "f16", flash_attn: bool = False) -> LlamaCpp:
    """llama.cpp on the file: its KV cache of type kv (f16 or q8_0; a quantized V cache needs flash_attn)."""
    if not path.endswith(".gguf") or not os.path.isfile(path):
        raise ValueError(f"llama.cpp runs GGUF files, got {path!r}")
    from llama_cpp import Llama

    model, seconds, added = measure_load(
        Llama,
        model_path=path,
        n_ctx=n_ctx,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        type_k=KV_TYPES[kv],
        type_v=KV_TYPES[kv],
        flash_attn=flash_attn,
        verbose=False,
    )
    return LlamaCpp(model, threads, seconds, added)


def close(peer: LlamaCpp | None) -> None:
    """Free llama.cpp's model now (its destructor fails if left to interpreter shutdown)."""
    if peer is not None:
        peer.model.close()


def _argmax(peer: LlamaCpp) -> int:
    """The greedy choice from the logits of the last evaluated position (the only row llama.cpp keeps)."""
    import llama_cpp
    import numpy as np

    m = peer.model
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(m.ctx), shape=(m.n_vocab(),))  # [V]
    return int(logits.argmax())


def prefill(peer: LlamaCpp, ids: list[int]) -> float:
    """Seconds of one evaluation of the whole prompt from an empty cache."""
    peer.model.reset()
    t0 = time.perf_counter()
    peer.model.eval(ids)
    return time.perf_counter() - t0


def decode(peer: LlamaCpp, ids: list[int], n: int) -> dict:
    """Greedy n new tokens after the prompt; the decode rate counts tokens 2..n over their time, as ours. A
    prompt the context already holds (a repeat) keeps its keys and values and evaluates its last token again,
    as our engine's prefix cache does, so repeats at long contexts cost no prefill on either side."""
    m = peer.model
    t0 = time.perf_counter()
    if len(ids) > 1 and m.n_tokens >= len(ids) and list(m.input_ids[: len(ids)]) == list(ids):
        m.n_tokens = len(ids) - 1  # eval drops the keys from n_tokens on
        m.eval(ids[-1:])
    else:
        m.reset()
        m.eval(ids)
    out = [_argmax(peer)]
    t_first = time.perf_counter()
    while len(out) < n:
        m.eval([out[-1]])
        out.append(_argmax(peer))
    t_end = time.perf_counter()
    decode_s = t_end - t_first
    return {
        "wall_s": t_end - t0,
        "ttft_s": t_first - t0,
        "decode_tokens_per_s": (n - 1) / decode_s if n > 1 and decode_s > 0 else 0.0,
        "ids": out,
    }


def peer_usable(path: str) -> bool:
    """Whether llama.cpp can run the model at `path`; when not, a note saying why."""
    if not available():
        print("llama-cpp-python is not installed (pip install -e '.[bench]'): the llama.cpp rows stay empty")
        return False
    if not path.endswith(".gguf"):
        print(f"llama.cpp runs GGUF files only; {path!r} is not one: the llama.cpp rows stay empty")
        return False
    return True


def peer_for(path: str, threads: int, n_ctx: int = 2048) -> LlamaCpp | None:
    """llama.cpp on the same file, or None (with a note) when it is not installed or the model is not GGUF."""
    return load(path, threads, n_ctx) if peer_usable(path) else None


def prefill_pair(ours, peer: LlamaCpp | None, ids: list[int], repeats: int) -> dict:
    """Prefill tokens/s of the same prompt, ours (`ours()`: one prefill, returning its seconds) and llama.cpp's,
    taking turns; the fastest run of each counts."""
    ours()  # first-call set-up
    mine, theirs = [], []
    for _ in range(repeats):
        mine.append(ours())
        if peer is not None:
            theirs.append(prefill(peer, ids))
    out = {
        "prompt_tokens": len(ids),
        "ours_tokens_per_s": len(ids) / min(mine),
        "llamacpp_tokens_per_s": len(ids) / min(theirs) if theirs else None,
    }
    out["ours_over_llamacpp"] = (
        out["ours_tokens_per_s"] / out["llamacpp_tokens_per_s"] if out["llamacpp_tokens_per_s"] else None
    )
    return out
