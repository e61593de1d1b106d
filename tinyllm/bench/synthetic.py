"""GGUF files with the layer shapes of real models and random weights, for measuring speed at real size: a
decode step's cost depends on the shapes and formats, not on the weights' values.

`--model synthetic:SHAPE:FORMAT` (e.g. `synthetic:llama-3.2-1b:Q4_K_M`) in any `tinyllm bench` builds the file
once and reuses it from the cache folder ($TINYLLM_SYNTHETIC_DIR, default ~/.cache/tinyllm/synthetic): a float16
file with the shape's tensors (normal, std 0.02; a fixed seed), then llama.cpp's own quantizer
(`llama_model_quantize` of llama-cpp-python, the `bench` extra) to the format, with its mixes (Q4_K_M puts
Q6_K on some tensors) as a user's file has them. The vocabulary is the default model's, padded with control
tokens to the shape's size, so the head has its real width and prompts tokenize as usual.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import numpy as np

from ..errors import TinyLLMError
from .synthetic_vocab import add_vocabulary, vocabulary

PREFIX = "synthetic:"


@dataclass(frozen=True)
class Shape:
    architecture: str  # general.architecture: llama or qwen2
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_theta: float
    qkv_bias: bool = False
    tied: bool = True  # the head shares the embeddings (as the 1B/3B/0.5B models do)
    context: int = 16384
    head_dim: int | None = None  # None: hidden / heads
    experts: int = 0  # a mixture of experts in each layer's MLP (synthetic_moe.py), of expert_ffn each
    top_k: int = 0
    expert_ffn: int = 0


# The layer shapes of the models' config.json files.
SHAPES = {
    "llama-3.2-1b": Shape("llama", 16, 2048, 32, 8, 8192, 128256, 500000.0),
    "llama-3.2-3b": Shape("llama", 28, 3072, 24, 8, 8192, 128256, 500000.0),
    "qwen2.5-0.5b": Shape("qwen2", 24, 896, 14, 2, 4864, 151936, 1000000.0, qkv_bias=True),
    # Qwen3-30B-A3B's layers (4 of its 48): 128 experts, 8 a token; written in Q8_0 by synthetic_moe.py
    "qwen3-30b-a3b-4l": Shape(
        "qwen3moe", 4, 2048, 32, 4, 6144, 151936, 1000000.0, head_dim=128, experts=128, top_k=8, expert_ffn=768
    ),
}
# llama.cpp's file types (llama_ftype) for the formats a user's file most often has.
FORMATS = {"Q4_K_M": 15, "Q4_0": 2, "Q8_0": 7}


def is_synthetic(model: str | None) -> bool:
    return bool(model) and model.startswith(PREFIX)


def parse(model: str) -> tuple[str, str]:
    """'synthetic:SHAPE:FORMAT' -> (shape, format), with the choices named when either is unknown."""
    parts = model[len(PREFIX) :].split(":")
    if len(parts) != 2 or parts[0] not in SHAPES or parts[1] not in FORMATS:
        raise TinyLLMError(
            f"model {model!r}: expected synthetic:SHAPE:FORMAT with SHAPE one of {', '.join(SHAPES)} and FORMAT one "
            f"of {', '.join(FORMATS)}"
        )
    return parts[0], parts[1]


def cache_dir() -> str:
    return os.environ.get("TINYLLM_SYNTHETIC_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tinyllm", "synthetic"
    )


def synthetic_path(model: str, threads: int | None = None) -> str:
    """The quantized file for 'synthetic:SHAPE:FORMAT', built on first use."""
    name, fmt = parse(model)
    folder = cache_dir()
    path = os.path.join(folder, f"{name}-{fmt}.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    if SHAPES[name].experts:
        return _experts_file(SHAPES[name], fmt, path)
    source = os.path.join(folder, f"{name}-F16.gguf")
    if not os.path.exists(source):
        print(f"writing {source} (random weights with {name}'s shapes)", flush=True)
        write_f16(SHAPES[name], source + ".part")
        os.replace(source + ".part", source)
    print(f"quantizing it to {fmt} with llama.cpp's quantizer", flush=True)
    quantize(source, path + ".part", FORMATS[fmt], threads or os.cpu_count() or 1)
    os.replace(path + ".part", path)
    return path


def _experts_file(shape: Shape, fmt: str, path: str) -> str:
    from .synthetic_moe import write_q8_0

    if fmt != "Q8_0":
        raise TinyLLMError(f"a synthetic mixture of experts is written in Q8_0 only, got {fmt}")
    print(f"writing {path} (random Q8_0 weights with the shape's layers)", flush=True)
    write_q8_0(shape, path + ".part", vocabulary(shape.vocab))
    os.replace(path + ".part", path)
    return path


def quantize(source: str, dest: str, ftype: int, threads: int) -> None:
    try:
        import llama_cpp
    except ImportError:
        raise TinyLLMError(
            "synthetic models are quantized by llama.cpp's quantizer, and llama-cpp-python is not installed: "
            "pip install -e '.[bench]'"
        ) from None
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(source.encode(), dest.encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({source!r} -> {dest!r}) returned {status}")


def write_f16(shape: Shape, path: str, seed: int = 0) -> None:
    """A float16 GGUF with the shape's tensors: normal weights (std 0.02), norms of ones."""
    import gguf

    rng = np.random.default_rng(seed)
    arch = shape.architecture
    head_dim = shape.hidden // shape.heads
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"synthetic {arch} {shape.layers}x{shape.hidden}")
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(1)  # MOSTLY_F16
    add_vocabulary(w, vocabulary(shape.vocab))

    def normal(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    kv = shape.kv_heads * head_dim
    w.add_tensor("token_embd.weight", normal(shape.vocab, shape.hidden))
    for i in range(shape.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(shape.hidden))
        w.add_tensor(b + "attn_q.weight", normal(shape.hidden, shape.hidden))
        w.add_tensor(b + "attn_k.weight", normal(kv, shape.hidden))
        w.add_tensor(b + "attn_v.weight", normal(kv, shape.hidden))
        if shape.qkv_bias:
            for name, n in (("attn_q", shape.hidden), ("attn_k", kv), ("attn_v", kv)):
                w.add_tensor(b + name + ".bias", (rng.standard_normal(n, dtype=np.float32) * 0.02))
        w.add_tensor(b + "attn_output.weight", normal(shape.hidden, shape.hidden))
        w.add_tensor(b + "ffn_norm.weight", ones(shape.hidden))
        w.add_tensor(b + "ffn_gate.weight", normal(shape.ffn, shape.hidden))
        w.add_tensor(b + "ffn_up.weight", normal(shape.ffn, shape.hidden))
        w.add_tensor(b + "ffn_down.weight", normal(shape.hidden, shape.ffn))
    w.add_tensor("output_norm.weight", ones(shape.hidden))
    if not shape.tied:
        w.add_tensor("output.weight", normal(shape.vocab, shape.hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
