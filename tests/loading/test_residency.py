"""After loading a GGUF file, only the pages that the float kernels read in place stay resident: fused parts
were copied, 8-bit weights run on their packed copies. Dropped pages lose nothing (a read maps them again)."""

import mmap
import os

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.kernels import native
from tinyllm.loading.gguf_file import open_gguf
from tinyllm.loading.residency import unread_ranges
from tinyllm.model.quant_linear import quant_weights

PAGE = 4096
MODEL = dict(hidden_size=256, intermediate_size=512, num_heads=4, num_kv_heads=2, head_dim=64)


def test_unread_ranges_are_the_whole_pages_outside_the_kept_ones():
    assert unread_ranges(0, 10 * PAGE, [], PAGE) == [(0, 10 * PAGE)]
    kept = [(3 * PAGE + 100, 5 * PAGE - 1), (PAGE + 5, PAGE + 6)]  # unsorted; partial pages stay whole
    assert unread_ranges(0, 10 * PAGE, kept, PAGE) == [(0, PAGE), (2 * PAGE, 3 * PAGE), (5 * PAGE, 10 * PAGE)]
    assert unread_ranges(100, 2 * PAGE + 7, [], PAGE) == [(PAGE, 2 * PAGE)]  # only whole pages inside
    assert unread_ranges(0, 4 * PAGE, [(0, 4 * PAGE)], PAGE) == []


def mapping_of(address: int) -> tuple[int, int, int]:
    """(start, end, resident bytes) of this process's mapping holding `address` (/proc/self/smaps)."""
    found = None
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if found is not None:
                    break
                if lo <= address < hi:
                    found = [lo, hi, 0]
            elif found is not None and fields[0] == "Rss:":
                found[2] = int(fields[1]) * 1024
    assert found is not None, f"no mapping holds {address:#x}"
    return tuple(found)


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("res") / "m.gguf")
    write_gguf(random_tiny_llama(4, **MODEL), path, quant_types={"weight": "Q4_1", "token_embd.weight": "Q8_0"})
    return path


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
@pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
@pytest.mark.parametrize("weights", ["native", "native-int8"])
def test_only_pages_read_in_place_stay_resident(gguf_path, weights):
    llm = LLM(gguf_path, weights=weights)
    lo, hi, resident = mapping_of(llm.model.model.embed_tokens.weight.data.data_ptr())  # a view of the file
    in_place = [w for w in quant_weights(llm.model) if not w.int8_activations and lo <= w.data.data_ptr() < hi]
    kept = sum(w.data.numel() for w in in_place)
    assert resident <= kept + 2 * mmap.PAGESIZE * max(1, len(in_place))  # partial pages at a kept range's ends
    if weights == "native":  # o, down and the embedding stay; the fused parts' pages went
        assert kept > 0 and resident >= kept // 2 and resident < (hi - lo) // 2
    else:
        assert kept == 0 and resident <= 2 * mmap.PAGESIZE
    rows = torch.tensor([0, 7, 263])  # read again after their pages were dropped: the file's values
    table = torch.from_numpy(open_gguf(gguf_path).dequantize("token_embd.weight"))
    assert torch.equal(llm.model.model.embed_tokens(rows), table[rows])
    ids = llm.generate([5, 9, 30], max_tokens=6, temperature=0, ignore_eos=True).ids
    assert ids == LLM(gguf_path, weights=weights).generate([5, 9, 30], max_tokens=6, temperature=0, ignore_eos=True).ids
