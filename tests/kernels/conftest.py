"""The three paths every kernel test runs on."""

import pytest

from tinyllm.kernels import native


@pytest.fixture(params=["native", "scalar", "fallback"])
def path(request, monkeypatch):
    """native: the kernels built for this CPU; scalar: the portable C++ path; fallback: the PyTorch form."""
    env = {"native": None, "scalar": "scalar", "fallback": "0"}[request.param]
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
