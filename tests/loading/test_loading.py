"""Loading: a tiny random Llama written as a HF folder and as GGUF files loads with the same logits."""

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from helpers.model_files import hf_state_dict, random_tiny_llama, write_gguf, write_hf_folder
from tinyllm import LLM, TinyLLMError
from tinyllm.loading.fusion import fuse
from tinyllm.loading.loader import load

IDS = torch.tensor([[5, 80, 200, 7, 33, 150, 9, 260, 1, 44]])


def logits_of(model):
    with torch.no_grad():
        return model(IDS)


@pytest.mark.parametrize("tied", [False, True])
def test_hf_folder_and_gguf_give_the_same_logits(tmp_path, tied):
    model = random_tiny_llama(1, tie_word_embeddings=tied)
    expected = logits_of(model)
    hf = load(write_hf_folder(model, str(tmp_path / "hf")))
    write_gguf(model, str(tmp_path / "m.gguf"))
    gg = load(str(tmp_path / "m.gguf"))
    for field in (
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "max_position_embeddings",
        "rope_theta",
        "tie_word_embeddings",
        "rotary_dim",
    ):
        assert getattr(hf.config, field) == getattr(gg.config, field), field
    assert torch.allclose(logits_of(hf.model), expected, atol=1e-5, rtol=0)
    assert torch.allclose(logits_of(gg.model), expected, atol=1e-5, rtol=0)
    assert gg.config.tie_word_embeddings == tied
    assert hf.tokenizer.encode("the tin") == gg.tokenizer.encode("the tin")


QUANT_MODEL = dict(hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64)


@pytest.mark.parametrize(
    "kind", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4"]
)
def test_quantized_gguf_loads_as_its_dequantized_weights(tmp_path, kind):
    model = random_tiny_llama(2, **QUANT_MODEL)
    stored = write_gguf(model, str(tmp_path / "q.gguf"), quant_types={"weight": kind} if kind else None)
    loaded = load(str(tmp_path / "q.gguf"), weights="dequantized")
    assert loaded.weight_types.get(kind, 0) >= 7 * model.config.num_layers
    reference = random_tiny_llama(2, **QUANT_MODEL)
    reference.load_state_dict(fuse(stored), strict=False)
    assert torch.allclose(logits_of(loaded.model), logits_of(reference), atol=1e-4, rtol=0)
    if kind not in ("F16", "BF16"):  # the quantization really changed the weights
        assert (logits_of(loaded.model) - logits_of(model)).abs().max() > 1e-4


def test_sharded_safetensors(tmp_path):
    model = random_tiny_llama(3)
    folder = write_hf_folder(model, str(tmp_path / "hf"))
    state = {k: v.contiguous() for k, v in hf_state_dict(model).items()}
    names = sorted(state)
    half = len(names) // 2
    os.remove(os.path.join(folder, "model.safetensors"))
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        shard = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: state[n] for n in part}, os.path.join(folder, shard))
        weight_map.update(dict.fromkeys(part, shard))
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    assert torch.allclose(logits_of(load(folder).model), logits_of(model), atol=1e-5, rtol=0)


def test_generation_config_eos_ids_are_used(tmp_path):
    folder = write_hf_folder(random_tiny_llama(4), str(tmp_path / "hf"))
    assert {0, 2} <= set(load(folder).eos_ids)


def test_bad_paths_and_files(tmp_path):
    with pytest.raises(TinyLLMError, match="does not exist"):
        LLM(str(tmp_path / "missing.gguf"))
    text = tmp_path / "notes.gguf"
    text.write_text("hello, not a model")
    with pytest.raises(TinyLLMError, match="not a GGUF file"):
        LLM(str(text))
    good = tmp_path / "m.gguf"
    write_gguf(random_tiny_llama(5), str(good))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(TinyLLMError, match="cut short"):
        LLM(str(cut))


def test_unsupported_architecture_and_types(tmp_path):
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(tmp_path / "f.gguf"), "falcon")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TinyLLMError, match="architecture 'falcon'"):
        LLM(str(tmp_path / "f.gguf"))


def test_hf_folder_missing_parts(tmp_path):
    folder = write_hf_folder(random_tiny_llama(6), str(tmp_path / "hf"))
    os.remove(os.path.join(folder, "model.safetensors"))
    with pytest.raises(TinyLLMError, match="no model.safetensors"):
        LLM(folder)
    os.remove(os.path.join(folder, "config.json"))
    with pytest.raises(TinyLLMError, match="no config.json"):
        LLM(folder)
    bad = write_hf_folder(random_tiny_llama(6), str(tmp_path / "hf2"))
    cfg = json.load(open(os.path.join(bad, "config.json")))
    cfg["model_type"] = "gpt_neox"
    json.dump(cfg, open(os.path.join(bad, "config.json"), "w"))
    with pytest.raises(TinyLLMError, match="gpt_neox"):
        LLM(bad)


def test_wrong_shapes_are_rejected(tmp_path):
    model = random_tiny_llama(7)
    state = hf_state_dict(model)
    state["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    folder = write_hf_folder(model, str(tmp_path / "hf"), state=state)
    with pytest.raises(TinyLLMError, match="up_proj"):
        LLM(folder)


def test_unsupported_tensor_type(tmp_path):
    import numpy as np

    model = random_tiny_llama(8)
    path = str(tmp_path / "f64.gguf")
    write_gguf(model, path)
    import gguf

    g = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), "llama")
    for field in g.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        w.add_key_value(
            field.name, field.contents(), field.types[0], sub_type=field.types[-1] if len(field.types) > 1 else None
        )
    for t in g.tensors:
        data = np.asarray(t.data, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])
        w.add_tensor(t.name, data.astype(np.float64) if t.name == "output_norm.weight" else data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TinyLLMError, match="type F64"):
        LLM(str(tmp_path / "odd.gguf"))


def test_a_split_gguf_part_given_by_path_is_refused_by_its_header(tmp_path):
    import gguf

    path = tmp_path / "m-00001-of-00002.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint16("split.no", 0)
    w.add_uint16("split.count", 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TinyLLMError, match="is part 1 of a GGUF split into 2 files, which tinyllm cannot load"):
        load(str(path))
