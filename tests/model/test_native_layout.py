"""The native step's structs, declared once (model/native/step_fields.py): the compiler lays them out as their
ctypes mirror does, field by field; a layer may leave a nullable field out and the C++ skips it; a changed
table rebuilds the library."""

from dataclasses import replace

import pytest
import torch
from test_native_lowering import scattered_step, variant
from torch import nn

from tinyllm.cache.paged_cache import PagedStorage
from tinyllm.engine.runner import execute
from tinyllm.kernels import build
from tinyllm.model.native import step_fields
from tinyllm.model.native.library import compiled_layout, library
from tinyllm.model.native.lowering import build_stack, decode_logits
from tinyllm.model.native.sources import decoder_sources
from tinyllm.model.native.step_ctypes import layout
from tinyllm.model.native.step_structs import LayerWeights

pytestmark = pytest.mark.skipif(library() is None, reason="no native decode step on this machine")


def test_the_compiled_structs_are_laid_out_as_their_ctypes_mirror():
    mirror = layout()
    compiled = compiled_layout(library())
    assert len(compiled) == len(mirror)
    assert dict(zip((what for what, _ in mirror), compiled)) == dict(mirror)
    fields = sum(len(s.fields) for s in step_fields.STRUCTS)
    assert len(mirror) == len(step_fields.STRUCTS) + 2 * fields  # every struct's size, every field's place


def test_the_header_declares_the_tables_fields_in_order():
    text = step_fields.header()
    for s in step_fields.STRUCTS:
        body = text[text.index(f"struct {s.name} {{") :].split("};")[0].splitlines()[1:]
        members = [line.split("//")[0].strip().rstrip(";").split()[-1].split("[")[0] for line in body]
        assert members == [f.name for f in s.fields]


def test_a_changed_table_changes_the_build_key():
    compiler = build.find_compiler()
    sources = decoder_sources(build.cache_root() / "k" / build.LIB_NAME)
    [(name, text)] = sources.generated
    changed = replace(sources, generated=((name, text.replace("int64_t window;", "int64_t window, sink;")),))
    assert build.build_key(compiler, changed) != build.build_key(compiler, sources)


def test_a_layer_field_is_checked_by_its_row():
    with pytest.raises(ValueError, match="a layer's activation must be one of silu, gelu_tanh, got 'relu'"):
        replace(layer_weights(), activation="relu")
    with pytest.raises(ValueError, match="a layer's k_cache is required, got None"):
        replace(layer_weights(), k_cache=None)


def layer_weights() -> LayerWeights:
    model = variant("llama-int8")
    storage = PagedStorage(3, 2, 32, 4, 4)
    return build_stack(model, storage)._keep[0][0]


def test_a_layer_without_pre_norms_projects_x_itself(threads):
    """Null attn_norm and mlp_norm (a family without them): the native step equals the module path with those
    norms replaced by the identity."""
    model = variant("llama-int8")
    lengths = [1, 9, 23, 4, 16]
    storage, inputs, key_slots = scattered_step(model, lengths, seed=5)
    ref_storage = PagedStorage(*storage.k.shape[:1], storage.n_kv_heads, storage.d_head, storage.num_blocks, 4)
    ref_storage.k.copy_(storage.k)
    ref_storage.v.copy_(storage.v)
    layer = model.model.layers[1]
    rows = torch.arange(len(lengths))
    with torch.inference_mode():
        layer.input_layernorm = layer.post_attention_layernorm = None  # the lowering passes null
        stack = build_stack(model, storage)
        assert stack._keep[0][1].attn_norm is None and stack._keep[0][1].mlp_norm is None
        ours = decode_logits(model, stack, inputs.ids[0], inputs.positions, inputs.write_slots, key_slots, rows)
        layer.input_layernorm = layer.post_attention_layernorm = nn.Identity()
        ref = execute(model, ref_storage, inputs, rows)  # [N, V]
    assert (ours - ref).abs().max() <= 1e-5 * ref.abs().max()
