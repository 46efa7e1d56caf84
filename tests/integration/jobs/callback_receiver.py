"""A real local HTTP endpoint for callback tests: records every POST as it arrives, answers
a status (or hangs while `answering` is cleared)."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: Any


def free_port() -> int:
    """A port nothing listens on (connections to it are refused until `start(port)`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the sender posts many at once; the default backlog is 5


class Receiver:
    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.status = 200
        self.port = free_port()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.answering = threading.Event()  # cleared: every post hangs until it is set again
        self.answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/receipt"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.posts.append(
                        Post(self.path, dict(self.headers.items()), json.loads(raw))
                    )
                    status = receiver.status
                receiver.answering.wait(60)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def bodies(self) -> dict[tuple[str, str], Any]:
        """{(jobId, event): body} of everything received."""
        with self._lock:
            return {(p.body["jobId"], p.body["event"]): p.body for p in self.posts}
