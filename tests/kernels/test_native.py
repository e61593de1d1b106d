"""Building the kernels: cached per source hash, safe when two processes build at once, and a failed build falls
back with one warning that names the reason."""

import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = (
    "import warnings\n"
    "warnings.simplefilter('always')\n"
    "from tinyllm.kernels import native, native_available\n"
    "with warnings.catch_warnings(record=True) as caught:\n"
    "    warnings.simplefilter('always')\n"
    "    ok = native_available() and native_available()\n"
    "print(ok, len(caught), caught[0].message if caught else '')\n"
)


def probe(env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_building_at_once_both_load_one_cached_library(tmp_path):
    from tinyllm.kernels import native

    if native.find_compiler() is None:
        pytest.skip("no C++ compiler on this machine")
    env = {"XDG_CACHE_HOME": str(tmp_path), "TINYLLM_NATIVE": "1"}
    procs = [probe(env), probe(env)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(out.startswith("True 0") for out, _ in outs), outs
    built = list((tmp_path / "tinyllm" / "kernels").iterdir())
    assert len(built) == 1 and (built[0] / native.LIB_NAME).exists()  # one entry, no temporary folder left


@pytest.mark.slow
def test_failed_build_falls_back_with_one_warning_naming_the_reason(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "TINYLLM_NATIVE": "1", "CXX": "false"}
    out, err = probe(env).communicate(timeout=120)
    ok, count, message = out.split(" ", 2)
    assert (ok, count) == ("False", "1"), err
    assert "building them failed" in message and "false" in message


def test_the_fma_probe_counts_multiply_adds_and_refuses_bad_arguments():
    from tinyllm.kernels import native

    lib = native.library()
    if lib is None:
        pytest.skip("no native library")
    for threads in (1, 2):
        rate = lib.tl_fma_rate(threads, 0.05)
        assert 1e8 < rate < 1e13  # any core does more than 0.1 G multiply-adds a second, none 10 T
    assert lib.tl_fma_rate(0, 0.05) == -1.0 and lib.tl_fma_rate(-3, 0.05) == -1.0
    assert lib.tl_fma_rate(1, 0.0) == -1.0 and lib.tl_fma_rate(1, float("nan")) == -1.0


def test_the_fma_probe_is_as_wide_as_the_kernels():
    """On a CPU with AVX-512 the kernels run 16-lane FMAs, so the rate a float32 floor is measured against must
    come from 16-lane FMAs too (an 8-lane probe halves the floor's compute)."""
    from tinyllm.kernels import native

    lib = native.library()
    if lib is None:
        pytest.skip("no native library")
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    build = os.environ.get("TINYLLM_NATIVE", "")  # "avx2": built without AVX-512, "scalar": without vectors
    if build == "scalar":
        assert lib.tl_fma_lanes() == 1
    elif platform.machine() in ("x86_64", "AMD64"):
        assert lib.tl_fma_lanes() == (16 if " avx512f" in flags and build != "avx2" else 8)
    else:
        assert lib.tl_fma_lanes() == 8
