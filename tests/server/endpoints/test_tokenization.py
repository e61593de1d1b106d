"""/tokenize, /detokenize and /tokenizer_info: messages and tools count exactly the prompt tokens the chat
request uses, a body with neither prompt nor messages says so, and lm-eval's remote tokenizer (vLLM's
/tokenizer_info and /tokenize) works against the server, token for token as the model's tokenizer."""

import httpx
import openai
import pytest

from helpers.tiny_models import tiny_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.transport.server_thread import ServerThread

CONTEXT = 1024
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}}]


@pytest.fixture(scope="module")
def url(smollm_tokenizer, one_thread):
    llm = LLM.from_parts(
        tiny_llama(4, vocab_size=smollm_tokenizer.vocab_size, max_position_embeddings=CONTEXT), smollm_tokenizer
    )
    with ServerThread(create_app(llm, served_model_name="tiny", num_blocks=128)) as srv:
        yield srv.wait_ready().url


def post(url, path, body):
    return httpx.post(f"{url}{path}", json=body, timeout=60)


@pytest.mark.parametrize("tool_choice", [None, "auto", "required", "none"])
def test_tokenize_counts_the_tools_as_the_chat_request_does(url, tool_choice):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}
    answer = client.chat.completions.create(model="tiny", messages=CHAT, tools=TOOLS, max_tokens=1, **extra)
    counted = post(url, "/tokenize", {"messages": CHAT, "tools": TOOLS, **extra}).json()
    assert counted["count"] == answer.usage.prompt_tokens == len(counted["tokens"])
    without = post(url, "/tokenize", {"messages": CHAT}).json()["count"]
    assert (counted["count"] > without) == (tool_choice != "none")


def test_tokenize_without_an_input_says_what_to_send(url):
    for body, got in (({}, "neither"), ({"prompt": "a", "messages": CHAT}, "both")):
        r = post(url, "/tokenize", body)
        assert r.status_code == 400
        assert r.json()["error"]["message"] == f"send exactly one of prompt (text) or messages (a chat), got {got}"
    r = post(url, "/tokenize", {"prompt": "a", "tools": TOOLS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"


def test_tokenizer_info_in_vllms_shape(url, smollm_tokenizer):
    info = httpx.get(f"{url}/tokenizer_info", timeout=60).json()
    tok = smollm_tokenizer
    assert info["eos_token"] == tok.hf.id_to_token(tok.eos_id) and info["bos_token"] == tok.hf.id_to_token(tok.bos_id)
    assert info["model_max_length"] == CONTEXT and info["chat_template"] == tok.chat_template
    assert info["tokenizer_class"] and info["add_bos_token"] == tok.add_bos


def test_lm_eval_remote_tokenizer(url, smollm_tokenizer):
    utils = pytest.importorskip("lm_eval.utils")
    base = f"{url}/v1/completions"
    assert utils.check_remote_tokenizer_support(base)
    remote = utils.RemoteTokenizer(base)
    text = "The river Rhine, 1,233 km long: Überlingen."
    ids = remote.encode(text)
    assert ids == smollm_tokenizer.encode(text, add_special_tokens=False)
    assert remote.decode(ids) == text
    assert remote.eos_token_id == smollm_tokenizer.eos_id
    messages = [{"role": "user", "content": "Hi"}]
    assert remote.apply_chat_template(messages) == smollm_tokenizer.apply_chat_template(messages, True)
