"""Who may use the console: the one who holds its token, from their own account.

``ti-slurm ui`` prints a URL with a fresh secret token (as Jupyter does). The first request that brings it is
given a session and redirected to the same page without the token, so the token stays in the URL the console
printed: not in the address bar, the history, a cookie, a Referer or a redirect.

A browser sends a ``127.0.0.1`` cookie to every port of ``127.0.0.1``: another user's server on another
loopback port receives it. So the session cookie is worth nothing off its own console:

- its value is a random session id, not the token, known only to this console process (a restart ends it);
- its name holds the console's port and a per-process instance id (two consoles in one browser each keep
  their own; another console never reads it as its own);
- a session lives :data:`SESSION_IDLE` seconds without use and :data:`SESSION_MOST` at most, and is
  rotated every :data:`ROTATE` seconds (the old id is good for :data:`GRACE` seconds more, for the requests
  already under way);
- and on the loopback address every request must come from a process of this console's own user (root
  aside): the kernel's socket table says whose the client's socket is, so a cookie (or a token) that
  leaked to another user is refused when that user replays it.

Anything that changes a job (a POST) must also bring the page's CSRF token in a header and come from the
console's own origin. A request for another Host (DNS rebinding) is refused. Another user on the same login
node gets a 403 and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

REFUSED = "forbidden: open the URL that ti-slurm ui printed (it holds the console's token)\n"
NOT_YOURS = "forbidden: this console answers its own user only\n"
SESSION_IDLE = 1800.0  # seconds a session lives unused (a closed tab: open the printed URL again)
SESSION_MOST = 12 * 3600.0  # seconds a session lives at most, however used
ROTATE = 600.0  # seconds after which a session in use is given a new id
GRACE = 60.0  # seconds a rotated id still works (requests sent before the new cookie came)
SESSIONS_AT_MOST = 64  # live sessions (browsers, tabs after a restart): the oldest go beyond
LOOPBACK = ("127.", "::1", "::ffff:127.")


class Guard:
    """The console's token, its sessions, its CSRF token, and the hosts it answers for."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()
        self.port = port
        self.cookie = f"ti_slurm_ui_{port}_{secrets.token_hex(4)}"
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        # session id -> (when given, when last used, until when it works: a rotated one only for GRACE more)
        self.sessions: dict[str, tuple[float, float, float]] = {}
        self.uid = os.getuid()
        self.public = ""  # the machine's name in the URL when the console listens beyond the loopback address

    def url(self, path: str = "/") -> str:
        where = f"[{self.public}]" if ":" in self.public else self.public or "127.0.0.1"
        return f"http://{where}:{self.port}{path}?{urlencode({'token': self.token})}"

    # -- sessions ---------------------------------------------------------------------------------------------
    def new_session(self, now: float) -> str:
        session = secrets.token_urlsafe(32)
        self.sessions[session] = (now, now, now + SESSION_MOST)
        while len(self.sessions) > SESSIONS_AT_MOST:
            del self.sessions[next(iter(self.sessions))]
        return session

    def session_of(self, request: Request, now: float) -> str | None:
        """The request's live session, touched; ``None`` when it brings none (or one gone stale)."""
        session = request.cookies.get(self.cookie, "")
        held = self.sessions.get(session) if session else None
        if held is None:
            return None
        given, used, until = held
        if now > until or now - used > SESSION_IDLE:
            del self.sessions[session]
            return None
        self.sessions[session] = (given, now, until)
        return session

    def holds_token(self, request: Request) -> bool:
        """A script's request may bring the token itself in its Authorization header (``token <token>``)."""
        given = request.headers.get("authorization", "").removeprefix("token ")
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def set_session(self, response: Response, session: str) -> None:
        response.set_cookie(self.cookie, session, httponly=True, samesite="strict", path="/", max_age=int(SESSION_MOST))

    # -- the gate ---------------------------------------------------------------------------------------------
    async def __call__(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.headers.get("host", "") not in self.hosts:
            return PlainTextResponse("forbidden: unknown host\n", status_code=403)
        if not self.from_own_user(request):
            return PlainTextResponse(NOT_YOURS, status_code=403)
        now = time.monotonic()
        offered = request.query_params.get("token")
        if offered is not None and request.method == "GET":
            if not hmac.compare_digest(offered.encode(), self.token.encode()):
                return PlainTextResponse(REFUSED, status_code=403)
            page = RedirectResponse(same_site_path(request.url.path), status_code=303)
            self.set_session(page, self.new_session(now))
            return page
        session = self.session_of(request, now)
        if session is None and not self.holds_token(request):
            return PlainTextResponse(REFUSED, status_code=403)
        if request.method not in ("GET", "HEAD") and not self.same_origin_with_csrf(request):
            return PlainTextResponse("forbidden: a change needs the page's CSRF token\n", status_code=403)
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        if session is not None:
            self.rotate(session, response, now)
        return response

    def rotate(self, session: str, response: Response, now: float) -> None:
        """A session in use for ROTATE seconds gets a new id in ``response``; the old one works GRACE more."""
        held = self.sessions.get(session)  # (another request may have ended it meanwhile)
        if held is None:
            return
        given, used, until = held
        if now - given > ROTATE and until > now + GRACE:  # (a rotated one ends within GRACE: not again)
            self.sessions[session] = (given, used, now + GRACE)
            self.set_session(response, self.new_session(now))

    def from_own_user(self, request: Request) -> bool:
        client = request.client
        return client is None or self.own_peer(client.host, client.port)

    def own_peer(self, host: str, port: int) -> bool:
        """Whether a client is a process of this console's user (or root): asked of the kernel for a client on
        the loopback address; a client from elsewhere (``--bind``) is the token's business alone."""
        if not host.startswith(LOOPBACK):
            return True
        host = host.removeprefix("::ffff:")  # an IPv4 client of an IPv6 listener: its own socket is IPv4
        server = "::1" if ":" in host else "127.0.0.1"
        # asked anew for every connection and request (80 µs): a remembered answer would outlive its socket, and
        # another user may bind the very port a closed connection of this user's had
        return socket_owner((host, port), (server, self.port)) in (self.uid, 0)

    def same_origin_with_csrf(self, request: Request) -> bool:
        origin = request.headers.get("origin", "")
        if origin and origin.removeprefix("http://") not in self.hosts:
            return False
        return hmac.compare_digest(request.headers.get("x-csrf-token", "").encode(), self.csrf.encode())


CONNECTIONS_AT_MOST = 256  # open connections at once (a browser keeps about six per tab)
WHOLE_REQUEST_WITHIN = 10.0  # seconds a connection has to send a whole request (a slow or half-open one: closed)


class Doorman:
    """The connections the console takes: from another user on the loopback address, none (closed as they
    come, before a byte is read); from anyone, at most CONNECTIONS_AT_MOST at once; and each must bring a whole
    request within WHOLE_REQUEST_WITHIN seconds. Each kind of refusal is said once, as one line."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.open = 0
        self.said: set[str] = set()

    def admit(self, peer: object) -> str:
        """Why a new connection is refused ("" to take it)."""
        if isinstance(peer, tuple) and len(peer) >= 2 and not self.guard.own_peer(str(peer[0]), int(peer[1])):
            return "connections from another user's processes"  # (a cookie or token that leaked is no use)
        if self.open >= CONNECTIONS_AT_MOST:
            return f"connections beyond {CONNECTIONS_AT_MOST} at once"
        return ""

    def refused(self, kind: str) -> None:
        if kind not in self.said:
            self.said.add(kind)
            import sys

            print(f"ti-slurm console: refusing {kind} (said once)", file=sys.stderr, flush=True)

    def protocol(self) -> type:
        """uvicorn's HTTP protocol, behind this doorman."""
        from uvicorn.protocols.http.h11_impl import H11Protocol

        doorman = self

        class Guarded(H11Protocol):
            deadline: Any = None
            counted = False

            def connection_made(self, transport: Any) -> None:
                super().connection_made(transport)
                why = doorman.admit(transport.get_extra_info("peername"))
                if why:  # said in a fixed answer (nothing of the request is read), then closed
                    doorman.refused(why)
                    text = f"forbidden: this console takes no {why}\n".encode()
                    transport.write(b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\nconnection: close\r\n"
                                    b"content-length: %d\r\n\r\n%s" % (len(text), text))  # fmt: skip
                    transport.close()
                    return
                doorman.open += 1
                self.counted = True
                self.deadline = self.loop.call_later(WHOLE_REQUEST_WITHIN, self.too_slow)

            def too_slow(self) -> None:
                if self.cycle is None and not self.transport.is_closing():  # no whole request yet
                    doorman.refused(f"connections that send no whole request within {WHOLE_REQUEST_WITHIN:g} s")
                    self.transport.abort()

            def handle_events(self) -> None:
                super().handle_events()
                if self.cycle is not None and getattr(self, "deadline", None) is not None:
                    self.deadline.cancel()
                    self.deadline = None

            def on_response_complete(self) -> None:
                super().on_response_complete()
                if not self.transport.is_closing():  # the next request on this connection: its own deadline
                    self.deadline = self.loop.call_later(WHOLE_REQUEST_WITHIN, self.too_slow)

            def connection_lost(self, exc: Exception | None) -> None:
                if getattr(self, "counted", False):
                    doorman.open -= 1
                    self.counted = False
                if getattr(self, "deadline", None) is not None:
                    self.deadline.cancel()
                super().connection_lost(exc)

        return Guarded


def same_site_path(path: str) -> str:
    """``path`` as a path of this site: ``//evil.example/`` would be read by the browser as another host."""
    return "/" + path.lstrip("/\\")


def socket_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the TCP socket at ``client`` connected to ``server`` (both on this machine), or ``None``
    when the kernel knows none: one ``sock_diag`` question for that very socket (what ``ss`` asks), else a
    look through ``/proc/net/tcp`` where netlink is not to be had."""
    try:
        return diag_owner(client, server)
    except OSError:
        return table_owner(client[1], server[1])


def diag_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    import socket
    import struct

    family = socket.AF_INET6 if ":" in client[0] else socket.AF_INET
    src, dst = (socket.inet_pton(family, host).ljust(16, b"\0") for host in (client[0], server[0]))
    # inet_diag_req_v2: family, protocol, ext, pad, states; inet_diag_sockid: sport, dport (big-endian), src,
    # dst, interface, cookie (none: 0xffffffff twice)
    request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
    request += struct.pack(">HH", client[1], server[1]) + src + dst + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    header = struct.pack("=IHHII", 16 + len(request), 20, 1, 1, 0)  # SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4) as diag:  # NETLINK_SOCK_DIAG
        diag.settimeout(1.0)
        diag.send(header + request)
        answer = diag.recv(8192)
    length, kind = struct.unpack_from("=IH", answer)
    if kind == 2:  # NLMSG_ERROR: no such socket (ENOENT), or the question is not understood
        error = -struct.unpack_from("=i", answer, 16)[0]
        if error == 2:
            return None
        raise OSError(error, "sock_diag refused the question")
    return int(struct.unpack_from("=I", answer, 16 + 64)[0]) if length >= 16 + 72 else None  # idiag_uid


def table_owner(local_port: int, remote_port: int) -> int | None:
    want = (f":{local_port:04X}", f":{remote_port:04X}")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 7 and fields[1].endswith(want[0]) and fields[2].endswith(want[1]):
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


SECURITY_HEADERS = {
    # scripts and styles from the console itself only: no inline script, nothing from elsewhere
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
