"""The decoder's library (model/native/library.py): built over the kernels' library, decided again when those
are, and where it cannot build, one warning and the module path."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tinyllm.kernels import build, native
from tinyllm.model.native import library as decoder
from tinyllm.model.native import sources
from tinyllm.model.native.lowering import unsupported

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native kernels on this machine")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh(monkeypatch):
    """The decoder decided anew, and decided anew again after the test."""
    monkeypatch.setattr(decoder, "_state", {})
    yield
    decoder._state.clear()


def test_a_failed_decoder_build_warns_once_and_the_modules_run(fresh, monkeypatch):
    def fail(compiler, kernels):
        raise RuntimeError("decode.cpp failed: error: expected ';'")

    monkeypatch.setattr(decoder, "build_decoder", fail)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decoder.library() is None and decoder.library() is None
    [warning] = caught
    assert "native decode step is not used, building it failed: decode.cpp failed" in str(warning.message)
    from test_native_lowering import variant

    assert unsupported(variant("llama-int8")) == "the native decode step is not built"


def test_the_decoder_is_decided_again_with_the_kernels(fresh):
    lib = decoder.library()
    assert lib is not None and decoder.library() is lib
    native.reset()  # as the tests of the scalar build do, before and after
    again = decoder.library()
    assert again is not lib and decoder._state["kernels"] is native.library()
    assert again._name == lib._name  # the same kernels, so the same cached decoder


PROBE = "from tinyllm.model.native.library import library; print(library() is not None)"


@pytest.mark.slow
def test_a_first_use_builds_the_kernels_then_the_decoder_each_on_one_line(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "TINYLLM_NATIVE": "1"}
    load = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    first = load()
    assert first.stdout.strip() == "True", first.stderr
    kernels, decoder = first.stderr.splitlines()
    assert kernels.startswith(build.NOTICE) and " done in " in kernels
    assert decoder.startswith(sources.NOTICE) and " done in " in decoder
    assert all(f" {unit.stem} " in decoder for unit in sources.decoder_sources(tmp_path).unit_paths)
    again = load()
    assert again.stdout.strip() == "True" and again.stderr == ""
