"""setup.py's install step: it builds the kernels where the first run looks for them, and a failed build
leaves the install going."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import setuptools

from tinyllm.kernels import native
from tinyllm.model.native.library import library as decoder_library

SETUP = Path(__file__).resolve().parent.parent / "setup.py"


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py's names, without running setuptools."""
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    return runpy.run_path(str(SETUP))


# setup.py's loading in a fresh process: the library paths the install builds at (the kernels', then the
# decoder's over them) and whether it imported torch
AT_INSTALL = """
import runpy, sys, setuptools
setuptools.setup = lambda **kwargs: None
names = runpy.run_path(sys.argv[1])
build = names["plain_module"]("tinyllm.kernels.build")
decoder = names["plain_module"]("tinyllm.model.native.sources")
compiler = build.find_compiler()
kernels = build.cache_root() / build.build_key(compiler, build.KERNELS) / build.LIB_NAME
print(kernels)
print(build.cache_root() / build.build_key(compiler, decoder.decoder_sources(kernels)) / decoder.LIB_NAME)
print("torch" in sys.modules)
"""


def test_the_install_step_builds_where_the_first_run_looks():
    if native.library() is None or decoder_library() is None:
        pytest.skip("no native kernels on this machine")
    done = subprocess.run(
        [sys.executable, "-c", AT_INSTALL, str(SETUP)], capture_output=True, text=True, timeout=120, check=True
    )
    kernels, decoder, torch_imported = done.stdout.split()
    assert kernels == native.library()._name and decoder == decoder_library()._name
    assert torch_imported == "False"


def test_a_failed_build_at_install_is_said_and_the_install_goes_on(setup_py, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails every command
    setup_py["build_kernels"]()
    err = capsys.readouterr().err
    assert "tinyllm: the kernels did not build now" in err and "the first run tries again" in err
