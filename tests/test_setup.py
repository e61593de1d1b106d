"""setup.py's install step: it builds the kernels where the first run looks for them, and a failed build
leaves the install going."""

import importlib.util
import runpy
from pathlib import Path

import pytest
import setuptools

from tinyllm.kernels import build

SETUP = Path(__file__).resolve().parent.parent / "setup.py"


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py's names, without running setuptools."""
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    return runpy.run_path(str(SETUP))


def test_the_install_step_builds_where_the_first_run_looks(setup_py):
    compiler = build.find_compiler()
    if compiler is None:
        pytest.skip("no C++ compiler on this machine")
    # the build module as setup.py loads it, by its path: the same sources, flags, key and cache
    spec = importlib.util.spec_from_file_location("install_build", setup_py["BUILD"])
    at_install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(at_install)
    assert at_install.CSRC.samefile(build.CSRC) and at_install.cache_root() == build.cache_root()
    assert at_install.build_key(compiler) == build.build_key(compiler)


def test_a_failed_build_at_install_is_said_and_the_install_goes_on(setup_py, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails every command
    setup_py["build_kernels"]()
    err = capsys.readouterr().err
    assert "tinyllm: the kernels did not build now" in err and "the first run tries again" in err
