"""Name tables: GGUF and Hugging Face names mapped to our config fields and parameters (data, not code)."""

# Which architectures load, and what sets each one apart, is model/family.py's FAMILIES.

# ModelConfig field -> GGUF metadata key, with "{arch}" standing for general.architecture.
GGUF_CONFIG_KEYS = {
    "hidden_size": "{arch}.embedding_length",
    "intermediate_size": "{arch}.feed_forward_length",
    "num_layers": "{arch}.block_count",
    "num_heads": "{arch}.attention.head_count",
    "num_kv_heads": "{arch}.attention.head_count_kv",
    "head_dim": "{arch}.attention.key_length",
    "max_position_embeddings": "{arch}.context_length",
    "rope_theta": "{arch}.rope.freq_base",
    "rope_dim": "{arch}.rope.dimension_count",
    "rms_norm_eps": "{arch}.attention.layer_norm_rms_epsilon",
    "vocab_size": "{arch}.vocab_size",
}

# Optional ModelConfig values -> GGUF metadata key (llama.cpp's names, from gguf.constants.Keys).
GGUF_OPTIONAL_KEYS = {
    "sliding_window": "{arch}.attention.sliding_window",
    "sliding_window_pattern": "{arch}.attention.sliding_window_pattern",
    "attn_softcap": "{arch}.attn_logit_softcapping",
    "final_softcap": "{arch}.final_logit_softcapping",
    "query_scale": "{arch}.attention.scale",
    "local_rope_theta": "{arch}.rope.freq_base_swa",
    "rope_scaling_type": "{arch}.rope.scaling.type",
    "rope_scaling_factor": "{arch}.rope.scaling.factor",
}
# YaRN's RopeScaling fields -> GGUF metadata key (llama.cpp's names).
GGUF_YARN_KEYS = {
    "original_max_position_embeddings": "{arch}.rope.scaling.original_context_length",
    "beta_fast": "{arch}.rope.scaling.yarn_beta_fast",
    "beta_slow": "{arch}.rope.scaling.yarn_beta_slow",
    "attention_factor": "{arch}.rope.scaling.yarn_attn_factor",
}

# ExpertConfig field -> GGUF metadata key (a mixture of experts' MLPs; expert_count present = experts).
GGUF_EXPERT_KEYS = {
    "num_experts": "{arch}.expert_count",
    "top_k": "{arch}.expert_used_count",
    "intermediate_size": "{arch}.expert_feed_forward_length",
    "renormalize": "{arch}.expert_weights_norm",
}
# The router's tensor: a layer without it in a file with experts keeps a dense MLP.
GGUF_ROUTER = "blk.{i}.ffn_gate_inp.weight"

# Tensors that configure rather than weigh: read into the config, never into a parameter.
GGUF_ROPE_FREQS = "rope_freqs.weight"

# GGUF tensor name -> our parameter name; "{i}" is the layer index. A family's table adds to or overrides
# these (Family.gguf_tensors).
GGUF_TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}

# Parameters whose rows GGUF permutes for llama.cpp's interleaved rotary layout, and the config field
# holding the head count they were permuted with.
GGUF_ROPE_PERMUTED = {
    "self_attn.q_proj.weight": "num_heads",
    "self_attn.k_proj.weight": "num_kv_heads",
}

# ModelConfig field -> config.json key (first one present wins).
HF_CONFIG_KEYS = {
    "vocab_size": ("vocab_size",),
    "hidden_size": ("hidden_size",),
    "intermediate_size": ("intermediate_size",),
    "num_layers": ("num_hidden_layers",),
    "num_heads": ("num_attention_heads",),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "max_position_embeddings": ("max_position_embeddings",),
    "rope_theta": ("rope_theta",),
    "rms_norm_eps": ("rms_norm_eps",),
    "tie_word_embeddings": ("tie_word_embeddings",),
    "attn_softcap": ("attn_logit_softcapping",),
    "final_softcap": ("final_logit_softcapping",),
}

# ExpertConfig field -> config.json key (first one present wins).
HF_EXPERT_KEYS = {
    "num_experts": ("num_experts", "num_local_experts"),
    "top_k": ("num_experts_per_tok",),
    "intermediate_size": ("moe_intermediate_size", "intermediate_size"),  # gpt-oss: its experts' width
    "renormalize": ("norm_topk_prob",),
}

# config.json swiglu keys -> ModelConfig fields (the clamped SwiGLU's, gpt-oss).
HF_SWIGLU_KEYS = {"swiglu_limit": "swiglu_limit", "swiglu_alpha": "swiglu_alpha"}
# config.json activation names -> Family.activation.
HF_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
# config.json layer_types values -> our layer kinds.
HF_LAYER_KINDS = {"full_attention": "full", "sliding_attention": "sliding"}

# Our fused parameters -> the parameters (HF names, in row order) whose rows they concatenate.
FUSED_PARAMETERS = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "self_attn.qkv_proj.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    # an expert's (mlp.experts.{e}.): after the dense MLP's row, which its names do not end with
    "gate_up_proj.weight": ("gate_proj.weight", "up_proj.weight"),
    "gate_up_proj.bias": ("gate_proj.bias", "up_proj.bias"),  # an expert's, where they have biases (gpt-oss)
}
