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


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("whole") / "m.gguf"
    write_gguf(random_tiny_llama(5), str(path))
    return path.read_bytes()


def _cut_at(data: bytes, where: str) -> int:
    """A byte inside the header, the metadata, the tensor infos or the tensor data of this file."""
    infos = data.index(b"token_embd.weight") - 8  # the first tensor record's name length
    return {"header": 10, "metadata": 200, "tensor infos": infos + 20, "tensor data": len(data) - 100}[where]


@pytest.mark.parametrize("where", ["header", "metadata", "tensor infos", "tensor data"])
def test_a_cut_short_file_says_where_it_ends_in_the_users_words(tmp_path, whole, where):
    path = tmp_path / "model.gguf"
    cut = _cut_at(whole, where)
    path.write_bytes(whole[:cut])
    with pytest.raises(TinyLLMError) as info:
        LLM(str(path))
    message = str(info.value)
    assert message.startswith(f"{path} is cut short: ") and message.endswith("; the download may be incomplete")
    assert f"the file ends at byte {cut}" in message and "unpack" not in message
    if where in ("metadata", "tensor infos"):
        assert f"its header says 30 tensors and {_num_kv(whole)} metadata entries" in message
        assert f"inside the {where}" in message
    if where == "tensor data":
        assert "tensor 'output.weight' ends at byte" in message


def _num_kv(data: bytes) -> int:
    return struct.unpack_from("<Q", data, 16)[0]


@pytest.mark.parametrize(
    "content, says",
    [
        (b"hello world, not a model", "it starts with the text 'hello wo...'"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "it starts with the bytes 89 50 4e 47 0d 0a 1a 0a"),
        (b"", "it is empty"),
    ],
)
def test_a_file_that_is_not_gguf_says_what_it_starts_with(tmp_path, content, says):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(TinyLLMError) as info:
        LLM(str(path))
    assert str(info.value) == f"{path} is not a GGUF file ({says}); expected a file that begins with GGUF"
