"""GGUF block tables are checked at load: a corrupt one is an error naming the tensor, never garbage."""

import struct

import gguf
import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM, TinyLLMError

QUANT_MODEL = dict(hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=16)


def quantized_file(tmp_path) -> str:
    path = str(tmp_path / "q.gguf")
    write_gguf(random_tiny_llama(1, **QUANT_MODEL), path, quant_types={"weight": "Q4_1"})
    return path


@pytest.mark.parametrize("weights", ["native", "dequantized"])
def test_nan_scale_names_the_tensor(tmp_path, weights):
    path = quantized_file(tmp_path)
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.1.ffn_down.weight")
    offset = int(t.data_offset) + 5 * 20  # the 6th block's float16 scale
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<H", 0x7E00))  # float16 NaN
    with pytest.raises(TinyLLMError, match=r"blk\.1\.ffn_down\.weight.*(corrupt|NaN)"):
        LLM(path, weights=weights)


def test_header_claiming_more_bytes_than_laid_out_names_the_tensor(tmp_path):
    path = quantized_file(tmp_path)
    name = b"blk.0.attn_output.weight"
    data = bytearray(open(path, "rb").read())
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims, ne0 = struct.unpack_from("<IQ", data, at)
    assert n_dims == 2 and ne0 == 64
    struct.pack_into("<Q", data, at + 4, 128)  # twice the columns the file holds
    open(path, "wb").write(bytes(data))
    with pytest.raises(TinyLLMError, match=r"attn_output\.weight.*bytes"):
        LLM(path)
