"""Who may use the console: the one who holds its token.

``ti-slurm ui`` prints a URL with a fresh secret token (as Jupyter does). The first request that brings it
gets a cookie (HttpOnly, SameSite=Strict) and is redirected to the same page without it, so the token does
not stay in the address bar or the history; every later request must bring the cookie. Anything that
changes a job (a POST) must also bring the page's CSRF token in a header and come from the console's own
origin. A request for another Host (DNS rebinding) is refused. Another user on the same login node, who can
reach the port but has neither, gets a 403 and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

COOKIE = "ti_slurm_ui"
REFUSED = "forbidden: open the URL that ti-slurm ui printed (it holds the console's token)\n"


class Guard:
    """The console's token, its CSRF token, and the hosts it answers for."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()
        self.port = port
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?{urlencode({'token': self.token})}"

    def holds_token(self, request: Request) -> bool:
        given = request.cookies.get(COOKIE, "") or request.headers.get("authorization", "").removeprefix("token ")
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.headers.get("host", "") not in self.hosts:
            return PlainTextResponse("forbidden: unknown host\n", status_code=403)
        offered = request.query_params.get("token")
        if offered is not None and request.method == "GET":
            if not hmac.compare_digest(offered.encode(), self.token.encode()):
                return PlainTextResponse(REFUSED, status_code=403)
            page = RedirectResponse(request.url.path, status_code=303)
            page.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
            return page
        if not self.holds_token(request):
            return PlainTextResponse(REFUSED, status_code=403)
        if request.method not in ("GET", "HEAD") and not self.same_origin_with_csrf(request):
            return PlainTextResponse("forbidden: a change needs the page's CSRF token\n", status_code=403)
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    def same_origin_with_csrf(self, request: Request) -> bool:
        origin = request.headers.get("origin", "")
        if origin and origin.removeprefix("http://") not in self.hosts:
            return False
        return hmac.compare_digest(request.headers.get("x-csrf-token", "").encode(), self.csrf.encode())


SECURITY_HEADERS = {
    # scripts and styles from the console itself only: no inline script, nothing from elsewhere
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
