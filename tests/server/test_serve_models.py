"""`tinyllm serve` without --model serves every model the machine has: the default model and a tiny random one
the test writes into the models folder (TINYLLM_MODELS). Both answer by name through the openai SDK and Ollama's
client, the listings show both, and keep_alive 0 unloads one while the other stays."""

import openai
import pytest

from helpers.live_server import serve
from helpers.model_files import random_tiny_llama, write_gguf

ollama = pytest.importorskip("ollama")


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    (folder / "tiny").mkdir()
    write_gguf(random_tiny_llama(7), str(folder / "tiny" / "random.gguf"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYLLM_MODELS", str(folder))
        with serve("--kv-memory-gb", "0.05", "--max-num-seqs", "4") as port:
            yield port


@pytest.mark.slow
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


@pytest.mark.slow
def test_keep_alive_zero_unloads_one_model_and_the_other_stays(port):
    client = ollama.Client(host=f"http://127.0.0.1:{port}")
    assert client.generate("tiny:random", "Hi", options={"num_predict": 2}).done
    assert sorted(m.model for m in client.ps().models) == ["smollm2:135m", "tiny:random"]
    assert client.generate("tiny:random", "", keep_alive=0).done_reason == "unload"
    assert [m.model for m in client.ps().models] == ["smollm2:135m"]
    assert client.chat("smollm2:135m", [{"role": "user", "content": "Hi"}], options={"num_predict": 2}).done


@pytest.mark.parametrize(
    ("flags", "first", "others", "max_loaded", "budget"),
    [
        ([], None, 300.0, 3, None),
        (["--keep-alive", "10m", "--max-loaded-models", "2", "--max-memory-gb", "1.5"], 600.0, 600.0, 2, 3 << 29),
        (["--keep-alive", "-1"], None, None, 3, None),
        (["--keep-alive", "0"], 0.0, 0.0, 3, None),
    ],
)
def test_the_serve_flags_for_several_models(flags, first, others, max_loaded, budget):
    from tinyllm.cli import build_parser
    from tinyllm.server.cli import keep_alive_flag, slot_limits

    args = build_parser().parse_args(["serve", *flags])
    assert keep_alive_flag(args) == (first, others)
    limits = slot_limits(args)
    assert limits.max_loaded == max_loaded and (budget is None or limits.memory_budget == budget)
    assert limits.memory_budget > 0


@pytest.mark.parametrize("bad", ["soon", "5 m", "nan"])
def test_a_keep_alive_flag_that_is_no_duration_is_one_line(bad):
    from tinyllm.cli import build_parser
    from tinyllm.errors import TinyLLMError
    from tinyllm.server.cli import keep_alive_flag

    with pytest.raises(TinyLLMError, match=rf"--keep-alive must be seconds or a duration .*, got '{bad}'"):
        keep_alive_flag(build_parser().parse_args(["serve", "--keep-alive", bad]))


def test_a_model_name_that_finds_nothing_fails_before_the_port_opens(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TINYLLM_MODELS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "tinyllm", "serve", "--model", "nosuch:model", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2 and "Uvicorn" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "tinyllm: error: model 'nosuch:model' is not a file, a folder, a name from `tinyllm list` or a Hugging Face "
        "id (org/name, org/name:QUANT or org/name/file.gguf)"
    ]
