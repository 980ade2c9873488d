"""slurmrestd's answers are not trusted: a fake server on the loopback address (a real HTTP server, a thread of
the test) that drips its answer, sends gigabytes, or answers in shapes of its own. Each is one line naming the
server, soon, with memory bounded; under ``--cluster auto`` the cluster is named with what was wrong."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ti_slurm.backends import rest as rest_backend
from ti_slurm.backends.rest import RestBackend
from ti_slurm.core.errors import BackendError, ConfigError
from ti_slurm.submitting.spec import parse_spec

OPENAPI = {"paths": {"/slurm/v0.0.41/jobs": {}}}
Answer = Callable[[http.server.BaseHTTPRequestHandler], None]


@pytest.fixture
def fake_slurmrestd() -> Iterator[Callable[[dict[str, Answer]], str]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(answers: dict[str, Answer]) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                answers.get(self.path, json_answer({"errors": [{"description": "no such path"}]}, 404))(self)

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()


def json_answer(body: object, status: int = 200) -> Answer:
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def with_version(**more: Answer) -> dict[str, Answer]:
    return {"/openapi/v3": json_answer(OPENAPI), **more}


def backend_of(url: str) -> RestBackend:
    backend = RestBackend(url, "env", "alice")
    backend.client.tokens.environ = {"SLURM_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE5MDAwMDAwMDB9.c2ln"}
    return backend


def test_a_server_that_drips_its_answer_is_cut_off(fake_slurmrestd, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def drip(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(100):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.3)  # a byte every 0.3 s: no single read ever times out

    monkeypatch.setattr(rest_backend, "ANSWER_WITHIN", 1.5)
    url = fake_slurmrestd(with_version(**{"/slurm/v0.0.41/jobs": drip}))
    started = time.monotonic()
    with pytest.raises(BackendError, match=rf"slurmrestd at {url} did not answer within 1.5 s"):
        backend_of(url).user_queue()
    assert time.monotonic() - started < 6


def test_an_answer_over_the_cap_is_not_read(fake_slurmrestd, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def says_huge(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(3 << 30))  # 3 GiB, said
        handler.end_headers()
        handler.wfile.write(b"[" * 4096)

    def is_huge(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")  # no length: read to the end
        handler.end_headers()
        for _ in range(64):
            handler.wfile.write(b" " * 65536)

    monkeypatch.setattr(rest_backend, "ANSWER_BYTES_AT_MOST", 1 << 20)
    for answer in (says_huge, is_huge):
        url = fake_slurmrestd(with_version(**{"/slurm/v0.0.41/jobs": answer}))
        with pytest.raises(BackendError, match=r"answered GET /slurm/v0.0.41/jobs with more than 1 MiB: not read"):
            backend_of(url).user_queue()


@pytest.mark.parametrize(
    "body",
    [
        [1, 2, 3],  # not an object
        {"jobs": [1, 2]},  # jobs that are not objects
        {"jobs": "all of them"},
        {"jobs": [{"user_name": "alice", "job_id": None, "job_state": ["RUNNING"]}]},
        {"jobs": [{"user_name": "alice", "job_id": {"nested": 1}, "job_state": 5}]},
    ],
)
def test_an_answer_of_another_shape_is_one_line(fake_slurmrestd, body: object) -> None:  # type: ignore[no-untyped-def]
    url = fake_slurmrestd(with_version(**{"/slurm/v0.0.41/jobs": json_answer(body)}))
    with pytest.raises(BackendError) as refused:
        backend_of(url).user_queue()
    said = str(refused.value)
    assert said.startswith(f"slurmrestd at {url} answered") and "\n" not in said, said


def test_under_cluster_auto_an_odd_answer_is_named_with_what_was_wrong(fake_slurmrestd, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.clusters import Cluster, estimate_all

    monkeypatch.setenv("SLURM_JWT", "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE5MDAwMDAwMDB9.c2ln")
    answers = with_version(**{"/slurm/v0.0.41/nodes": json_answer({"nodes": [["node01"]]}),
                              "/slurm/v0.0.41/partitions": json_answer({"partitions": 7})})  # fmt: skip
    url = fake_slurmrestd(answers)
    started = time.monotonic()
    spec = parse_spec({"mode": "ddp", "nodes": 1, "command": "true", "partition": "debug"})
    (found,) = estimate_all(spec, [Cluster(name="odd", rest_url=url, rest_token="env")])
    assert found.start == "" and found.why.startswith(f"slurmrestd at {url} answered in a shape"), found.why
    assert time.monotonic() - started < 5  # it answered at once: not "no answer within 8 s"


def keep_alive_server(close_after: int) -> tuple[str, list[int], http.server.ThreadingHTTPServer]:
    """An HTTP/1.1 server that keeps connections open (each closed by it after ``close_after`` answers, as a
    server's idle or request limit does); ``opened`` counts the connections it accepted."""
    opened: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            opened.append(1)
            self.answered = 0

        def do_GET(self) -> None:
            body = OPENAPI if self.path == "/openapi/v3" else {"jobs": []}
            json_answer(body)(self)
            self.answered += 1
            if self.answered >= close_after:  # closed after the answer, unannounced: the client finds out later
                self.wfile.flush()
                self.connection.shutdown(2)
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", opened, server


def test_requests_share_one_kept_alive_connection() -> None:
    url, opened, server = keep_alive_server(close_after=1000)
    try:
        client = backend_of(url).client
        for _ in range(50):
            assert client.request("GET", "/slurm/v0.0.41/jobs") == {"jobs": []}
        assert len(opened) == 1
    finally:
        server.shutdown()


def test_a_kept_connection_the_server_closed_is_replaced_not_an_error() -> None:
    """The server closes each connection after 3 answers without saying so: the next request on it finds it
    closed and goes again on a new one (not read as slurmrestd 22.05's refusal of a token)."""
    url, opened, server = keep_alive_server(close_after=3)
    try:
        client = backend_of(url).client
        for _ in range(9):
            assert client.request("GET", "/slurm/v0.0.41/jobs") == {"jobs": []}
        assert len(opened) == 3
    finally:
        server.shutdown()


class ConnectProxy:
    """An HTTP proxy on loopback that tunnels CONNECT (as a site's squid does); ``tunnels`` lists each target."""

    def __init__(self) -> None:
        import socket

        self.tunnels: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.tunnel, args=(client,), daemon=True).start()

    def tunnel(self, client: object) -> None:
        import socket

        assert isinstance(client, socket.socket)
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        target = head.split()[1].decode()
        self.tunnels.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection(("127.0.0.1" if host == "slurmrestd.test" else host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pipe(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)


def test_https_proxy_is_honoured_and_no_proxy_and_loopback_bypass_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """slurmrestd behind a site's proxy: requests tunnel through ``https_proxy`` (CONNECT to slurmrestd's host and
    port) on a kept connection; a host ``no_proxy`` names, or this machine's loopback, is reached directly."""
    url, _, server = keep_alive_server(close_after=1000)
    proxy = ConnectProxy()
    port = url.rsplit(":", 1)[1]
    try:
        monkeypatch.setenv("http_proxy", proxy.url)
        client = backend_of(f"http://slurmrestd.test:{port}").client
        for _ in range(3):
            assert client.request("GET", "/slurm/v0.0.41/jobs") == {"jobs": []}
        assert proxy.tunnels == [f"slurmrestd.test:{port}"]  # one tunnel, kept
        assert backend_of(url).client.proxy == ""  # 127.0.0.1: never through a proxy
        monkeypatch.setenv("no_proxy", ".test")
        assert backend_of(f"http://slurmrestd.test:{port}").client.proxy == ""
    finally:
        server.shutdown()
        proxy.sock.close()


def test_an_https_slurmrestd_signed_by_the_sites_own_ca_is_trusted_with_ca_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A certificate of the site's own CA: refused as unverified without ``ca_file``, trusted with it; a CA
    file that cannot be read is one line naming the key."""
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)  # fmt: skip
    url, _, server = keep_alive_server(close_after=1000)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    https = url.replace("http://127.0.0.1", "https://localhost")
    try:
        with pytest.raises(BackendError, match=r"does not answer: .*CERTIFICATE_VERIFY_FAILED"):
            backend_of(https).client.request("GET", "/slurm/v0.0.41/jobs")
        trusted = RestBackend(https, "env", "alice", ca_file=str(cert)).client
        trusted.tokens.environ = backend_of(https).client.tokens.environ
        assert trusted.request("GET", "/slurm/v0.0.41/jobs") == {"jobs": []}
        missing = RestBackend(https, "env", "alice", ca_file=str(tmp_path / "nope.pem")).client
        missing.tokens.environ = trusted.tokens.environ
        with pytest.raises(ConfigError, match=r"^rest_ca_file: .*: cannot read the CA bundle: No such file"):
            missing.request("GET", "/slurm/v0.0.41/jobs")
    finally:
        server.shutdown()
