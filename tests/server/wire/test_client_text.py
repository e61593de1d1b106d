"""What a client controls is clipped before it reaches the log: a record's message and every exception message
in its traceback (the frames stay whole), through the logging configuration `tinyllm serve` installs."""

import logging
import subprocess
import sys

from tinyllm.server.wire.client_text import ClippedFormatter, clip, clip_traceback
from tinyllm.server.wire.limits import MAX_LOGGED_CHARS

GRAMMAR = "start: " + " | ".join(f'"w{i}"' for i in range(40_000))  # ~400 KB of a client's grammar


def test_clip():
    assert clip("short") == "short"
    assert clip("x" * 1000, 10) == "x" * 10 + "... (990 more)"


def record_with_exception(message: str) -> logging.LogRecord:
    try:
        raise RuntimeError(f"the grammar cannot be compiled: {message}")
    except RuntimeError:
        return logging.LogRecord("tinyllm.engine", logging.ERROR, __file__, 1, "request %s: %s", ("r1", message),
                                 sys.exc_info())  # fmt: skip


def test_formatter_clips_the_message_and_the_exception_but_keeps_the_frames():
    record = record_with_exception(GRAMMAR)
    text = ClippedFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert len(text) < 4 * MAX_LOGGED_CHARS + 1000, len(text)
    assert text.count("more)") == 2  # the message line and the exception line
    assert "Traceback (most recent call last):" in text and "in record_with_exception" in text
    assert record.getMessage().endswith(GRAMMAR)  # the record itself is untouched for other handlers


def test_multi_line_exception_messages_are_clipped_as_one():
    tb = "Traceback (most recent call last):\n  File x, line 1\n    raise E\nE: " + "line\n" * 10_000
    clipped = clip_traceback(tb, 100)
    assert len(clipped) < 300 and clipped.startswith("Traceback (most recent call last):\n  File x")


def test_serve_logging_config_clips_engine_log_lines():
    # A process of its own: the configuration is global to the process that installs it, as in `tinyllm serve`.
    code = (
        "import logging, logging.config\n"
        "from tinyllm.server.wire.client_text import log_config\n"
        "logging.config.dictConfig(log_config('info'))\n"
        "logging.getLogger('tinyllm.engine.isolation').warning('request r1: %s', 'g' * 400_000)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tinyllm.engine.isolation: request r1: ggg" in out.stderr
    assert len(out.stderr) < 2 * MAX_LOGGED_CHARS and "more)" in out.stderr
