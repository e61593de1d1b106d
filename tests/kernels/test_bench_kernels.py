"""Smoke run of `tinyllm bench kernels --quick`: one row per shape and M, with positive times. No timing is
asserted (benchmarks are never pass/fail on speed)."""

import json
import os

import pytest

from tinyllm.bench.kernels import SHAPES
from tinyllm.cli import main


@pytest.mark.slow
def test_bench_kernels_quick(tmp_path):
    assert main(["bench", "kernels", "--quick", "--out", str(tmp_path)]) == 0
    with open(os.path.join(tmp_path, "kernels.json")) as f:
        result = json.load(f)
    assert result["bench"] == "kernels" and result["options"]["quick"] is True
    cells = {(r["fmt"], r["n"], r["k"], r["m"]) for r in result["rows"]}
    assert cells == {(fmt, n, k, m) for fmt, n, k, _ in SHAPES for m in result["options"]["m"]}
    for r in result["rows"]:
        assert r["native_s"] > 0 and r["native_int8_s"] > 0 and r["float32_linear_s"] > 0
        assert r["dequantize_linear_s"] > 0
        assert r["weight_bytes"] == r["n"] * r["k"] // 32 * {"Q4_1": 20, "Q8_0": 34}[r["fmt"]]
