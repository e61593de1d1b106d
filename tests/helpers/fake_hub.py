"""A Hugging Face Hub on 127.0.0.1 that speaks the part of the Hub's HTTP API huggingface_hub's downloads use, so
the real client (pointed at it by HF_ENDPOINT) lays out its own cache:

    GET  /api/models/ORG/NAME[/revision/REV]        the repo's info: {"id", "sha", "siblings"}
    GET  /api/models/ORG/NAME/tree/REV?recursive=…  its files: [{"type": "file", "path", "size", "oid"}]
    HEAD /ORG/NAME/resolve/REV/PATH                 X-Repo-Commit, ETag, Content-Length
    GET  /ORG/NAME/resolve/REV/PATH                 the bytes

An unknown repo answers 404 with X-Error-Code RepoNotFound, a gated one 403 with GatedRepo, as the Hub does.
Every request's path is recorded."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


def commit_of(repo: str) -> str:
    return hashlib.sha1(repo.encode()).hexdigest()  # 40 hex digits, as a commit id


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]], gated: frozenset[str] = frozenset()):
        self.repos = repos  # repo id -> {path in the repo: content}
        self.gated = gated  # repo ids whose terms the (anonymous) client has not accepted
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hub.answer(self, body=True)

            def do_HEAD(self):
                hub.answer(self, body=False)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append(handler.path)
        parts = unquote(urlparse(handler.path).path).strip("/").split("/")
        api = parts[:2] == ["api", "models"]
        repo = "/".join(parts[2:4] if api else parts[:2])
        if repo in self.gated:
            return self.send(handler, 403, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"}, body)
        files = self.repos.get(repo)
        if files is None:
            return self.send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)
        rest = parts[4:] if api else parts[2:]
        if api and rest[:1] == ["tree"]:
            tree = [{"type": "file", "path": p, "size": len(b), "oid": self.oid(b)} for p, b in sorted(files.items())]
            return self.send(handler, 200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, body)
        if api:
            info = {"id": repo, "sha": commit_of(repo), "siblings": [{"rfilename": p} for p in sorted(files)]}
            return self.send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        path = "/".join(rest[2:])  # resolve/REV/PATH
        if rest[:1] != ["resolve"] or path not in files:
            return self.send(handler, 404, b"{}", {"X-Error-Code": "EntryNotFound"}, body)
        data = files[path]
        headers = {"X-Repo-Commit": commit_of(repo), "ETag": f'"{self.oid(data)}"'}
        return self.send(handler, 200, data, headers, body)

    @staticmethod
    def oid(data: bytes) -> str:
        return hashlib.sha1(data).hexdigest()

    @staticmethod
    def send(handler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        handler.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)


@contextlib.contextmanager
def fake_hub(repos: dict[str, dict[str, bytes]], gated: frozenset[str] = frozenset()):
    """A FakeHub serving `repos` on a thread until the block ends."""
    hub = FakeHub(repos, gated)
    thread = threading.Thread(target=hub.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.server.shutdown()
        hub.server.server_close()
        thread.join()
