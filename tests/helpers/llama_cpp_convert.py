"""llama.cpp's own converter (convert_hf_to_gguf.py with its `conversion` package and gguf-py, from
llama-cpp-python's source distribution; .ci/run unpacks them into tests/.llama.cpp, or $TINYLLM_LLAMA_CPP names
the folder), run on a Hugging Face folder in a subprocess.

The converter names a byte-level BPE pre-tokenizer by hashing how the folder's tokenizer splits a fixed text
and refuses one it does not know; the tiny test tokenizer is no model's, so it is named "qwen2" (what the tiny
files written by family_models.py say). Everything else (metadata, tensor names, expert stacks, Q8_0) is the
converter's own. Run as a script: `python llama_cpp_convert.py LLAMA_CPP FOLDER JSON` (JSON: file -> its options).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def converter_dir() -> str | None:
    """The folder holding convert_hf_to_gguf.py, or None where it is absent."""
    folder = os.environ.get("TINYLLM_LLAMA_CPP") or os.path.join(os.path.dirname(HERE), ".llama.cpp")
    return folder if os.path.isfile(os.path.join(folder, "convert_hf_to_gguf.py")) else None


def convert(folder: str, outputs: dict[str, list[str]]) -> None:
    """outputs: the file to write -> the converter's options for it (["--outtype", "q8_0"]), all in one process."""
    llama_cpp = converter_dir()
    assert llama_cpp is not None, "llama.cpp's converter is absent"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([llama_cpp, os.path.join(llama_cpp, "gguf-py")])}
    args = [sys.executable, __file__, llama_cpp, folder, json.dumps(outputs)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _main(llama_cpp: str, folder: str, outputs: dict[str, list[str]]) -> None:
    import runpy

    import conversion.base

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    script = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    for path, options in outputs.items():
        sys.argv = [script, folder, "--outfile", path, *options]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
