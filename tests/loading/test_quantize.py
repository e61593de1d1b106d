"""Quantizing float weights at load (loading/quantize.py): the blocks decode (with gguf's own decoder) to
within what the format predicts of the float weights, and a quantized model equals its dequantized twin."""

import numpy as np
import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf, write_hf_folder
from tinyllm import LLM, TinyLLMError
from tinyllm.kernels import dequantize
from tinyllm.loading.loader import load
from tinyllm.loading.quantize import quantize_q4_1, quantize_q8_0
from tinyllm.model.quant_linear import quant_weights

IDS = torch.tensor([[5, 80, 200, 7, 33, 150, 9, 260, 1, 44]])
F16_STEP = 2.0**-11  # float16's relative rounding of a scale or minimum
QUANT_MODEL = dict(hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=16)


def weights(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(48, 160, generator=g) * 0.05
    w[3, 7] = 1.5  # an outlier: only its own group of 32 coarsens
    w[5, 32:64] = 0.0  # an all-zero group: scale 0, decodes to exact zeros
    w[6, :32] += 0.3  # a group far from zero: the Q4_1 minimum follows it
    return w


def groups(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(-1, 32)  # [nb, 32]


def gguf_decoded(q) -> torch.Tensor:
    import gguf
    from gguf.quants import dequantize as gguf_dequantize

    kind = gguf.GGMLQuantizationType[q.fmt]
    return torch.from_numpy(gguf_dequantize(q.data.numpy(), kind).astype(np.float32)).reshape(q.shape)


def test_q8_0_error_is_at_most_half_a_step():
    w = weights()
    q = quantize_q8_0(w)
    back = gguf_decoded(q)
    assert torch.equal(back, dequantize(q))  # our bytes are the GGUF format, decoded alike by both
    step = (groups(w).abs().amax(1, keepdim=True) / 127).to(torch.float16).float()  # [nb, 1]
    err = groups(back - w).abs()
    assert (err <= step / 2 + 1e-7).all()
    assert torch.equal(back[5, 32:64], torch.zeros(32))


def test_q4_1_error_is_at_most_half_a_step_plus_float16_rounding():
    w = weights(1)
    q = quantize_q4_1(w)
    back = gguf_decoded(q)
    assert torch.equal(back, dequantize(q))
    lo, hi = groups(w).amin(1, keepdim=True), groups(w).amax(1, keepdim=True)
    step = ((hi - lo) / 15).to(torch.float16).float()
    bound = step / 2 + F16_STEP * (lo.abs() + (hi - lo)) + 1e-7
    assert (groups(back - w).abs() <= bound).all()
    assert (groups(back - w).abs().amax(1, keepdim=True) > step / 8).any()  # it did round
    assert torch.equal(back[5, 32:64], torch.zeros(32))


@pytest.mark.parametrize("mode,linear_fmt", [("int8", "Q8_0"), ("int4", "Q4_1")])
def test_quantized_model_equals_its_dequantized_twin(tmp_path, mode, linear_fmt):
    model = random_tiny_llama(4, **QUANT_MODEL)
    folder = write_hf_folder(model, str(tmp_path / "hf"))
    native = load(folder, quantize=mode)
    twin = load(folder, quantize=mode, weights="dequantized")  # dequantize(quantize(W)) as float weights
    formats = {w.fmt for w in quant_weights(native.model)}
    assert formats == {linear_fmt, "Q8_0"} and native.weight_types[linear_fmt] >= 3 * model.config.num_layers
    assert not quant_weights(twin.model)
    with torch.inference_mode():
        a, b, exact = native.model(IDS), twin.model(IDS), model(IDS)  # [1, T, V] each
    assert (a - b).abs().max() <= 1e-5 * b.abs().max()
    assert (a - exact).abs().max() > 1e-4  # the weights really were rounded


def test_int4_strays_further_from_the_float_model_than_int8(tmp_path):
    model = random_tiny_llama(5, **QUANT_MODEL)
    folder = write_hf_folder(model, str(tmp_path / "hf"))
    with torch.inference_mode():
        exact = model(IDS)
        err = {m: (load(folder, quantize=m).model(IDS) - exact).abs().max().item() for m in ("int8", "int4")}
    assert 0 < err["int8"] < err["int4"] / 4  # 8 bits have 17x finer steps than 4


def test_quantize_on_float_gguf_and_its_misuses(tmp_path):
    model = random_tiny_llama(6, **QUANT_MODEL)
    float_path, q_path = str(tmp_path / "f.gguf"), str(tmp_path / "q.gguf")
    write_gguf(model, float_path)
    write_gguf(model, q_path, quant_types={"weight": "Q4_0"})
    assert quant_weights(LLM(float_path, quantize="int8").model)
    with pytest.raises(TinyLLMError, match="already holds Q4_0"):
        LLM(q_path, quantize="int8")
    with pytest.raises(TinyLLMError, match="quantize must be one of int8, int4, got 'int3'"):
        LLM(float_path, quantize="int3")
    with pytest.raises(TinyLLMError, match="weights must be one of native, native-int8, native-int24, dequantized"):
        LLM(float_path, weights="packed")
    with pytest.raises(TinyLLMError, match="runs on the CPU only"):
        LLM(q_path, weights="native", device="meta")
