"""The chat page's Markdown renderer (static/markdown.js) run under node: right output, text never turned into
markup, linear work on input built to be deep or to make a scanner search ahead, and a streaming view that
renders only the blocks that changed and ends as the whole text rendered at once."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tinyllm.server

MARKDOWN = Path(tinyllm.server.__file__).parent / "static" / "markdown.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

FAKE_DOM = Path(__file__).parent / "fake_dom.js"


def node(script: str) -> object:
    prelude = (
        f"const md = require({json.dumps(str(MARKDOWN))});\n"
        f"const {{ Element, doc }} = require({json.dumps(str(FAKE_DOM))});\n"
    )
    out = subprocess.run([NODE, "-e", prelude + script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def html(text: str) -> str:
    return node(f"console.log(JSON.stringify(md.toHtml(md.parse({json.dumps(text)}))));")


CASES = {
    "safe": (
        "A **bold** `code` <script>alert(1)</script>.",
        "<p>A <strong>bold</strong> <code>code</code> &lt;script&gt;alert(1)&lt;/script&gt;.</p>",
    ),
    "emphasis": (
        "***both*** a**b**c ** no ** *a **b* c**",
        "<p><strong><em>both</em></strong> a<strong>b</strong>c ** no ** <em>a **b</em> c**</p>",
    ),
    "link": (
        "[**x** `y`](https://e.org/a) [js](javascript:alert(1))",
        '<p><a href="https://e.org/a" target="_blank" rel="noopener noreferrer"><strong>x</strong> <code>y</code>'
        "</a> [js](javascript:alert(1))</p>",
    ),
    "blocks": (
        "# T\n- a\n- b\n1. c\n\n> q\n> > d\n> e\n\n```py\n<b>\n```\nz",
        "<h3>T</h3><ul><li>a</li><li>b</li></ul><ol><li>c</li></ol><blockquote><p>q</p><blockquote><p>d</p>"
        '</blockquote><p>e</p></blockquote><pre><code class="language-py">&lt;b&gt;</code></pre><p>z</p>',
    ),
    "paragraph": ("line one\nline `two", "<p>line one<br>line `two</p>"),
}


@pytest.mark.parametrize("name", CASES)
def test_it_renders_markdown_and_keeps_text_text(name):
    text, expected = CASES[name]
    assert html(text) == expected


def test_20000_quote_markers_nest_to_the_limit_and_the_rest_stay_text():
    depth = node("console.log(md.MAX_DEPTH)")
    inner = f"<p>{'&gt;' * (20_000 - depth)}</p>"
    assert html(">" * 20_000) == "<blockquote>" * depth + inner + "</blockquote>" * depth


def test_unclosed_and_deeply_nested_emphasis_takes_linear_work():
    # **a ** a ... never closes: a scanner that searches ahead for each opener does n^2 work; here the work
    # (characters and tokens visited) grows as the input does.
    steps = node(
        "const steps = (t) => { const w = { steps: 0 }; md.parse(t, w); return w.steps; };"
        "console.log(JSON.stringify([1, 2, 4].map((k) => steps('**a '.repeat(10000 * k)))"
        ".concat([1, 2, 4].map((k) => steps('**a '.repeat(5000 * k) + 'b** '.repeat(5000 * k))))"
        ".concat([1, 2, 4].map((k) => steps('`a``[x](http://a'.repeat(5000 * k))))));"
    )
    for a, b, c in (steps[0:3], steps[3:6], steps[6:9]):
        assert b <= 2 * a + 8 and c <= 4 * a + 16, steps
    assert html("**a " * 20_000) == "<p>" + "**a " * 20_000 + "</p>"
    depth = node("console.log(md.MAX_DEPTH)")
    nested = html("**a " * 100 + "b** " * 100)
    assert nested.count("<strong>") == depth and nested.count("**") == 2 * (100 - depth)


def test_the_streaming_view_renders_only_the_changed_blocks_and_ends_as_one_render():
    text = "# Title\n\n" + "".join(f"Para {i} with **bold** and `code`.\n\n- item {i}\n- item\n\n" for i in range(60))
    text += "> q\n> > deeper\n\n```js\nlet x = 1;\n```\nthe end"
    result = node(
        f"const text = {json.dumps(text)};"
        "const box = new Element('div'); const view = md.view(box, doc); let same = true;"
        "for (let n = 1; n <= text.length; n += 3) { view.update(text.slice(0, n));"
        "  same = same && box.kids.map((k) => k.html(md)).join('') === md.toHtml(md.parse(text.slice(0, n))); }"
        "view.update(text);"
        "const whole = box.kids.map((k) => k.html(md)).join('') === md.toHtml(md.parse(text));"
        "const before = doc.created; view.update('other text'); const reset = box.kids.map((k) => k.html(md)).join('');"
        "console.log(JSON.stringify({ same, whole, created: before, frames: Math.ceil(text.length / 3), reset }));"
    )
    assert result["same"] and result["whole"] and result["reset"] == "<p>other text</p>"
    # Rendering the whole text every frame would create ~frames x blocks / 2 (~60,000) elements.
    assert result["created"] < 12 * result["frames"], result


def test_the_renderer_never_parses_html():
    source = MARKDOWN.read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|DOMParser|eval\(", source)
    assert "createTextNode" in source and "setAttribute" in source
