"""docs/usage.md's "Defaults by surface" table against what each surface's own code builds from a request that
sets nothing: the command line's parser, the `llm` plugin, SamplingParams, the server's request checks, Ollama's
options and the chat page's settings form."""

import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinyllm.cli import build_parser, make_params
from tinyllm.cli_checks import max_tokens_of
from tinyllm.llm import sampling_params
from tinyllm.server.checks.sampling_params import chat_params, completion_params, per_choice
from tinyllm.server.ollama.options import sampling_of as ollama_sampling
from tinyllm.server.wire.protocol import ChatCompletionRequest, CompletionRequest

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "docs" / "usage.md"
CHAT_PAGE = ROOT / "tinyllm" / "server" / "static" / "chat.html"
FIELDS = ("temperature", "top_p", "top_k", "max_tokens")
MESSAGES = [{"role": "user", "content": "Hi"}]


def documented() -> dict[str, dict]:
    """Each row's first backticked name -> its values (None: to the end of the context)."""
    section = USAGE.read_text().split("## Defaults by surface\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| surface")]
    out = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = re.search(r"`([^`]+)`", cells[0]).group(1)
        out[name] = {f: parse(c) for f, c in zip(FIELDS, cells[1:])}
    return out


def parse(text: str) -> float | None:
    if text == "to the end of the context":
        return None
    return float(re.match(r"[\d.]+", text).group())


def values(params) -> dict:
    return {f: getattr(params, f) for f in FIELDS}


def cli(*argv: str) -> dict:
    args = build_parser().parse_args(list(argv))
    return values(make_params(args, None, max_tokens_of(args.max_tokens)))


def llm_plugin() -> dict:
    plugin = pytest.importorskip("tinyllm.llm_plugin", reason="the llm command line tool is not installed")
    prompt = SimpleNamespace(options=plugin.TinyLLM.Options(), schema=None)
    return values(sampling_params(None, plugin.sampling_of(prompt)))


def server_chat() -> dict:
    [params] = per_choice(*chat_params(ChatCompletionRequest(model="m", messages=MESSAGES)), 0, 1)
    return values(params)


def server_completion() -> dict:
    [params] = per_choice(*completion_params(CompletionRequest(model="m", prompt="Hi")), 0, 1)
    return values(params)


class Inputs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: dict[str, str | None] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("id") in FIELDS:
            self.found[a["id"]] = a.get("value")


def chat_page() -> dict:
    """The settings form's values, sent as /v1/chat/completions fields (an empty field is left out)."""
    form = Inputs()
    form.feed(CHAT_PAGE.read_text())
    assert set(form.found) == set(FIELDS)
    sent = {k: (float(v) if k in ("temperature", "top_p") else int(v)) for k, v in form.found.items() if v}
    [params] = per_choice(*chat_params(ChatCompletionRequest(model="m", messages=MESSAGES, **sent)), 0, 1)
    return values(params)


SURFACES = {
    "tinyllm generate": lambda: cli("generate", "Hi"),
    "tinyllm chat": lambda: cli("chat"),
    "llm -m tinyllm": llm_plugin,
    "LLM.generate": lambda: values(sampling_params(None, {})),
    "/v1/chat/completions": server_chat,
    "/v1/completions": server_completion,
    "/": chat_page,
}


def test_the_table_names_every_surface():
    assert set(documented()) == set(SURFACES)


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_each_documented_default_is_the_codes(surface):
    assert SURFACES[surface]() == documented()[surface]


def test_ollama_without_options_takes_the_openai_routes_defaults():
    """So its row is the chat route's: no option sets a field of its own."""
    assert ollama_sampling(None, 2048).fields == {}
    assert "Ollama's `/api/chat`" in USAGE.read_text()
