"""Ollama's model routes on a model loaded from a file: /api/tags and /api/ps carry its digest, the SHA-256 of
the file, as Ollama's clients show it."""

import hashlib

import pytest

from helpers.model_files import random_tiny_llama, write_gguf
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

ollama = pytest.importorskip("ollama")


def test_tags_and_ps_carry_the_files_sha256(tmp_path, one_thread):
    path = tmp_path / "tiny.gguf"
    write_gguf(random_tiny_llama(3), str(path))
    expected = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    with ServerThread(create_app(LLM(str(path)), num_blocks=16)) as srv:
        client = ollama.Client(host=srv.wait_ready().url)
        [listed], [running] = client.list().models, client.ps().models
    assert listed.digest == expected and running.digest == expected


@pytest.mark.slow
def test_show_fills_license_parameters_and_modelfile_from_the_file(one_thread):
    llm = LLM()  # the default model's file names its license
    with ServerThread(create_app(llm, num_blocks=16)) as srv:
        shown = ollama.Client(host=srv.wait_ready().url).show(llm.info()["path"].rsplit("/", 1)[-1])
    assert shown.license == "apache-2.0"
    assert 'stop "<|im_end|>"' in shown.parameters.splitlines()
    assert shown.modelfile.startswith('FROM SmolLM2-135M-Instruct.Q4_1\nTEMPLATE """')
    assert 'PARAMETER stop "<|im_end|>"' in shown.modelfile and shown.modelfile.endswith('LICENSE """apache-2.0"""\n')
    assert "/" not in shown.modelfile.split("\n", 1)[0]  # a name, never the file's path
