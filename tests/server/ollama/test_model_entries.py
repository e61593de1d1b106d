"""The objects Ollama's clients read about a model (server/ollama/models.py), built without a server: /api/tags and
/api/ps entries with their exact keys, `expires_at`, `size_vram` and `details`; Ollama's size labels and
quantization level; /api/show's Modelfile, parameters, template, model_info and license."""

import dataclasses
import os
from datetime import datetime, timezone

import pytest

from helpers.live_server import tiny_llm
from helpers.model_files import random_tiny_llama, write_gguf
from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server.model_slots import Ready
from tinyllm.server.ollama import models
from tinyllm.server.ollama.models import Listed

INFO = {"format": "gguf", "family": "llama", "parameters": 134515008, "weight_types": {"F32": 30, "Q4_1": 7},
        "weight_bytes": 1234}  # fmt: skip
DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "llama",
    "families": ["llama"],
    "parameter_size": "135M",
    "quantization_level": "Q4_1",
}
STAMP = 1_000_000_000  # 2001-09-09T01:46:40Z


@pytest.mark.parametrize(
    ("n", "label"),
    [(999, "999"), (1000, "1K"), (1500, "1.5K"), (10**6, "1M"), (134515008, "135M"), (10**9, "1B"),
     (7_241_732_096, "7.24B"), (10**12, "1T"), (2 * 10**12, "2T")],
)  # fmt: skip
def test_parameter_size_is_ollamas_label(n, label):
    assert models.parameter_size(n) == label


@pytest.mark.parametrize(
    ("types", "level"),
    [({"F32": 30, "Q4_1": 7}, "Q4_1"), ({"F16": 9, "Q8_0": 1}, "Q8_0"), ({"BF16": 9, "Q4_K": 2, "Q6_K": 3}, "Q6_K"),
     ({"F32": 2, "F16": 5}, "F16"), ({"F32": 5, "BF16": 2}, "F32"), ({}, "F32")],
)  # fmt: skip
def test_quantization_level_is_the_most_common_quantized_type(types, level):
    assert models.quantization_level(types) == level


def test_details_has_ollamas_fields():
    assert models.details(INFO) == DETAILS


def test_modified_at_is_the_files_mtime_in_utc(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"")
    os.utime(path, (STAMP, STAMP))
    assert models.modified_at(str(path)) == "2001-09-09T01:46:40Z"
    for missing in (None, str(tmp_path / "absent")):  # now, for a model built in memory
        stamp = datetime.fromisoformat(models.modified_at(missing).replace("Z", "+00:00"))
        assert stamp.tzinfo == timezone.utc and abs(stamp.timestamp() - datetime.now(timezone.utc).timestamp()) < 60


@pytest.mark.parametrize("digest", [None, "sha256:ab"])
def test_tag_lists_name_time_size_details_and_digest(tmp_path, digest):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"")
    os.utime(path, (STAMP, STAMP))
    entry = models.tag(Listed("m", str(path), INFO, digest))
    expected = {"name": "m", "model": "m", "modified_at": "2001-09-09T01:46:40Z", "size": 1234, "details": DETAILS}
    assert entry == (expected if digest is None else {**expected, "digest": digest})


@pytest.mark.parametrize(("on_gpu", "vram"), [(True, 1234), (False, 0)])
def test_running_entry_has_vram_and_never_expires_when_kept(on_gpu, vram):
    entry = models.running(Listed("m", None, INFO, "sha256:ab"), 2048, on_gpu, None)
    assert entry == {
        "name": "m",
        "model": "m",
        "size": 1234,
        "details": DETAILS,
        "expires_at": "2999-12-31T23:59:59Z",
        "size_vram": vram,
        "context_length": 2048,
        "digest": "sha256:ab",
    }


def test_running_entry_expires_after_the_idle_time():
    entry = models.running(Listed("m", None, INFO, None), 1024, False, 300.0)
    assert "digest" not in entry
    expires = datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00")).timestamp()
    assert entry["expires_at"].endswith("Z") and abs(expires - datetime.now(timezone.utc).timestamp() - 300) < 60


def ready(llm, name="tiny") -> Ready:
    return Ready(llm=llm, engine=None, texts=None, model_name=name, limits=None)


def test_parameters_name_each_stop_text_once_unescaped(smollm_tokenizer):
    [accented] = smollm_tokenizer.encode("é")
    llm = LLM.from_parts(tiny_llama(11, vocab_size=smollm_tokenizer.vocab_size), smollm_tokenizer,
                         eos_ids=[2, accented, 2])  # fmt: skip
    assert models.parameters(ready(llm)) == 'stop "<|im_end|>"\nstop "é"'


def test_modelfile_names_the_model_its_template_stops_and_license(smollm_tokenizer):
    ctx = ready(tiny_llm(smollm_tokenizer))
    template = smollm_tokenizer.chat_template
    assert models.modelfile(ctx, 'stop "a"\nstop "b"', "mit") == (
        f'FROM tiny\nTEMPLATE """{template}"""\nPARAMETER stop "a"\nPARAMETER stop "b"\nLICENSE """mit"""\n'
    )
    assert models.modelfile(ctx, "", None) == f'FROM tiny\nTEMPLATE """{template}"""\n'


def test_show_describes_the_model_from_its_file(tmp_path, smollm_tokenizer):
    path = tmp_path / "tiny.gguf"
    write_gguf(random_tiny_llama(3), str(path))
    os.utime(path, (STAMP, STAMP))
    llm = LLM(str(path))
    info = llm.info()
    ctx = ready(llm)
    shown = models.show(ctx, info, "mit")
    params = models.parameters(ctx)
    assert shown == {
        "modelfile": models.modelfile(ctx, params, "mit"),
        "parameters": params,
        "template": llm.tokenizer.chat_template,
        "details": models.details(info),
        "model_info": {
            "general.architecture": "llama",
            "general.parameter_count": info["parameters"],
            "llama.context_length": info["context_length"],
            "llama.embedding_length": info["hidden_size"],
            "llama.block_count": info["layers"],
            "llama.attention.head_count": info["heads"],
            "llama.attention.head_count_kv": info["kv_heads"],
            "llama.rope.freq_base": info["rope_theta"],
            "llama.vocab_size": info["vocab_size"],
        },
        "capabilities": ["completion", "tools", "embedding"],
        "modified_at": "2001-09-09T01:46:40Z",
        "license": "mit",
    }
    assert shown["modelfile"].endswith('LICENSE """mit"""\n') and params
    assert "license" not in models.show(ctx, info, None) and "license" not in models.show(ctx, info, "")


def test_show_without_a_chat_template_has_an_empty_template(smollm_tokenizer):
    untemplated = dataclasses.replace(smollm_tokenizer, chat_template=None)
    ctx = ready(tiny_llm(untemplated))
    shown = models.show(ctx, tiny_llm(untemplated).info())
    assert shown["template"] == "" and "TEMPLATE" not in shown["modelfile"]
