"""Write tiny random Llama models to disk, as a Hugging Face folder and as GGUF files."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

from helpers.tiny_models import tiny_llama
from tinyllm.loading.fusion import split

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_vocab() -> tuple[list[str], list[str]]:
    """Specials, the 256 byte-level symbols, and a few merges (tokens and merges lists, GGUF style)."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet())
    merges = ["Ġ t", "h e", "Ġt he", "i n", "e r"]
    merged = [m.replace(" ", "") for m in merges]
    return SPECIALS + alphabet + merged, merges


def tiny_tokenizer_json(folder: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens, merges = byte_level_vocab()
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "chat_template": CHAT_TEMPLATE,
                "bos_token": "<|im_start|>",
                "eos_token": "<|im_end|>",
                "add_bos_token": False,
            },
            f,
        )


def tiny_vocab_size() -> int:
    return len(byte_level_vocab()[0])


def random_tiny_llama(seed=0, **overrides):
    return tiny_llama(seed, vocab_size=tiny_vocab_size(), **overrides)


def hf_state_dict(model) -> dict[str, torch.Tensor]:
    """The model's float weights under Hugging Face names (fused projections split back)."""
    return split(model.state_dict(), model.config)


def write_hf_folder(model, folder: str, state: dict | None = None) -> str:
    os.makedirs(folder, exist_ok=True)
    c = model.config
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "max_position_embeddings": c.max_position_embeddings,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [2, 0]}, f)
    state = dict(state or hf_state_dict(model))
    if c.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"))
    tiny_tokenizer_json(folder)
    return folder


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name: str) -> str:
    if name.startswith("model.layers."):
        _, _, i, rest = name.split(".", 3)
        return f"blk.{i}.{GGUF_NAMES[rest]}"
    return GGUF_NAMES[name]


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The row order llama.cpp's converter stores Q and K in (the GGUF format's convention)."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def write_gguf(
    model, path: str, quant_types: dict[str, str] | None = None, pre: str = "gpt2"
) -> dict[str, torch.Tensor]:
    """Write `model` to a GGUF file; tensors whose GGUF name matches a key suffix of quant_types are stored
    in that type. Returns the state dict as the file stores it after dequantization (our names/layout).
    `pre` names the pre-tokenizer (llama.cpp knows GPT-2's as "gpt-2" only)."""
    import gguf
    from gguf.quants import dequantize, quantize

    c = model.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(c.num_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_rope_dimension_count(c.head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    tokens, merges = byte_level_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    stored = {}
    for name, t in hf_state_dict(model).items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.detach().float().numpy()
        heads = {"self_attn.q_proj.weight": c.num_heads, "self_attn.k_proj.weight": c.num_kv_heads}
        perm = next((h for suffix, h in heads.items() if name.endswith(suffix)), None)
        if perm:
            a = llama_cpp_permute(a, perm)
        gname = gguf_name(name)
        kind = next((k for s, k in (quant_types or {}).items() if gname.endswith(s) and a.ndim == 2), "F32")
        qtype = gguf.GGMLQuantizationType[kind]
        data = a if kind == "F32" else quantize(a, qtype) if kind in QUANTIZABLE else random_k_blocks(a, kind)
        w.add_tensor(gname, data, raw_dtype=None if kind == "F32" else qtype)
        back = a if kind == "F32" else dequantize(data, qtype).reshape(a.shape)
        if perm:  # undo llama.cpp's permutation to get our layout
            rows, cols = back.shape
            back = back.reshape(perm, rows // perm // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
        stored[name] = torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


QUANTIZABLE = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4")
# K-quant block sizes in bytes (256 weights each) and the byte offsets of their float16 scales.
K_BLOCKS = {
    "Q2_K": (84, (80, 82)),
    "Q3_K": (110, (108,)),
    "Q4_K": (144, (0, 2)),
    "Q5_K": (176, (0, 2)),
    "Q6_K": (210, (208,)),
}


def random_k_blocks(a: np.ndarray, kind: str) -> np.ndarray:
    """Random but valid K-quant blocks for a weight of a's shape (the gguf library cannot quantize these)."""
    size, scale_offsets = K_BLOCKS[kind]
    rows, cols = a.shape
    assert cols % 256 == 0, "K-quants need rows that are a multiple of 256"
    rng = np.random.default_rng(rows * cols)
    blocks = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    for off in scale_offsets:
        blocks[:, :, off : off + 2] = scale
    return blocks.reshape(rows, cols // 256 * size)
