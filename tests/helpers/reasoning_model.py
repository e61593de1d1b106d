"""A tiny reasoning model: the byte-level test vocabulary with Qwen3's `<think>` / `</think>` as added tokens, a
cut-down copy of Qwen3's chat template (its enable_thinking switch, its handling of an assistant's earlier
reasoning), and a scripted model whose greedy reply is a given text, so the think span is written on cue."""

from __future__ import annotations

import json
import os

from helpers.model_files import CHAT_TEMPLATE, SPECIALS, byte_level_vocab  # noqa: F401 (CHAT_TEMPLATE: a plain one)
from helpers.tiny_models import ScriptedModel

MARKERS = ["<think>", "</think>"]
# Qwen3's structure: an assistant turn's reasoning comes from reasoning_content or from a think span in its content
# and is dropped from turns before the last user message; the generation prompt closes an empty span when
# enable_thinking is false.
QWEN3_TEMPLATE = (
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- set content = m.content or '' %}{%- set reasoning = m.reasoning_content or '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last_query and reasoning %}"
    "{{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' }}{%- endif %}"
    "{{- content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def write_reasoning_tokenizer(folder: str, template: str = QWEN3_TEMPLATE) -> None:
    """tokenizer.json and tokenizer_config.json of the byte-level test vocabulary plus the two markers."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens, merges = byte_level_vocab()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split()) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])  # as Qwen3's: not special
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {"chat_template": template, "bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)


class ScriptedChatModel(ScriptedModel):
    """ScriptedModel as LLM.from_parts takes a model (with its device and dtype), and sure of its script at any
    temperature up to 1 (a logit 100 above the rest), so clients' default sampling follows it."""

    def forward(self, ids, step=None):
        return super().forward(ids, step) * 10.0

    @property
    def device(self):
        return self.anchor.device

    @property
    def dtype(self):
        return self.anchor.dtype


def scripted_llm(tokenizer, messages: list[dict], reply: str, variables: dict | None = None):
    """An LLM whose greedy reply to `messages` (rendered with `variables`) is `reply`, then end of turn."""
    from tinyllm import LLM

    prompt = tokenizer.encode_chat(messages, True, None, variables).ids
    script = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_id]
    model = ScriptedChatModel(script, len(prompt), vocab_size=tokenizer.vocab_size, max_len=512)
    return LLM.from_parts(model, tokenizer)


CHAT = [{"role": "user", "content": "2+2?"}]
REPLY = "<think>\nI add two and two.\n</think>\n\nIt is 4."


def thinking_llm(tmp_path_factory, reply: str = REPLY):
    """The scripted Qwen3-style model that answers CHAT with `reply` (thinking, then the answer)."""
    from tinyllm.text.tokenizer import Tokenizer

    folder = tmp_path_factory.mktemp("qwen3-tok")
    write_reasoning_tokenizer(str(folder))
    return scripted_llm(Tokenizer.from_hf_folder(folder), CHAT, reply)
