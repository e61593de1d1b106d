"""Ollama's JavaScript client (ollama-js) against the server, as its users drive it: a JSON schema without
additionalProperties held closed, a stream, embeddings with dimensions, the model list with its digest, runner
options such as num_thread accepted, seeded mirostat, keep_alive 0 unloading the model, and an unknown model's
error. `.ci/run` installs the npm package into
tests/js/node_modules; without node or the package the test skips."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

SCRIPT = Path(__file__).resolve().parents[2] / "js" / "ollama_client.cjs"
PACKAGE = SCRIPT.parent / "node_modules" / "ollama"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(not PACKAGE.exists(), reason="ollama-js is not installed: npm install --prefix tests/js ollama"),
]


def test_ollama_js_drives_the_server(tmp_path, one_thread):
    path = tmp_path / "tiny.gguf"
    write_gguf(random_tiny_llama(4, max_position_embeddings=512), str(path))
    with ServerThread(create_app(LLM(str(path)), num_blocks=64)) as srv:
        done = subprocess.run(
            ["node", str(SCRIPT), srv.wait_ready().url, "tiny"], capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["format"]["done_reason"] == "stop" and list(json.loads(out["format"]["content"])) == ["legs"]
    assert out["stream"]["done"] is True and out["stream"]["eval_count"] == 5 and out["stream"]["pieces"] >= 2
    assert out["embed"] == [8, 8]
    assert out["list"] == [{"name": "tiny", "digest": "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()}]
    assert out["missing"]["status"] == 404 and "not found" in out["missing"]["error"]
    assert len(out["mirostat"]) == 2 and out["mirostat"][0] == out["mirostat"][1]  # seeded mirostat repeats
    assert out["unload"] == {"done_reason": "unload", "ps": 0}  # keep_alive 0 with no prompt unloads it
    assert out["reload"] == 2 and out["ps"] == ["tiny"]  # and the next request loads it again
