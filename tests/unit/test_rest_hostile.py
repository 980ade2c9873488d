"""slurmrestd's answers are not trusted: a fake server on the loopback address (a real HTTP server, a thread of
the test) that drips its answer, sends gigabytes, or answers in shapes of its own. Each is one line naming the
server, soon, with memory bounded; under ``--cluster auto`` the cluster is named with what was wrong."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ti_slurm.backends import rest as rest_backend
from ti_slurm.backends.rest import RestBackend
from ti_slurm.core.errors import BackendError
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
