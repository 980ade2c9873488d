"""A real HTTP server for notification tests: it records every POST it receives; and the two bad servers a
job must not wait for (one that refuses connections, one that accepts and never answers)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str) -> None:
        super().__init__((host, 0), _Handler)
        self.received: list[dict[str, Any]] = []  # {"path", "body", "time"} in the order they came

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def bodies(self, path: str, at_least: int = 0, timeout: float = 15.0) -> list[Any]:
        """What came to ``path``, once at least ``at_least`` posts came (the job posts after its end is
        recorded: a follower may see the end first) or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r["body"] for r in self.received if r["path"] == path]
            if len(found) >= at_least or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append({"path": self.path, "body": json.loads(data), "time": time.time()})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def recording_server(host: str) -> Iterator[Recorder]:
    server = Recorder(host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def bad_servers(host: str) -> Iterator[tuple[str, str]]:
    """(a URL whose port refuses connections, a URL whose server accepts and never answers)."""
    closed = socket.socket()
    closed.bind((host, 0))  # bound, never listening: connections are refused
    silent = socket.socket()
    silent.bind((host, 0))
    silent.listen(64)  # the kernel accepts connections; nobody ever reads or answers
    try:
        yield (f"http://{host}:{closed.getsockname()[1]}/refused", f"http://{host}:{silent.getsockname()[1]}/hangs")
    finally:
        closed.close()
        silent.close()
