"""The paths every kernel test runs on."""

import pytest

from tinyllm.kernels import native


def has_avx512() -> bool:
    return "avx512f" in native.cpu_features().split()


@pytest.fixture(params=["native", "avx2", "scalar", "fallback"])
def path(request, monkeypatch):
    """native: the kernels built for this CPU; avx2: its AVX2 build where the CPU also has AVX-512 (else the
    native build already is that one); scalar: the portable C++ path; fallback: the PyTorch form."""
    if request.param == "avx2" and not (has_avx512() and "avx2" in native.cpu_features().split()):
        pytest.skip("the native build is the AVX2 one on this CPU, or it has no AVX2")
    env = {"native": None, "avx2": "avx2", "scalar": "scalar", "fallback": "0"}[request.param]
    if env is not None:
        monkeypatch.setenv("TINYLLM_NATIVE", env)
    native.reset()
    if env == "0":
        with pytest.warns(RuntimeWarning):
            native.library()
    elif native.library() is None:
        pytest.skip("no native kernels on this machine")
    yield request.param
    native.reset()
