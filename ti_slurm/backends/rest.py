"""REST backend: submit, follow and cancel through slurmrestd, with no Slurm command and no login shell.

For services and notebooks that reach Slurm only through slurmrestd and a JWT (a JupyterHub, a CI runner, a
training portal, ``ti-slurm ui`` run as a service). The site config names the server (``rest_url``:
``http://host:6820``, ``https://...`` or ``unix:/path/to/socket``) and where tokens come from
(``rest_token``); the job's directory and record are what the other backends make, read from the shared
filesystem as the Slurm backend reads them.

- versions: found, not assumed. The server's OpenAPI document says which it serves; the newest that
  :mod:`ti_slurm.slurm.rest` knows is used (and remembered for an hour in the shared cache).
- tokens (:class:`Tokens`): ``SLURM_JWT`` from the environment (as ``scontrol token`` prints it), a file, or
  a command (``scontrol token``, maybe over ``ssh``) run again before the token expires. A token goes only
  into the request's header: never into the job's environment (``SLURM_JWT`` is not passed on), a record,
  a log, an error or a process's arguments.
- status: one ``GET .../jobs`` for all of the user's jobs (shared between callers as the CLI's queue is).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from ti_slurm.backends.base import ControllerQueue, JobInfo, StartEstimate, SubmitsInOneStep, make_output_dir
from ti_slurm.backends.slurm import add_queue_entry
from ti_slurm.core.environ import job_environment
from ti_slurm.core.errors import BackendError, ConfigError, SubmissionError, TiSlurmError
from ti_slurm.core.files import open_regular
from ti_slurm.core.hostlist import expand
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.slurm import rest
from ti_slurm.slurm.text import array_task_ids, token_from_text
from ti_slurm.transports import LocalTransport, run_capped

if TYPE_CHECKING:
    import http.client

TIMEOUT = 15.0  # seconds a request may take
RENEW_BEFORE = 120  # seconds before a token expires that a new one is asked for (a short-lived one's: a fifth)
VERSION_MAX_AGE = 3600.0  # seconds the version a server serves is remembered (it changes with an upgrade)
DROPPED = 0  # the status of a request whose connection closed with no answer
NEW_TOKEN = "get one with `scontrol token lifespan=3600` and set SLURM_JWT (or the site config's rest_token)"


def token_renewal(token: str) -> float | None:
    """When to get a new token in place of ``token``: before its ``exp``, by :data:`RENEW_BEFORE` seconds or a
    fifth of its life if that is shorter; ``None`` when it does not say when it expires. The signature is not
    checked: the server does that; this only tells when to renew."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        expires = float(claims["exp"])
        life = expires - float(claims.get("iat", expires - 5 * RENEW_BEFORE))
    except (IndexError, KeyError, ValueError, TypeError):
        return None
    return expires - min(RENEW_BEFORE, life / 5)


TOKEN_BYTES_AT_MOST = 64 * 1024  # what a token source may give (a JWT is a few hundred bytes)
TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]+")  # the characters a bearer token has (RFC 6750's token68)
JWT_SHAPED = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]*)?")
SHOWN_AS = "<token>"


def without_tokens(text: str, *known: str) -> str:
    """``text`` fit to be shown: the ``known`` tokens, anything shaped like a JWT and a ``SLURM_JWT=`` value
    replaced by ``<token>``. Every line about tokens, and every answer of slurmrestd that reaches a message,
    goes through it: no error, reason, record or page holds token material."""
    for token in known:
        if len(token) >= 8:
            text = text.replace(token, SHOWN_AS)
    text = JWT_SHAPED.sub(SHOWN_AS, text)
    return re.sub(r"(SLURM_JWT=)\S+", r"\1" + SHOWN_AS, text)


class Tokens:
    """Where tokens come from, as the site config's ``rest_token`` says: ``env`` (``SLURM_JWT``), ``file:PATH``,
    ``command:ARGV`` (run again before the token expires), or ``auto``: ``SLURM_JWT`` when set, else
    ``scontrol token lifespan=3600`` on this machine."""

    def __init__(self, source: str, environ: Mapping[str, str] | None = None) -> None:
        self.source = source or "auto"
        self.environ = os.environ if environ is None else environ
        self.token = ""
        self.renew_at: float | None = None
        self.warned = False  # of a token file that others may read: once

    def where(self) -> str:
        kind, _, rest_of = self.source.partition(":")
        if kind == "file":
            return f"the file {rest_of}"
        if kind == "command":
            return f"`{without_tokens(rest_of)}`"
        return "SLURM_JWT" if self.source == "env" or self.environ.get("SLURM_JWT") else "`scontrol token`"

    def current(self) -> str:
        """A token good for the next request: the one held, or a fresh one when it expires soon."""
        if self.token and (self.renew_at is None or time.time() < self.renew_at):
            return self.token
        return self.renew()

    def renew(self) -> str:
        kind, _, rest_of = self.source.partition(":")
        if kind == "env" or (kind == "auto" and self.environ.get("SLURM_JWT")):
            token = self.environ.get("SLURM_JWT", "")
        elif kind == "file":
            token = token_from_text(self.from_file(os.path.expanduser(rest_of)))
        else:
            token = token_from_text(self.from_command(self.argv(kind, rest_of)))
        if not token:
            raise BackendError(f"slurmrestd needs a token and {self.where()} gave none: {NEW_TOKEN}")
        if not TOKEN.fullmatch(token):
            raise BackendError(
                f"{self.where()} gave no token: what it gave holds characters no token has"
                f" (binary output?); {NEW_TOKEN}"
            )
        self.token, self.renew_at = token, token_renewal(token)
        return token

    def argv(self, kind: str, rest_of: str) -> list[str]:
        if kind != "command":
            return ["scontrol", "token", "lifespan=3600"]
        try:
            argv = shlex.split(rest_of)
        except ValueError as exc:  # an unclosed quote
            raise ConfigError("rest_token", without_tokens(self.source), f"its command cannot be read: {exc}") from None
        if not argv:
            raise ConfigError("rest_token", self.source, "command: names no command (command:scontrol token ...)")
        return argv

    def from_file(self, path: str) -> str:
        """The text of the token file: a regular file (a FIFO or device there is refused, never waited on), of a
        token's size; a warning when others may read it (as ssh warns of a key file)."""
        import stat
        import warnings

        try:
            with open_regular(path) as fh:
                mode = os.fstat(fh.fileno()).st_mode
                data = fh.read(TOKEN_BYTES_AT_MOST + 1)
        except OSError as exc:
            why = exc.strerror or "not a regular file"
            raise ConfigError("rest_token", self.source, f"cannot read the token: {why}") from None
        if len(data) > TOKEN_BYTES_AT_MOST:
            raise ConfigError("rest_token", self.source, f"the file is over {TOKEN_BYTES_AT_MOST} bytes: no token")
        if mode & 0o077 and not self.warned:
            self.warned = True
            warnings.warn(
                f"rest_token: {path} has mode {stat.filemode(mode)}: others may read your token; chmod 600 it",
                RuntimeWarning,
                stacklevel=4,
            )
        return data.decode(errors="replace")

    def from_command(self, argv: list[str]) -> str:
        """What the token command printed; a failure says its last line of error output, never its output
        (which may hold the token)."""
        shown = without_tokens(shlex.join(argv))
        try:
            code, out, err = run_capped(argv, TOKEN_BYTES_AT_MOST, TIMEOUT)
        except OSError as exc:
            raise BackendError(f"getting a token with `{shown}` failed: {exc.strerror}") from None
        except BackendError as exc:
            raise BackendError(f"getting a token with `{shown}` failed: {exc}") from None
        if code != 0:
            said = err.decode(errors="replace").strip().splitlines()
            why = without_tokens(said[-1][:300]) if said else f"exit {code}"
            raise BackendError(f"getting a token with `{shown}` failed: {why}")
        return out.decode(errors="replace")

    def renewable(self) -> bool:
        """Whether asking again may give another token (a refused one from the environment stays refused)."""
        kind = self.source.partition(":")[0]
        return kind in ("file", "command") or (kind == "auto" and not self.environ.get("SLURM_JWT"))


def unix_connection(path: str, timeout: float) -> http.client.HTTPConnection:
    """HTTP over slurmrestd's unix socket."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            self.sock.connect(path)

    return UnixConnection("localhost", timeout=timeout)


class RestClient:
    """Requests to one slurmrestd, with the user's token; answers as JSON, failures as one line."""

    def __init__(self, url: str, tokens: Tokens, user: str, ca_file: str = "") -> None:
        if not url:
            raise ConfigError(
                "rest_url",
                url,
                "the rest backend needs slurmrestd's address (http://host:6820 or"
                " unix:/path) in the site config or user config",
            )
        self.url, self.tokens, self.user = url.rstrip("/"), tokens, user
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https", "unix"):
            raise ConfigError("rest_url", url, "expected http://host:port, https://host:port or unix:/path")
        self.parts = parts
        self.ca_file = ca_file  # the CA bundle that signs an https slurmrestd (else the system's, or SSL_CERT_FILE)
        self._idle: list[http.client.HTTPConnection] = []  # kept-alive connections, each free for a request
        self._idle_lock = threading.Lock()

    @functools.cached_property
    def proxy(self) -> str:
        """The proxy between here and slurmrestd ("" for none), asked of the environment at the first request
        (a ``list`` that takes a shared answer imports no HTTP at all)."""
        return "" if self.parts.scheme == "unix" else proxy_for(self.parts.scheme, self.parts.hostname or "")

    def connection(self) -> http.client.HTTPConnection:
        """A new connection: to the Unix socket, to slurmrestd, or (``HTTPS_PROXY``/``HTTP_PROXY``, unless
        ``NO_PROXY`` names it) to the proxy, tunnelled through it to slurmrestd (CONNECT)."""
        import http.client

        if self.parts.scheme == "unix":
            return unix_connection(self.parts.path, TIMEOUT)
        where = urlsplit(self.proxy).netloc if self.proxy else self.parts.netloc
        conn: http.client.HTTPConnection
        if self.parts.scheme == "https":
            import ssl

            try:
                context = ssl.create_default_context(cafile=os.path.expanduser(self.ca_file) if self.ca_file else None)
            except (OSError, ssl.SSLError) as exc:
                why = f"cannot read the CA bundle: {getattr(exc, 'strerror', None) or exc}"
                raise ConfigError("rest_ca_file", self.ca_file, why) from None
            conn = http.client.HTTPSConnection(where, timeout=TIMEOUT, context=context)
        else:
            conn = http.client.HTTPConnection(where, timeout=TIMEOUT)
        if self.proxy:
            conn.set_tunnel(self.parts.hostname or "", self.parts.port or (443 if self.parts.scheme == "https" else 80))
        return conn

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, auth: bool = True) -> Any:
        """The JSON answer of one request (renewing a refused token once when it can be renewed)."""
        for retry in (False, True):
            status, payload = self.send(method, path, body, auth)
            if status == DROPPED and auth and retry:  # Slurm 22.05 drops the connection of a refused token
                raise BackendError(
                    f"slurmrestd at {self.url} closed the connection without an answer: it refuses the token from"
                    f" {self.tokens.where()} (expired or revoked), or it failed; {NEW_TOKEN}"
                )
            if status == DROPPED:
                self.tokens.token = "" if self.tokens.renewable() else self.tokens.token
                continue
            if not auth or not refused_token(status, payload):
                break
            if retry or not self.tokens.renewable():
                raise BackendError(
                    f"slurmrestd at {self.url} refused the token from {self.tokens.where()}"
                    f" (expired or revoked): {NEW_TOKEN}"
                )
            self.tokens.token = ""  # ask for a fresh one
        if status >= 400:  # (a 2xx answer may carry notes as errors: a held job's "pending scheduler release")
            said = without_tokens(rest.error_text(payload), self.tokens.token) if isinstance(payload, dict) else ""
            raise BackendError(f"slurmrestd {method} {path} failed: {said or f'HTTP {status}'}")
        if not isinstance(payload, dict):
            raise BackendError(
                f"slurmrestd at {self.url} answered {method} {path} with a JSON"
                f" {type(payload).__name__}, not an object: is it slurmrestd?"
            )
        return payload

    def send(self, method: str, path: str, body: Mapping[str, Any] | None, auth: bool) -> tuple[int, Any]:
        """One request's status and JSON, a GET on a kept-alive connection when one is idle (a connection the
        server closed while idle is no answer: the GET goes again on a new one)."""
        headers = {"Accept": "application/json"}
        if auth:
            headers.update({"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.tokens.current()})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        target = self.parts.path + path if self.parts.scheme != "unix" else path
        while True:
            # a submit or a cancel goes on a new connection: one the server dropped after doing it is never sent twice
            conn, reused = self.take() if method == "GET" else (self.connection(), False)
            try:
                return self.exchange(conn, method, target, data, headers, path)
            except StaleConnection:
                if not reused:
                    return DROPPED, {}

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection (and True), else a new one."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop(), True
        return self.connection(), False

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._idle_lock:
            if len(self._idle) < IDLE_AT_MOST:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the kept-alive connections."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def exchange(
        self, conn: http.client.HTTPConnection, method: str, target: str, data: bytes | None,
        headers: dict[str, str], path: str,
    ) -> tuple[int, Any]:  # fmt: skip
        import http.client

        late: Deadline | None = None
        kept = False
        try:
            if conn.sock is None:
                conn.connect()
            late = Deadline(conn.sock, ANSWER_WITHIN)  # a server that drips its answer is cut off, however it drips
            conn.request(method, target, data, headers)
            answer = conn.getresponse()
            raw = read_capped(answer, ANSWER_BYTES_AT_MOST)
            if late.passed:  # cut off: what was read is not the whole answer
                raise OSError("cut off")
            kept = not answer.will_close
        except AnswerTooLarge:
            raise BackendError(
                f"slurmrestd at {self.url} answered {method} {path} with more than"
                f" {ANSWER_BYTES_AT_MOST >> 20} MiB: not read"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            if late is not None and late.passed:
                raise BackendError(f"slurmrestd at {self.url} did not answer within {ANSWER_WITHIN:g} s") from None
            if isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError):
                raise StaleConnection from None
            said = without_tokens(str(exc), self.tokens.token)
            raise BackendError(f"slurmrestd at {self.url} does not answer: {said}") from None
        finally:
            if late is not None:
                late.cancel()
            if kept:
                self.give_back(conn)
            else:
                conn.close()
        try:
            return answer.status, json.loads(raw) if raw.strip() else {}
        except ValueError:
            return answer.status, {"errors": [{"description": raw[:200].decode(errors="replace").strip()}]}


def proxy_for(scheme: str, host: str) -> str:
    """The proxy a request to ``host`` goes through: the environment's (``https_proxy``, ``http_proxy``,
    ``all_proxy``, as curl reads them), none when ``no_proxy`` names the host or the host is this machine's
    loopback (no proxy reaches it)."""
    import ipaddress
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all", "")
    if not proxy or host == "localhost" or urllib.request.proxy_bypass(host):
        return ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return ""
    return proxy if "://" in proxy else f"http://{proxy}"


class StaleConnection(Exception):
    """The connection closed with no answer: the server's idle timeout on a kept one, else (a new one) the
    server's refusal of the request (Slurm 22.05 drops the connection of a refused token)."""


IDLE_AT_MOST = 4  # kept-alive connections to one slurmrestd (the console's threads each hold one at a time)


ANSWER_WITHIN = 60.0  # seconds a whole request may take (each read: TIMEOUT)
ANSWER_BYTES_AT_MOST = 512 << 20  # an answer larger than this is not read (a 100,000-job queue is ~100 MiB)


class AnswerTooLarge(Exception):
    pass


def read_capped(answer: http.client.HTTPResponse, cap: int) -> bytes:
    """The answer's body, refused (:class:`AnswerTooLarge`) as soon as it says or shows itself over ``cap``."""
    length = answer.getheader("content-length")
    if length and length.isdigit() and int(length) > cap:
        raise AnswerTooLarge
    chunks, size = [], 0
    while chunk := answer.read(1 << 20):
        size += len(chunk)
        if size > cap:
            raise AnswerTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Deadline:
    """Shut a connection's socket once ``seconds`` have passed: every read then ends at once."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.sock, self.passed = sock, False
        self.timer = threading.Timer(seconds, self.cut)
        self.timer.daemon = True
        self.timer.start()

    def cut(self) -> None:
        self.passed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self.timer.cancel()


REFUSED_WORDS = ("auth", "token", "credential", "zero bytes were transmitted")


def users_rest_table() -> dict[str, str]:
    """The user config's ``[rest]`` keys that are set; {} without a user config (its models, pydantic, are then
    never loaded: `list` and `status` through slurmrestd stay light)."""
    from ti_slurm.core.paths import user_config_path

    if not os.path.exists(user_config_path()):
        return {}
    from ti_slurm.submitting.userconfig import read_user_config

    own = read_user_config().rest
    return {key: value for key, value in (("url", own.url), ("token", own.token), ("ca_file", own.ca_file)) if value}


def as_list(value: object) -> list[object]:
    """A node's state as a list: 22.05 says ``"idle"``, 25.11 ``["IDLE"]``."""
    return list(value) if isinstance(value, list) else [value]


def queue_entries(jobs: list[Mapping[str, Any]], dialect: rest.Dialect, backend: str) -> dict[str, JobInfo]:
    """The queue entries of slurmrestd's jobs (an array's pending tasks each their own)."""
    out: dict[str, JobInfo] = {}
    read = dialect.read_number

    def order(job: Mapping[str, Any]) -> tuple[int, int]:
        return (read(job.get("het_job_id")) or int(job["job_id"]), read(job.get("het_job_offset")) or 0)

    for job in sorted(jobs, key=order):
        job_id = str(read(job.get("het_job_id")) or job["job_id"])
        name, nodes, dependency = str(job.get("name", "")), str(job.get("nodes", "")), str(job.get("dependency", ""))
        task = read(job.get("array_task_id"))
        tasks = job.get("array_task_string", "") if task is None else task
        for key in array_task_ids(read(job.get("array_job_id")) or "", tasks) or [job_id]:
            entry = JobInfo(key, name, backend, nodes=nodes, dependency=dependency)
            add_queue_entry(out, entry, dialect.state(job), str(job.get("state_reason", "")))
    return out


def unchanged_since(answer: Mapping[str, Any]) -> bool:
    """Whether slurmrestd answered a ``GET jobs?update_time=`` with "nothing changed": Slurm 22.05's 304 (no
    body), or 23.11+'s empty list with the warning that says so (an empty list alone: no jobs)."""
    if not answer:
        return True
    said = " ".join(str(w.get("description", "")) for w in answer.get("warnings") or [] if isinstance(w, dict))
    return not answer.get("jobs") and "no job changes since" in said.lower()


def refused_token(status: int, payload: Any) -> bool:
    """Whether an answer refuses the token: 401, 403 or 511 (25.11: "Protocol authentication error"), or a 500
    that says so in its own words (25.11.0: an authentication failure; 22.05: slurmctld hung up on the
    forwarded token, "Zero Bytes were transmitted or received")."""
    if status in (401, 403, 511):
        return True
    said = rest.error_text(payload).lower() if isinstance(payload, dict) else ""
    return status == 500 and any(word in said for word in REFUSED_WORDS)


Method = TypeVar("Method", bound=Callable[..., Any])


def read_answers(method: Method) -> Method:
    """A method that reads slurmrestd's answers: an answer of another shape than the API's (a list where a
    list of jobs should be objects, a number for a name) is one line naming the server, never a traceback."""

    @functools.wraps(method)
    def reading(self: RestBackend, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            if isinstance(exc, TiSlurmError):
                raise
            raise BackendError(
                f"slurmrestd at {self.client.url} answered in a shape ti-slurm does not know"
                f" ({type(exc).__name__}: {without_tokens(str(exc))[:120]}): is it slurmrestd"
                f" {', '.join(rest.KNOWN)}?"
            ) from None

    return reading  # type: ignore[return-value]


class RestBackend(ControllerQueue, SubmitsInOneStep):
    """Slurm through slurmrestd."""

    name = "rest"
    queues_jobs = job_arrays = finds_jobs_by_id = knows_free_nodes = True

    def __init__(
        self, url: str | None = None, token_source: str | None = None, user: str | None = None,
        ca_file: str | None = None,
    ) -> None:  # fmt: skip
        import getpass

        from ti_slurm.core.site import load_site_config

        site, own = load_site_config(), users_rest_table()  # the user's [rest] table over the site's keys
        url = url if url is not None else own.get("url") or site.rest_url
        token_source = token_source if token_source is not None else own.get("token") or site.rest_token
        ca_file = ca_file if ca_file is not None else own.get("ca_file") or site.rest_ca_file
        self.client = RestClient(url, Tokens(token_source), user or getpass.getuser(), ca_file)
        self.transport = LocalTransport()  # the job's files: on the shared filesystem, as for the Slurm backend
        self.queue_key = self.client.url  # two servers' queues never share an answer
        self._version = ""

    def close(self) -> None:
        """Close the kept-alive connections to slurmrestd (a kept backend's, when the console stops)."""
        self.client.close()

    # -- the API's version ----------------------------------------------------------------------------------
    def version(self) -> str:
        """The version used with this server: the newest both know (asked once, remembered a while)."""
        if self._version:
            return self._version
        from ti_slurm.backends.answers import cache_key, shared_text

        key = cache_key("rest-version", "", self.client.url)
        found = shared_text(key, VERSION_MAX_AGE, self.ask_version)  # a refusal raises: nothing is remembered
        self._version = found or self.ask_version()
        return self._version

    @read_answers
    def ask_version(self) -> str:
        served: list[str] = []
        failures: list[BackendError] = []
        for path in ("/openapi/v3", "/openapi"):
            try:
                served = rest.served_versions(self.client.request("GET", path))
            except BackendError as exc:
                failures.append(exc)
                continue
            if served:
                break
        chosen = rest.pick_version(served)
        if chosen is None and len(failures) == 2:
            raise failures[-1]  # neither was answered: why (no token, a refused one, no server), not "no version"
        if chosen is None:
            have = ", ".join(served) or "no slurm API version"
            raise BackendError(
                f"slurmrestd at {self.client.url} serves {have}; ti-slurm needs one of"
                f" {', '.join(rest.KNOWN)} (Slurm 22.05 or later)"
            )
        return chosen

    def api(self, path: str) -> str:
        return f"/slurm/{self.version()}/{path}"

    @property
    def dialect(self) -> rest.Dialect:
        return rest.dialect_of(self.version())

    # -- submit -----------------------------------------------------------------------------------------------
    @read_answers
    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        body = rest.submit_body(plan, script, job_environment(os.environ), self.dialect)
        if check_fit:
            from ti_slurm.backends.slurm import refuse_unfit

            refuse_unfit(plan, self.fresh_partitions(), self.sinfo, self.partitions_key())
        make_output_dir(plan.output_dir)
        try:
            answer = self.client.request("POST", self.api("job/submit"), body)
        except BackendError as exc:
            raise SubmissionError(str(exc).replace(" POST ", " ", 1)) from None
        job_id = answer.get("job_id") if isinstance(answer, dict) else None
        if not job_id:
            said = without_tokens(rest.error_text(answer) if isinstance(answer, dict) else str(answer)[:200])
            raise SubmissionError(f"slurmrestd did not say the job's id: {said or 'an answer without job_id'}")
        job_dir = JobPaths.of(plan.output_dir, str(job_id)).root
        return JobInfo(str(job_id), plan.name, self.name, job_dir, JobState.PENDING, submission=plan.submission)

    def partitions_key(self) -> str:
        from ti_slurm.backends.answers import cache_key

        return cache_key("partitions-rest", "", self.client.url)

    def fresh_partitions(self) -> str | None:
        from ti_slurm.backends.answers import PARTITIONS_MAX_AGE, shared_text

        return shared_text(self.partitions_key(), PARTITIONS_MAX_AGE, None)

    @read_answers
    def sinfo(self) -> str:
        partitions = self.client.request("GET", self.api("partitions"))
        nodes = self.client.request("GET", self.api("nodes"))
        return rest.partitions_text(partitions.get("partitions", []), nodes.get("nodes", []), self.dialect)

    @read_answers
    def idle_nodes(self) -> dict[str, int]:
        """Idle nodes per partition (for ``clusters`` and ``--cluster auto``)."""
        nodes = self.client.request("GET", self.api("nodes")).get("nodes", [])
        idle = {str(n.get("name")) for n in nodes if "IDLE" in [str(s).upper() for s in as_list(n.get("state"))]}
        out: dict[str, int] = {}
        for part in self.client.request("GET", self.api("partitions")).get("partitions", []):
            names = self.dialect.partition_nodes(part)
            out[str(part.get("name"))] = len(idle.intersection(expand(names) if names else []))
        return out

    @read_answers
    def pending_nodes(self) -> dict[str, int]:
        """Nodes that pending jobs (anyone's) ask for, per partition: a job just submitted waits a moment before
        the controller shows its nodes allocated, so idle nodes are only free once those are counted."""
        out: dict[str, int] = {}
        for job in self.client.request("GET", self.api("jobs")).get("jobs", []):
            if self.dialect.state(job) == "PENDING":
                for part in str(job.get("partition") or "").split(","):
                    out[part] = out.get(part, 0) + (self.dialect.read_number(job.get("node_count")) or 1)
        return out

    def start_estimate(self, plan: JobPlan, script: str) -> StartEstimate:
        """No test-only submit in the API: "now" when the job's partition has its nodes idle (less those pending
        jobs ask for: a job just submitted is not yet shown on its nodes), else not known."""
        idle, waiting = self.idle_nodes(), self.pending_nodes()
        free = {name: n - waiting.get(name, 0) for name, n in idle.items()}
        partition = plan.partition or plan.components[0].partition or ""
        room = free.get(partition) if partition else max(free.values(), default=0)
        nodes = sum(c.nodes for c in plan.components)
        return StartEstimate("now" if room is not None and room >= nodes else "", "" if free else "no answer")

    def max_array_size(self) -> int | None:
        return None  # not in the API: a sweep larger than MaxArraySize is refused by Slurm at submit

    # -- follow -----------------------------------------------------------------------------------------------
    def load_jobs(self) -> list[Mapping[str, Any]]:
        """This user's jobs the controller holds: one request."""
        jobs, _ = self.jobs_since(0)
        return jobs or []

    def jobs_since(self, mark: int) -> tuple[list[Mapping[str, Any]] | None, int]:
        """This user's jobs, or ``None`` when the controller's job table has not changed since ``mark`` (the
        server's ``last_update`` of an earlier answer: slurmctld then sends no jobs); with this answer's
        ``last_update`` (0 where the API does not say it: Slurm 22.05's, which is then always asked whole)."""
        answer = self.client.request("GET", self.api("jobs") + (f"?update_time={mark}" if mark else ""))
        if mark and unchanged_since(answer):
            return None, mark
        jobs = [j for j in answer.get("jobs", []) if j.get("user_name") == self.client.user]
        return jobs, self.dialect.read_number(answer.get("last_update")) or 0

    @read_answers
    def user_queue(self) -> dict[str, JobInfo]:
        return queue_entries(self.load_jobs(), self.dialect, self.name)

    @read_answers
    def user_queue_since(self, mark: int) -> tuple[dict[str, JobInfo] | None, int]:
        jobs, mark = self.jobs_since(mark)
        return (None if jobs is None else queue_entries(jobs, self.dialect, self.name)), mark

    @read_answers
    def find_by_comment(self, comment: str) -> str | None:
        for job in self.load_jobs():
            state = JobState.from_slurm(self.dialect.state(job))
            if str(job.get("comment", "")).strip() == comment and state in (JobState.PENDING, JobState.RUNNING):
                return str(self.dialect.read_number(job.get("het_job_id")) or job["job_id"])
        return None

    @read_answers
    def find_job_dir(self, job_id: str) -> str | None:
        try:
            answer = self.client.request("GET", self.api(f"job/{job_id}"))
        except BackendError:
            return None
        jobs = answer.get("jobs") or []
        out = str(jobs[0].get("standard_output", "")) if jobs else ""
        return JobPaths.of(os.path.dirname(out), job_id).root if out else None

    def cancel(self, job: JobInfo) -> None:
        self.client.request("DELETE", self.api(f"job/{job.job_id}"))
