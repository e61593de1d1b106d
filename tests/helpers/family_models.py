"""Tiny random models of every family, built with transformers' own config classes (quirks switched on:
a window smaller than the test prompts, soft-capping, rope scaling), saved as a Hugging Face folder, and
the same weights written as a GGUF file under llama.cpp's names and metadata keys for the architecture."""

from __future__ import annotations

import os

import numpy as np
import torch

from helpers.model_files import CHAT_TEMPLATE, SPECIALS, byte_level_vocab, tiny_tokenizer_json, tiny_vocab_size
from helpers.spm_vocab import write_spm_tokenizer

WINDOW = 5  # positions a sliding layer sees; test prompts are longer
COMMON = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def _configs() -> dict:
    import transformers as tf

    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    llama3 |= {"original_max_position_embeddings": 64, "rope_theta": 500000.0}
    gemma3_rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
    }
    return {
        "llama": lambda: tf.LlamaConfig(**COMMON, head_dim=16, rope_parameters=llama3, tie_word_embeddings=True),
        "qwen2": lambda: tf.Qwen2Config(**COMMON, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        "qwen3": lambda: tf.Qwen3Config(**COMMON, head_dim=24, tie_word_embeddings=True),
        "mistral": lambda: tf.MistralConfig(**COMMON, head_dim=16, sliding_window=WINDOW),
        "gemma2": lambda: tf.Gemma2Config(
            **COMMON,
            head_dim=16,
            sliding_window=WINDOW,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=4.0,
        ),
        "gemma3": lambda: tf.Gemma3TextConfig(
            **COMMON,
            head_dim=16,
            sliding_window=WINDOW,
            query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters=gemma3_rope,
        ),
        "phi3": lambda: tf.Phi3Config(**COMMON, sliding_window=WINDOW, tie_word_embeddings=False),
        "qwen3_moe": lambda: tf.Qwen3MoeConfig(**COMMON, head_dim=16, **MOE),
        "gpt_oss": lambda: tf.GptOssConfig(**GPT_OSS),
    }


# A tiny mixture of experts: 4 experts of width 32, the top 2 per token, their weights renormalised.
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
# gpt-oss: 2 layers (sliding, full) with a window of 4, 4 experts of width 32, the top 2 per token; YaRN over an
# original context of 32 positions, so the ramp spans the rotary dims of a 16-wide head
YARN = dict(rope_type="yarn", factor=8.0, beta_fast=32.0, beta_slow=1.0, truncate=False, rope_theta=150000.0)
GPT_OSS = dict(COMMON, num_hidden_layers=2, head_dim=16, sliding_window=4, intermediate_size=32)
GPT_OSS |= dict(
    num_local_experts=4, num_experts_per_tok=2, rope_parameters=dict(YARN, original_max_position_embeddings=32)
)
FAMILY_NAMES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "qwen3_moe", "gpt_oss")


def hf_model(family: str, seed: int = 0, vocab_size: int | None = None, **overrides):
    """A transformers model of the family with random weights spread wide enough that a wrong mask, scale
    or norm changes the logits; vocab_size defaults to the tiny byte-level vocabulary's; overrides: config
    attributes set on the family's config."""
    from transformers import AutoModelForCausalLM

    config = _configs()[family]()
    for key, value in overrides.items():
        setattr(config, key, value)
    config.vocab_size = vocab_size or tiny_vocab_size()
    config._attn_implementation = "eager"  # the plain reference, soft-capping included
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # matrices, and stacks of experts' matrices
                p.normal_(0.0, 0.3 if "embed" in name else 0.15)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.2)
            else:  # norms: Gemma stores the scale minus one
                p.uniform_(-0.2, 0.2) if gemma else p.uniform_(0.8, 1.2)
    return model.eval()


def write_hf(model, folder: str) -> str:
    model.save_pretrained(folder)
    tiny_tokenizer_json(folder)
    return folder


# HF parameter suffix -> gguf MODEL_TENSOR member name; sandwich-norm families rename the post-attention norm.
_TENSORS = {
    "model.embed_tokens.weight": "TOKEN_EMBD",
    "model.norm.weight": "OUTPUT_NORM",
    "lm_head.weight": "OUTPUT",
    "input_layernorm.weight": "ATTN_NORM",
    "self_attn.q_proj": "ATTN_Q",
    "self_attn.k_proj": "ATTN_K",
    "self_attn.v_proj": "ATTN_V",
    "self_attn.qkv_proj": "ATTN_QKV",
    "self_attn.o_proj": "ATTN_OUT",
    "self_attn.q_norm.weight": "ATTN_Q_NORM",
    "self_attn.k_norm.weight": "ATTN_K_NORM",
    "post_attention_layernorm.weight": "FFN_NORM",
    "pre_feedforward_layernorm.weight": "FFN_PRE_NORM",
    "post_feedforward_layernorm.weight": "FFN_POST_NORM",
    "mlp.gate_proj": "FFN_GATE",
    "mlp.up_proj": "FFN_UP",
    "mlp.gate_up_proj": "FFN_UP",
    "mlp.down_proj": "FFN_DOWN",
    "mlp.gate": "FFN_GATE_INP",
    "mlp.router": "FFN_GATE_INP",
    "self_attn.sinks": "ATTN_SINKS",
    "mlp.experts.gate_proj": "FFN_GATE_EXP",
    "mlp.experts.up_proj": "FFN_UP_EXP",
    "mlp.experts.down_proj": "FFN_DOWN_EXP",
}
_ARCH = {"llama": "LLAMA", "mistral": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3"}
_ARCH |= {"gemma2": "GEMMA2", "gemma3": "GEMMA3", "phi3": "PHI3", "qwen3_moe": "QWEN3MOE", "gpt_oss": "GPT_OSS"}


def _gguf_name(gguf, arch, name: str, post_norm: bool) -> str:
    """llama.cpp's name for an HF parameter, checked against the architecture's tensor list (post_norm: the
    architecture calls post_attention_layernorm ATTN_POST_NORM)."""
    layer, rest = None, name
    if name.startswith("model.layers."):
        _, _, layer, rest = name.split(".", 3)
    if post_norm and rest == "post_attention_layernorm.weight":
        kind = "ATTN_POST_NORM"
    else:
        key = next(k for k in _TENSORS if rest == k or rest.rsplit(".", 1)[0] == k)
        kind = _TENSORS[key]
    tensor = gguf.MODEL_TENSOR[kind]
    assert tensor in gguf.MODEL_TENSORS[arch], f"{kind} is not a tensor of {arch.name}"
    base = gguf.TENSOR_NAMES[tensor].format(bid=layer)
    return f"{base}.{rest.rsplit('.', 1)[1]}"


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order for its interleaved rotation (llama architecture only)."""
    rows, cols = w.shape[0], (w.shape[1] if w.ndim == 2 else 1)
    out = w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)
    return out if w.ndim == 2 else out.reshape(rows)


def _metadata(w, model, family: str, arch_name: str) -> None:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    params = c.rope_parameters.get("full_attention", c.rope_parameters)
    w.add_rope_freq_base(params["rope_theta"])
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    if getattr(c, "sliding_window", None):
        w.add_sliding_window(c.sliding_window)
    if family == "gemma3":  # llama.cpp's default period is 6; this model has 3 layers
        w.add_uint32(f"{arch_name}.attention.sliding_window_pattern", 3)
    if getattr(c, "query_pre_attn_scalar", None):
        w.add_float32(f"{arch_name}.attention.scale", c.query_pre_attn_scalar**-0.5)
    if getattr(c, "attn_logit_softcapping", None):
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
    if getattr(c, "final_logit_softcapping", None):
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    if params.get("rope_type") == "linear":
        w.add_string(f"{arch_name}.rope.scaling.type", "linear")
        w.add_float32(f"{arch_name}.rope.scaling.factor", params["factor"])
    if params.get("rope_type") == "yarn":
        w.add_string(f"{arch_name}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch_name}.rope.scaling.factor", params["factor"])
        w.add_uint32(f"{arch_name}.rope.scaling.original_context_length", params["original_max_position_embeddings"])
        w.add_float32(f"{arch_name}.rope.scaling.yarn_beta_fast", params["beta_fast"])
        w.add_float32(f"{arch_name}.rope.scaling.yarn_beta_slow", params["beta_slow"])
    if getattr(c, "num_experts", None):
        w.add_expert_count(c.num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(getattr(c, "moe_intermediate_size", c.intermediate_size))
        if hasattr(c, "norm_topk_prob"):
            w.add_expert_weights_norm(c.norm_topk_prob)


# The byte-level BPE pre-tokenizer llama.cpp names for each family's GGUF files (the SentencePiece families
# get byte-level BPE too unless write_family_gguf is given a SentencePiece model).
PRE_TOKENIZERS = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2", "qwen3_moe": "qwen2"}


def _tokenizer(w, family: str) -> None:
    tokens, merges = byte_level_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE_TOKENIZERS.get(family, "gpt2"))
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)


def _rope_freqs(model) -> np.ndarray:
    """llama.cpp's rope_freqs tensor: each frequency's divisor, unscaled over scaled."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    base = 1.0 / (c.rope_parameters["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    scaled = model.model.rotary_emb.inv_freq.double().numpy()
    return (base / scaled).astype(np.float32)


def _gpt_oss_arrays(name: str, a: np.ndarray):
    """gpt-oss's stacks in llama.cpp's layout: gate_up_proj [E, C, 2I] (gate and up alternating) -> gate and up
    [E, I, C]; down_proj [E, I, C] -> [E, C, I]; biases split alike; sinks named as a weight."""
    if name.endswith("gate_up_proj"):
        yield name.replace("gate_up_proj", "gate_proj.weight"), np.ascontiguousarray(a[..., ::2].swapaxes(1, 2))
        yield name.replace("gate_up_proj", "up_proj.weight"), np.ascontiguousarray(a[..., 1::2].swapaxes(1, 2))
    elif name.endswith("gate_up_proj_bias"):
        yield name.replace("gate_up_proj_bias", "gate_proj.bias"), np.ascontiguousarray(a[..., ::2])
        yield name.replace("gate_up_proj_bias", "up_proj.bias"), np.ascontiguousarray(a[..., 1::2])
    elif name.endswith("experts.down_proj"):
        yield name + ".weight", np.ascontiguousarray(a.swapaxes(1, 2))
    elif name.endswith("down_proj_bias"):
        yield name.replace("down_proj_bias", "down_proj.bias"), a
    else:
        yield name + (".weight" if name.endswith("sinks") else ""), a


def _arrays(model, family: str):
    """(name, float32 array) of every parameter, a stack of experts' gate_up_proj [E, 2I, C] split into its
    gate and up stacks [E, I, C] as llama.cpp stores them."""
    for name, t in model.state_dict().items():
        a = t.detach().float().numpy().copy()
        if family == "gpt_oss":
            yield from _gpt_oss_arrays(name, a)
        elif name.endswith("mlp.experts.gate_up_proj"):
            gate, up = np.split(a, 2, axis=1)
            yield name.replace("gate_up_proj", "gate_proj.weight"), gate
            yield name.replace("gate_up_proj", "up_proj.weight"), up
        elif name.endswith("mlp.experts.down_proj"):
            yield name + ".weight", a
        else:
            yield name, a


def write_family_gguf(model, family: str, path: str, quant: str | None = None, spm=None) -> str:
    """quant: a block format ("Q8_0") for the matrices whose rows it divides; norms and biases (stacks of
    experts' biases too) stay F32.
    spm: a SentencePieceProcessor whose vocabulary the file carries (padded to the model's) instead of
    the tiny byte-level one."""
    import gguf
    from gguf.quants import quantize

    arch = gguf.MODEL_ARCH[_ARCH[family]]
    arch_name = gguf.MODEL_ARCH_NAMES[arch]
    w = gguf.GGUFWriter(path, arch_name)
    _metadata(w, model, family, arch_name)
    if spm is None:
        _tokenizer(w, family)
    else:
        write_spm_tokenizer(w, spm, model.config.vocab_size)
    c = model.config
    sandwich = family.startswith("gemma")
    for name, a in _arrays(model, family):
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if family in ("llama", "mistral") and (".q_proj." in name or ".k_proj." in name):
            a = _permute(a, c.num_attention_heads if ".q_proj." in name else c.num_key_value_heads)
        if sandwich and name.endswith("norm.weight"):
            a = a + np.float32(1.0)  # llama.cpp stores Gemma's norm scales whole
        gname = _gguf_name(gguf, arch, name, sandwich or family == "gpt_oss")
        if quant and a.ndim >= 2 and a.shape[-1] % 32 == 0 and not name.endswith("bias"):  # [E, N] bias stacks
            qtype = gguf.GGMLQuantizationType[quant]
            w.add_tensor(gname, quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gname, a)
    if c.rope_parameters.get("rope_type") == "llama3":
        w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", _rope_freqs(model))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def family_files(family: str, root: str, seed: int = 0):
    """(transformers model, HF folder, GGUF path) for one family."""
    model = hf_model(family, seed)
    folder = write_hf(model, os.path.join(root, family))
    return model, folder, write_family_gguf(model, family, os.path.join(root, f"{family}.gguf"))
