"""The package's imports flow one way, down these layers (LAYERS): the fronts (server, CLI, bench, the llm
plugin) -> llm -> distributed -> engine (and the reference loop) -> speculative -> loading (and embedding) ->
{model, cache, sampling, text} -> grammar -> kernels -> config, errors, outputs; no module imports one that
imports it back. Inside server/ the groups are layers too (SERVER_LAYERS): wire -> checks -> transport and the
models' state -> endpoints -> ollama -> the app."""

import ast
from pathlib import Path

import tinyllm

ROOT = Path(tinyllm.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every tinyllm module this file imports, at the top or inside functions."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if (ROOT.parent / (full.replace(".", "/") + ".py")).exists() else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("tinyllm.") and m != "tinyllm"}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in ROOT.rglob("*.py") if p.name != "__init__.py"}


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for n in g.get(m, ()):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n in g and not state.get(n):
                visit(n, path + [n])
        state[m] = 2

    for m in g:
        if not state.get(m):
            visit(m, [m])


LAYERS = [  # lowest first; a module imports only from its own layer or below
    ("config", "errors", "outputs"),
    ("kernels",),
    ("grammar",),  # structured output: the sampler masks with it, tool calls rewrite schemas with it
    ("model", "cache", "sampling", "text"),
    ("loading", "embedding"),
    ("speculative",),
    ("engine", "reference"),
    ("distributed",),
    ("llm", "perplexity"),
    (
        "server",
        "cli",
        "cli_chat",
        "cli_checks",
        "cli_flags",
        "cli_models",
        "cli_parser",
        "bench",
        "llm_plugin",
        "smollm2_plugin",
    ),
]


def layer_of(module: str) -> int:
    top = module.split(".")[1]
    (found,) = [i for i, names in enumerate(LAYERS) if top in names] or [None]
    assert found is not None, f"{module} is in no layer of LAYERS"
    return found


def test_every_module_imports_from_its_layer_or_below():
    for m, deps in graph().items():
        if m == "tinyllm.__main__":
            continue
        for d in deps:
            assert layer_of(d) <= layer_of(m), f"{m} reaches up to {d}"


def test_text_and_model_never_read_files_through_loading():
    for m, deps in graph().items():
        if m.startswith(
            ("tinyllm.text", "tinyllm.model", "tinyllm.kernels", "tinyllm.sampling", "tinyllm.grammar", "tinyllm.cache")
        ):
            assert not any(d.startswith("tinyllm.loading") for d in deps), m


def test_imports_flow_downwards():
    top = (
        "tinyllm.server",
        "tinyllm.cli",
        "tinyllm.bench",
        "tinyllm.__main__",
        "tinyllm.llm_plugin",
        "tinyllm.smollm2_plugin",
    )
    for m, deps in graph().items():
        for d in deps:
            assert not d.startswith(top) or m.startswith(top), f"{m} reaches up to {d}"
            if not m.startswith(top):
                assert d != "tinyllm.llm" or m == "tinyllm.llm", f"{m} reaches up to the LLM"
            if m.startswith(
                (
                    "tinyllm.engine",
                    "tinyllm.speculative",
                    "tinyllm.model",
                    "tinyllm.cache",
                    "tinyllm.sampling",
                    "tinyllm.grammar",
                    "tinyllm.text",
                    "tinyllm.loading",
                )
            ):
                assert not d.startswith(("tinyllm.llm", "tinyllm.reference")), f"{m} reaches up to {d}"


SERVER_LAYERS = [  # inside server/, lowest first
    ("wire",),  # OpenAI's shapes, errors, the documented limits
    ("checks",),  # a request into the engine's terms
    ("transport", "metrics", "leases", "model_slots", "state"),  # bodies and clients; the loaded models
    ("endpoints",),  # a route family each: its handler and answer
    ("ollama",),  # Ollama's API, built on the endpoints' serving
    ("surfaces", "app", "cli"),
]


def server_layer_of(module: str) -> int:
    part = module.split(".")[2]
    (found,) = [i for i, names in enumerate(SERVER_LAYERS) if part in names] or [None]
    assert found is not None, f"{module} is in no layer of SERVER_LAYERS"
    return found


def test_the_server_groups_import_downwards():
    for m, deps in graph().items():
        if not m.startswith("tinyllm.server."):
            continue
        for d in deps:
            if d.startswith("tinyllm.server.") and d.count(".") >= 2:
                assert server_layer_of(d) <= server_layer_of(m), f"{m} reaches up to {d}"
