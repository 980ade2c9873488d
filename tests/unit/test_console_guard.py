"""The console's gate (pure, without a server): the token is traded for a session that is not the token and is
this console's alone, sessions end and rotate, a redirect stays on the console, the kernel tells whose a
loopback client is, and a console picks a port nobody holds on either loopback address. The real thing (two
users, Debian's chromium) is in tests/local/test_shared_login.py."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ti_slurm.ui import guard as gate
from ti_slurm.ui.guard import Guard, socket_owner, table_owner


def ask(guard: Guard, path: str = "/api/jobs", query: str = "", cookie: str = "") -> Response:
    headers = [(b"host", f"127.0.0.1:{guard.port}".encode())]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query.encode(), "headers": headers,
             "client": ("testclient", 5)}  # fmt: skip

    async def answer(request: Request) -> Response:
        return PlainTextResponse("the jobs")

    return asyncio.run(guard(Request(scope), answer))


def session_cookie(response: Response) -> str:
    header = response.headers["set-cookie"]
    return header.split(";")[0]


def test_the_token_is_traded_for_a_session_that_is_not_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard(8642)
    first = ask(guard, "/", f"token={guard.token}")
    assert first.status_code == 303 and first.headers["location"] == "/"
    cookie = session_cookie(first)
    name, value = cookie.split("=", 1)
    assert name.startswith("ti_slurm_ui_8642_") and value != guard.token
    assert guard.token not in first.headers["set-cookie"]
    assert ask(guard, cookie=cookie).status_code == 200
    assert ask(guard, cookie=f"{name}={guard.token}").status_code == 403  # the token is no session
    assert ask(Guard(8642), cookie=cookie).status_code == 403  # another console (or this one restarted)
    assert ask(guard, "/", "token=wrong").status_code == 403


def test_a_redirect_stays_on_the_console() -> None:
    guard = Guard(8642)
    kept_paths = (("//evil.example/", "/evil.example/"), ("/\\evil.example", "/%5Cevil.example"), ("/job/1", "/job/1"))
    for path, kept in kept_paths:
        assert ask(guard, path, f"token={guard.token}").headers["location"] == kept  # a path here, never a host


def test_a_session_ends_unused_and_rotates_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(gate.time, "monotonic", lambda: now[0])
    guard = Guard(8642)
    cookie = session_cookie(ask(guard, "/", f"token={guard.token}"))
    now[0] += gate.ROTATE + 1
    rotated = ask(guard, cookie=cookie)
    assert rotated.status_code == 200 and session_cookie(rotated) != cookie  # a new id ...
    now[0] += gate.GRACE - 5
    assert ask(guard, cookie=cookie).status_code == 200  # ... the old one still good a moment
    now[0] += 10
    assert ask(guard, cookie=cookie).status_code == 403  # and then not
    fresh = session_cookie(rotated)
    assert ask(guard, cookie=fresh).status_code == 200
    now[0] += gate.SESSION_IDLE + 1
    assert ask(guard, cookie=fresh).status_code == 403  # unused too long: open the printed URL again


def test_the_kernel_says_whose_a_loopback_client_is() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            with accepted:
                assert socket_owner(client.getsockname(), server.getsockname()) == os.getuid()
                assert table_owner(client.getsockname()[1], server.getsockname()[1]) == os.getuid()  # the fallback
    assert socket_owner(("127.0.0.1", 1), ("127.0.0.1", 2)) is None


def test_the_console_takes_a_port_nobody_holds_on_either_loopback_address() -> None:
    from ti_slurm.core.choices import CONSOLE_PORT
    from ti_slurm.core.errors import ConfigError
    from ti_slurm.ui.app import console_port

    held = []
    try:
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            s = socket.socket(family)
            port = CONSOLE_PORT + len(held)
            try:
                s.bind((address, port))
            except OSError:
                pytest.skip(f"{address}:{port} is in use here")
            s.listen()
            held.append(s)
        chosen = console_port("127.0.0.1", None)
        assert chosen >= CONSOLE_PORT + 2  # 8642 held on 127.0.0.1, 8643 on ::1 only: both skipped
        with pytest.raises(ConfigError, match=r"--port: 8643: cannot listen there \(::1: Address already in use\)"):
            console_port("127.0.0.1", CONSOLE_PORT + 1)
    finally:
        for s in held:
            s.close()


def test_the_consoles_json_holds_nan_inf_and_text_that_was_not_utf8() -> None:
    import json

    from ti_slurm.ui.app import ConsoleJSON

    body = ConsoleJSON({"lr": "\udcff0.1", "loss": [[1, float("nan")], [2, float("inf")], [3, -float("inf")]]}).body
    assert json.loads(body) == {"lr": "\udcff0.1", "loss": [[1, "NaN"], [2, "Infinity"], [3, "-Infinity"]]}


def test_a_console_restarted_on_its_port_may_take_it_again_at_once() -> None:
    """A console just stopped leaves its closed connections in TIME_WAIT: its port is free again at once."""
    from ti_slurm.ui.app import console_port

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server closes first: its side waits in TIME_WAIT
        client.close()
    assert console_port("127.0.0.1", port) == port
