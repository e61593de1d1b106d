"""`tinyllm serve` without --model serves every model the machine has: the default model and a tiny random one
the test writes into the models folder (TINYLLM_MODELS). Both answer by name through the openai SDK and Ollama's
client, the listings show both, and keep_alive 0 unloads one while the other stays."""

import openai
import pytest

from helpers.live_server import serve
from helpers.model_files import random_tiny_llama, write_gguf

ollama = pytest.importorskip("ollama")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    (folder / "tiny").mkdir()
    write_gguf(random_tiny_llama(7), str(folder / "tiny" / "random.gguf"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYLLM_MODELS", str(folder))
        with serve("--kv-memory-gb", "0.05", "--max-num-seqs", "4") as port:
            yield port


def test_both_models_answer_by_name_and_are_listed(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["smollm2:135m", "tiny:random"]
    hi = [{"role": "user", "content": "Hi"}]
    for name, answered_as in [
        ("smollm2:135m", "smollm2:135m"),
        ("SmolLM2-135M-Instruct.Q4_1", "smollm2:135m"),
        ("tiny:random", "tiny:random"),
    ]:
        r = client.chat.completions.create(model=name, messages=hi, max_tokens=3, seed=1)
        assert r.model == answered_as and r.usage.completion_tokens >= 1
    with pytest.raises(openai.NotFoundError, match="tiny:other"):
        client.chat.completions.create(model="tiny:other", messages=hi, max_tokens=1)
    tags = ollama.Client(host=f"http://127.0.0.1:{port}").list().models
    assert sorted(m.model for m in tags) == ["smollm2:135m", "tiny:random"]
    assert all(m.digest and m.details.family == "llama" for m in tags)


def test_keep_alive_zero_unloads_one_model_and_the_other_stays(port):
    client = ollama.Client(host=f"http://127.0.0.1:{port}")
    assert client.generate("tiny:random", "Hi", options={"num_predict": 2}).done
    assert sorted(m.model for m in client.ps().models) == ["smollm2:135m", "tiny:random"]
    assert client.generate("tiny:random", "", keep_alive=0).done_reason == "unload"
    assert [m.model for m in client.ps().models] == ["smollm2:135m"]
    assert client.chat("smollm2:135m", [{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done
