"""A family or option we do not support is refused with one sentence naming it (exit code 2 in the CLI),
never loaded as a silently different model."""

import json
import os
import subprocess
import sys

import pytest

from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm import LLM, TinyLLMError


def edited_folder(tmp_path, **changes) -> str:
    folder = write_hf_folder(random_tiny_llama(3), str(tmp_path / "hf"))
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)
    return folder


def cli_info(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tinyllm", "info", "--model", path], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"model_type": "gpt_neox"}, "model_type 'gpt_neox' is not supported"),
        ({"model_type": "gemma3"}, "model_type 'gemma3' is not supported"),  # the multimodal wrapper
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}, "rope scaling of type 'dynamic' is not supported"),
        (
            {"model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}},
            "rope scaling of type 'longrope' is not supported",
        ),
        ({"mlp_bias": True}, "mlp_bias is not supported"),
        ({"quantization_config": {"quant_method": "mxfp4"}}, "weights quantized as 'mxfp4' are not supported"),
        ({"model_type": "qwen2", "hidden_act": "relu"}, "hidden activation 'relu' is not supported for qwen2"),
        ({"layer_types": ["chunked_attention"] * 3}, "layer type 'chunked_attention' is not supported"),
    ],
)
def test_unsupported_hf_configs_are_named(tmp_path, changes, named):
    folder = edited_folder(tmp_path, **changes)
    with pytest.raises(TinyLLMError, match=named.replace("(", r"\(")):
        LLM(folder)


@pytest.mark.slow
def test_cli_refuses_an_unknown_model_type_in_one_line(tmp_path):
    r = cli_info(edited_folder(tmp_path, model_type="gpt_neox"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "model_type 'gpt_neox' is not supported" in r.stderr


def _gguf(tmp_path, arch: str) -> str:
    import gguf
    import numpy as np

    path = str(tmp_path / f"{arch}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.slow
def test_cli_refuses_an_unknown_gguf_architecture_in_one_line(tmp_path):
    r = cli_info(_gguf(tmp_path, "mamba"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "GGUF architecture 'mamba' is not supported" in r.stderr


def test_gguf_with_an_unsupported_rope_scaling_is_named(tmp_path):
    import gguf

    path = str(tmp_path / "plain.gguf")
    model = random_tiny_llama(4)
    write_gguf(model, path)
    reader = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(str(tmp_path / "longrope.gguf"), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        w.add_key_value(field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    w.add_string("llama.rope.scaling.type", "longrope")
    for t in reader.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TinyLLMError, match="rope scaling of type 'longrope' is not supported"):
        LLM(str(tmp_path / "longrope.gguf"))


def _copy_gguf(source: str, dest: str, arch: str | None = None, uint32: dict | None = None) -> str:
    """source's metadata (its architecture's keys renamed to `arch`, `uint32` keys added) and tensors, in dest."""
    import gguf

    reader = gguf.GGUFReader(source)
    old = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dest, arch or old)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        name = (
            f"{arch}.{field.name.removeprefix(old + '.')}" if arch and field.name.startswith(old + ".") else field.name
        )
        w.add_key_value(name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for key, value in (uint32 or {}).items():
        w.add_uint32(key, value)
    for t in reader.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def test_a_llama_gguf_with_experts_is_refused_naming_the_key(tmp_path):
    """llama.cpp writes Mixtral as architecture llama with expert_count: never loaded as a dense llama."""
    write_gguf(random_tiny_llama(4), str(tmp_path / "llama.gguf"))
    path = _copy_gguf(str(tmp_path / "llama.gguf"), str(tmp_path / "mixtral.gguf"), uint32={"llama.expert_count": 8})
    with pytest.raises(TinyLLMError, match=r"mixture of experts \(llama.expert_count = 8\).*architecture 'llama'"):
        LLM(path)


def test_a_qwen3moe_gguf_without_its_expert_keys_is_named(tmp_path):
    write_gguf(random_tiny_llama(4), str(tmp_path / "llama.gguf"))
    uint32 = {"qwen3moe.expert_count": 4, "qwen3moe.expert_feed_forward_length": 32}
    path = _copy_gguf(str(tmp_path / "llama.gguf"), str(tmp_path / "cut.gguf"), "qwen3moe", uint32)
    with pytest.raises(TinyLLMError, match="has experts but lacks metadata qwen3moe.expert_used_count"):
        LLM(path)
