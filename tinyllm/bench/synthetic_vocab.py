"""The tokenizer of a synthetic GGUF file: the default model's vocabulary padded to a shape's size, and the writer
keys that carry it."""

from __future__ import annotations


def vocabulary(size: int):
    """The default model's tokens, merges and token types, padded with control tokens to `size` entries."""
    from gguf import GGUFReader

    from ..loading.default_model import default_model_path

    fields = GGUFReader(default_model_path()).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = fields["tokenizer.ggml.merges"].contents()
    extra = size - len(tokens)
    tokens = tokens + [f"<|reserved_{i}|>" for i in range(extra)]
    types = types + [3] * extra  # CONTROL
    template = fields["tokenizer.chat_template"].contents()
    return tokens, types, merges, template


def add_vocabulary(w, vocab) -> None:
    """A GGUF writer's tokenizer keys for `vocabulary`'s (tokens, types, merges, template)."""
    tokens, types, merges, template = vocab
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(template)
