"""The one .pth line the install puts beside the package (setup.py): it installs the stand-in finder for the
default model's `llm` plugin, and stays silent where tinyllm cannot be imported (an editable install whose folder
is gone), where a traceback would otherwise greet every interpreter start."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pth_line() -> str:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PTH_LINE":
            return node.value.value
    raise AssertionError("setup.py defines no PTH_LINE")


def test_the_line_is_one_import_line():
    line = pth_line()
    assert line.startswith("import ") and line.endswith("\n") and line.count("\n") == 1


def test_the_line_installs_the_finder():
    check = "print(sum(isinstance(f, DefaultModelFinder) for f in sys.meta_path))"
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nexec({pth_line()!r})\n"
            f"from tinyllm.smollm2_plugin import DefaultModelFinder\n{check}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr


def test_the_line_is_silent_without_tinyllm():
    # sys.modules[name] = None makes `import name` raise ImportError, as a removed package does
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys\nsys.modules['tinyllm'] = None\nexec({pth_line()!r})\nprint('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
