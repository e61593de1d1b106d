"""ServerThread: uvicorn serving an app from a thread of this process, on a free loopback port.

Tests and the serving benchmark use it to run a real server (real sockets, real HTTP) without a
subprocess, and to stop it cleanly afterwards.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import uvicorn

from .slow_clients import ConnectionLimits, uvicorn_options


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_level: str = "warning",
        limits: ConnectionLimits | None = None,
    ):
        self.host, self.port = host, port or free_port(host)
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=5,
            **uvicorn_options(limits or ConnectionLimits()),
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="tinyllm-uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def wait_ready(self, timeout: float = 120.0) -> ServerThread:
        """Poll /health until the model has loaded (200); raise if it failed or took too long."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except urllib.error.HTTPError as exc:  # 503: still loading, or failed
                body = json.loads(exc.read() or b"{}")
                if body.get("status") == "failed":
                    raise RuntimeError(f"the model failed to load: {body.get('error')}") from None
            time.sleep(0.05)
        raise RuntimeError(f"the server on {self.url} was not ready within {timeout} s")

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
