"""The kernels' build: one line on stderr while a first build runs, sources compiled side by side, a failed
build leaves nothing behind."""

import io
import os
import subprocess
import sys
import threading
import time

import pytest

from tinyllm.kernels import build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = "from tinyllm.kernels import native; print(native.library() is not None)"


def load_in_subprocess(cache: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": cache, "TINYLLM_NATIVE": "1"}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_first_build_says_so_on_one_line_and_the_next_load_is_silent(tmp_path):
    if build.find_compiler() is None:
        pytest.skip("no C++ compiler on this machine")
    first = load_in_subprocess(str(tmp_path))
    assert first.stdout.strip() == "True", first.stderr
    [line] = first.stderr.splitlines()
    assert line.startswith(build.NOTICE) and line.endswith(" s") and " done in " in line
    names = [unit.stem for unit in build.KERNELS.unit_paths]
    for name in names:
        assert f" {name} " in line
    assert all(f" {i + 1}/{len(names)}," in line for i in range(len(names)))
    again = load_in_subprocess(str(tmp_path))
    assert again.stdout.strip() == "True" and again.stderr == ""


def fake_compiler(tmp_path, monkeypatch, run):
    """build() with `run` in place of the compiler's processes, caching under tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(build, "build_key", lambda compiler, sources: "key")
    monkeypatch.setattr(build, "run", run)


def test_sources_compile_one_process_per_core_at_once(tmp_path, monkeypatch):
    lock, running, most = threading.Lock(), [0], [0]

    def run(cmd):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        open(cmd[cmd.index("-o") + 1], "w").close()  # the object, or the library

    fake_compiler(tmp_path, monkeypatch, run)
    monkeypatch.setattr(build, "num_jobs", lambda: 3)
    log = io.StringIO()
    path = build.build("c++", build.KERNELS, log=log)
    assert path == tmp_path / "tinyllm" / "kernels" / "key" / build.LIB_NAME and path.exists()
    assert most[0] == 3
    assert log.getvalue().startswith(build.NOTICE) and log.getvalue().count("\n") == 1
    assert os.listdir(path.parent) == [build.LIB_NAME]  # the objects are gone
    again = build.build("c++", build.KERNELS, log=log)
    assert again == path and log.getvalue().count("\n") == 1  # cached: nothing said


def test_a_failed_compile_raises_naming_the_command_and_leaves_no_folder(tmp_path, monkeypatch):
    def run(cmd):
        if "qmatmul.cpp" in " ".join(cmd):
            raise RuntimeError(f"{' '.join(cmd)} failed: error: expected ';'")
        open(cmd[cmd.index("-o") + 1], "w").close()

    fake_compiler(tmp_path, monkeypatch, run)
    log = io.StringIO()
    with pytest.raises(RuntimeError, match=r"-c \S*qmatmul.cpp -o .* failed: error: expected ';'"):
        build.build("c++", build.KERNELS, log=log)
    assert os.listdir(tmp_path / "tinyllm" / "kernels") == []
    assert log.getvalue().startswith(build.NOTICE) and " failed in " in log.getvalue()
    assert log.getvalue().endswith(" s\n") and log.getvalue().count("\n") == 1
