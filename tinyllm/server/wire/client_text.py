"""Text a client controls (a grammar, a schema, a prompt, a header), cut short before it reaches a log line or
an error message: a failed 400 KB grammar must cost the log 500 characters, not 400 KB per request.

`ClippedFormatter` is the server's log formatter: it cuts each record's message and each exception message in
its traceback (the lines that are not indented; the frames are the code's own), wherever they come from, the
engine and the grammar engine included.
"""

from __future__ import annotations

import logging

from .limits import MAX_LOGGED_CHARS


def clip(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """text, or its first `limit` characters and how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more)"


def clip_traceback(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """A formatted traceback with each exception message (a run of unindented lines) clipped."""
    out, message = [], []
    for line in text.split("\n"):
        if line.startswith(" ") or line.startswith("Traceback ("):
            if message:
                out.append(clip("\n".join(message), limit))
                message = []
            out.append(line)
        else:
            message.append(line)
    if message:
        out.append(clip("\n".join(message), limit))
    return "\n".join(out)


class ClippedFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        clipped = logging.makeLogRecord(record.__dict__)  # a copy: other handlers see the record as it was
        clipped.msg, clipped.args = clip(record.getMessage()), None
        if record.exc_info:
            clipped.exc_text = clip_traceback(self.formatException(record.exc_info))
        return super().format(clipped)


def log_config(level: str) -> dict:
    """uvicorn's logging configuration, plus the `tinyllm` loggers written through ClippedFormatter."""
    from uvicorn.config import LOGGING_CONFIG

    config = {**LOGGING_CONFIG}
    config["formatters"] = {
        **LOGGING_CONFIG["formatters"],
        "tinyllm": {"()": f"{__name__}.ClippedFormatter", "fmt": "%(levelname)s:     %(name)s: %(message)s"},
    }
    config["handlers"] = {
        **LOGGING_CONFIG["handlers"],
        "tinyllm": {"formatter": "tinyllm", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
    }
    tinyllm_logger = {"handlers": ["tinyllm"], "level": level.upper(), "propagate": False}
    config["loggers"] = {**LOGGING_CONFIG["loggers"], "tinyllm": tinyllm_logger}
    return config
