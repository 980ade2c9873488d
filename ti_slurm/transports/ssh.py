"""The SSH transport: a login node over one paramiko connection.

- Targets: ``host``, ``user@host``, ``user@host:port`` or an alias from
  ``~/.ssh/config`` (HostName, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile).
- Host keys are checked against known_hosts; an unknown or changed key is
  refused. ``accept_new=True`` (``--accept-new-host-key``) records a key
  never seen before, like ``StrictHostKeyChecking=accept-new``; a changed key
  is always refused.
- Keys and the agent authenticate; passwords are never asked for; the agent
  is not forwarded. A login node that asks for a second factor after the key
  (keyboard-interactive: a one-time code) is answered on the terminal, with
  echo off, never from stdin or stdout.
- Each command drains stdout and stderr while it runs (paramiko deadlocks
  when a channel's buffers fill and nobody reads them).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _defer_import(name: str) -> None:
    """Put a stand-in for module ``name`` in ``sys.modules`` that imports the real one on first use."""
    import importlib
    import importlib.util
    import sys
    import types

    if name in sys.modules or importlib.util.find_spec(name) is None:
        return

    class Deferred(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:  # only for what the stand-in lacks: all but __name__, __spec__...
            if sys.modules.get(name) is self:
                del sys.modules[name]
            return getattr(importlib.import_module(name), attr)

    sys.modules[name] = Deferred(name)


# paramiko imports invoke (~80 ms: it pulls in unittest.mock, yaml and importlib.metadata) only to
# run the `Match exec` lines of an ssh config: defer it to that first use.
_defer_import("invoke")

import paramiko  # noqa: E402

from ti_slurm.core.errors import BackendError, ConfigError  # noqa: E402

logging.getLogger("paramiko").addHandler(logging.NullHandler())  # errors reach users as one line, not a log dump
logging.getLogger("paramiko").propagate = False
OUTPUT_GRACE = 2.0  # seconds to keep reading after the exit status, until the server closes the channel
CONNECT_TIMEOUT = float(os.environ.get("TI_SLURM_SSH_TIMEOUT", "10"))  # connect, banner and auth
_NOT_FOUND = re.compile(r"(?:^|[\s:])([\w.+-]+): (?:command )?not found")
_TARGET = re.compile(
    r"(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\])(?::(?P<port>\d{1,5}))?"
)


@dataclass
class Target:
    """Where to connect, after ``~/.ssh/config`` is applied."""

    alias: str
    host: str
    port: int = 22
    user: str | None = None
    identity_files: list[str] = field(default_factory=list)
    proxy_jump: str | None = None
    known_hosts: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


def parse_target(text: str, config_path: str | None = None) -> Target:
    """Parse a target and apply the matching ``Host`` block of the SSH config."""
    m = _TARGET.fullmatch(text or "")
    if m is None:
        raise ConfigError("host", text, "expected host, user@host, user@host:port or an ~/.ssh/config alias")
    alias = m.group("host").strip("[]")
    path = Path(config_path or os.path.expanduser("~/.ssh/config"))
    try:
        config = paramiko.SSHConfig.from_path(str(path)) if path.exists() else paramiko.SSHConfig()
        entry: dict[str, Any] = config.lookup(alias)
    except Exception as exc:  # paramiko raises several kinds for a config it cannot read
        raise ConfigError("ssh config", str(path), f"cannot read it: {exc}") from None
    host = str(entry.get("hostname", alias))
    if len(host) > 253 or any(len(label) > 63 for label in host.split(".")):  # else the resolver's UnicodeError
        raise ConfigError("host", text, "a host name is at most 253 characters, in labels of at most 63")
    port_text = m.group("port") or str(entry.get("port", 22))
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ConfigError("host", text, f"port {port_text[:20]!r}: expected 1-65535 (from the target or Port)")
    jump = entry.get("proxyjump")
    known = entry.get("userknownhostsfile", "~/.ssh/known_hosts").split()
    return Target(
        alias=alias,
        host=host,
        port=int(port_text),
        user=m.group("user") or entry.get("user"),
        identity_files=[os.path.expanduser(p) for p in entry.get("identityfile", [])],
        proxy_jump=None if jump is None or jump.lower() == "none" else jump,
        known_hosts=[os.path.expanduser(p) for p in known],
    )


@dataclass
class KnownHosts:
    """known_hosts as OpenSSH reads it: plain host keys, ``@revoked`` keys and ``@cert-authority`` lines."""

    keys: list[tuple[str, Any]] = field(default_factory=list)  # (host pattern, key)
    revoked: set[tuple[str, str]] = field(default_factory=set)  # (key type, base64)
    cert_authorities: list[str] = field(default_factory=list)  # host patterns a CA vouches for

    def load(self, path: str) -> None:
        """Read ``path`` (a missing file is an empty one)."""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return
        for line in lines:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "@revoked" and len(words) >= 4:
                self.revoked.add((words[2], words[3]))
            elif words[0] == "@cert-authority" and len(words) >= 2:
                self.cert_authorities.append(words[1])
            elif not words[0].startswith("@"):
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
                except Exception:  # a line paramiko cannot read (an unknown key type): OpenSSH skips it too
                    continue
                if entry is not None and entry.key is not None:
                    self.keys += [(name, entry.key) for name in entry.hostnames]

    def is_revoked(self, key: Any) -> bool:
        return (key.get_name(), key.get_base64()) in self.revoked

    def install(self, client: Any) -> None:
        """Give ``client`` the plain keys that are not revoked: a revoked key counts as unknown (and is refused)."""
        store = client.get_host_keys()
        for name, key in self.keys:
            if not self.is_revoked(key):
                store.add(name, key.get_name(), key)


# a file of the user's own in a private directory of theirs, neither a link (cat is of a name in a 0700
# directory of the user: nobody else can swap it between the checks and the read)
OWN_FILE = r"""me=$(id -u)
for f in "$1" "$2"; do [ -e "$f" ] || [ -L "$f" ] || { echo "$f: No such file or directory" >&2; exit 1; }; done
[ -d "$1" ] && [ ! -L "$1" ] || { echo "$1: not a directory" >&2; exit 1; }
set -- "$1" "$2" "$(stat -c '%u %a' -- "$1")"
case $3 in "$me "?00) ;; *) echo "$1 is not a private directory of yours (uid and mode $3)" >&2; exit 1;; esac
[ -f "$2" ] && [ ! -L "$2" ] && [ "$(stat -c %u -- "$2")" = "$me" ] || { echo "$2 is not a file of yours" >&2; exit 1; }
exec cat -- "$2"
"""


class SSHSession:
    """One SSH connection that runs commands and reads files on a login node."""

    def __init__(
        self, target: Target, accept_new: bool = False, config_path: str | None = None, via: tuple[str, ...] = ()
    ) -> None:
        self.target, self.accept_new, self.config_path = target, accept_new, config_path
        self.via = via  # the hosts this connection is a jump for (to tell a ProxyJump loop)
        self.round_trips = 0
        self._early: dict[int, bytes] = {}  # output read ahead by read_until, per channel
        self._client: Any = None
        self._jump: SSHSession | None = None
        self._connecting = threading.Lock()  # a console's threads share the session: one connects

    # -- connection ------------------------------------------------------------
    def connect(self) -> None:
        client = paramiko.SSHClient()
        known = KnownHosts()
        for path in [os.path.expanduser("~/.ssh/known_hosts"), *self.target.known_hosts]:
            known.load(path)
        known.install(client)
        policy = _AcceptNew if self.accept_new else _Refuse
        client.set_missing_host_key_policy(policy(self.target, known))
        try:
            client.connect(
                self.target.host,
                port=self.target.port,
                username=self.target.user,
                key_filename=self.target.identity_files or None,  # type: ignore[arg-type]  # a list works too
                allow_agent=True,
                look_for_keys=True,
                timeout=CONNECT_TIMEOUT,
                banner_timeout=CONNECT_TIMEOUT,
                auth_timeout=CONNECT_TIMEOUT,
                sock=self._jump_channel(),
                transport_factory=_new_transport,
            )
        except (paramiko.SSHException, OSError) as exc:
            raise connect_refusal(self.target, exc, client.get_transport()) from None
        self._client = client

    def connected(self) -> Any:
        """The connection's transport: connected once, whichever thread asks first; again when it dropped (a
        console's session lives for hours: a login node's restart or a network blip must not end it)."""
        with self._connecting:
            transport = self._client.get_transport() if self._client is not None else None
            if transport is None or not transport.is_active():
                self.close()
                self.connect()
                transport = self._client.get_transport()
            return transport

    def _jump_channel(self) -> paramiko.Channel | None:
        """With ``ProxyJump``: a channel to the target through a session to the jump host (itself maybe
        through another); a chain that comes back to a host on it is one line."""
        if not self.target.proxy_jump:
            return None
        chain = (*self.via, self.target.alias)
        jump = parse_target(self.target.proxy_jump, self.config_path)
        if jump.alias in chain:
            loop = " -> ".join((*chain, jump.alias))
            raise ConfigError("ssh config", loop, "ProxyJump loops back to a host already on the way")
        self._jump = SSHSession(jump, self.accept_new, self.config_path, chain)
        self._jump.connect()
        transport = self._jump._client.get_transport()
        channel: paramiko.Channel = transport.open_channel(
            "direct-tcpip", (self.target.host, self.target.port), ("127.0.0.1", 0)
        )
        return channel

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._jump is not None:
            self._jump.close()

    def __enter__(self) -> SSHSession:
        self.connected()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands --------------------------------------------------------------
    def run(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the remote host (quoted), feeding ``stdin``; drain both outputs."""
        return self.finish(self.start(argv), argv, stdin)

    def start(self, argv: Sequence[str]) -> Any:
        """Start ``argv`` on the remote host (one round trip); its input follows in :meth:`finish`."""
        transport = self.connected()
        self.round_trips += 1
        try:
            channel = transport.open_session(timeout=CONNECT_TIMEOUT)
            channel.exec_command(" ".join(shlex.quote(a) for a in argv))
        except (OSError, EOFError) as exc:
            raise BackendError(f"connection to {self.target} dropped: {exc}") from None
        except Exception as exc:  # paramiko.SSHException
            raise BackendError(f"ssh to {self.target}: {exc}") from None
        return channel

    def finish(self, channel: Any, argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        """Send ``stdin`` to a started command, close its input, drain both outputs, get its status."""
        code, out, err = self.exchange(channel, argv, stdin)
        return subprocess.CompletedProcess(list(argv), code, out.decode(errors="replace"), err)

    def read_until(self, channel: Any, marker: str) -> str:
        """A started command's output up to the line ``marker`` (the rest is kept for :meth:`finish`)."""
        line = f"{marker}\n".encode()
        buf = bytearray(self._early.pop(id(channel), b""))  # what came after an earlier marker
        deadline = time.monotonic() + 3 * CONNECT_TIMEOUT
        try:
            while line not in buf and not (channel.exit_status_ready() and not channel.recv_ready()):
                if channel.recv_ready():
                    buf += channel.recv(65536)
                elif time.monotonic() > deadline:
                    raise BackendError(f"{self.target} did not answer within {3 * CONNECT_TIMEOUT:.0f}s")
                else:
                    time.sleep(0.005)
        except (OSError, EOFError) as exc:
            raise BackendError(f"connection to {self.target} dropped: {exc}") from None
        head, _, rest = bytes(buf).partition(line)
        self._early[id(channel)] = rest
        return head.decode(errors="replace")

    def exchange(self, channel: Any, argv: Sequence[str], stdin: str | None) -> tuple[int, bytes, str]:
        """:meth:`finish` as (exit code, stdout's bytes, stderr's text)."""
        try:
            if stdin:
                channel.sendall(stdin.encode())
            channel.shutdown_write()
            out, err = bytearray(self._early.pop(id(channel), b"")), bytearray()
            exited_at = None
            while True:
                got = False
                while channel.recv_ready():
                    out += channel.recv(65536)
                    got = True
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    got = True
                # The server closes the channel after the last byte of both outputs; the exit
                # status can come before those. A command that exited but left a child holding
                # its outputs open gets OUTPUT_GRACE seconds.
                done = channel.closed
                if channel.exit_status_ready():
                    exited_at = exited_at or time.monotonic()
                    done = done or time.monotonic() - exited_at > OUTPUT_GRACE
                if done and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if not got:
                    time.sleep(0.005)
            code = channel.recv_exit_status()
            channel.close()
        except (OSError, EOFError) as exc:
            raise BackendError(f"connection to {self.target} dropped: {exc}") from None
        except Exception as exc:  # paramiko.SSHException
            raise BackendError(f"ssh to {self.target}: {exc}") from None
        text_err = err.decode(errors="replace")
        missing = _NOT_FOUND.search(text_err) if code == 127 else None
        if missing:
            raise BackendError(f"{missing.group(1)} is not installed on {self.target.host} (is it a Slurm login node?)")
        return code, bytes(out), text_err

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode(errors="replace")

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        """The bytes of ``path`` from ``offset`` on (``tail -c +N``: only what was appended travels), at most
        ``size`` of them (``| head -c``)."""
        if size is None:
            return self._tail(["tail", "-c", f"+{offset + 1}", "--", path])
        return self._tail(["sh", "-c", 'tail -c "+$1" -- "$2" | head -c "$3"', "sh", str(offset + 1), path, str(size)])

    def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
        """The length of ``path`` and at most its last ``size`` bytes, in one round trip (``wc -c``, ``tail -c N``)."""
        out = self._tail(["sh", "-c", 'wc -c < "$1" && tail -c "$2" -- "$1"', "sh", path, str(size)])
        length, sep, data = (out or b"").partition(b"\n")
        return (int(length), data) if out is not None and sep and length.strip().isdigit() else None

    def read_own(self, path: str) -> tuple[bytes | None, str]:
        """:meth:`ti_slurm.transports.LocalFiles.read_own` there: owner and mode read with ``stat`` of the
        unfollowed names, then the file, in one round trip."""
        argv = ["sh", "-c", OWN_FILE, "sh", os.path.dirname(path), path]
        code, out, err = self.exchange(self.start(argv), argv, None)
        return (out, "") if code == 0 else (None, err.strip().splitlines()[-1] if err.strip() else f"exit {code}")

    def find_files(self, folder: str, mark: str) -> list[str]:
        """The regular files below ``folder`` there whose names hold ``mark``, at most FOUND_AT_MOST (``find``)."""
        from ti_slurm.transports import FOUND_AT_MOST

        script = 'find "$1" -type f -name "*$2*" 2>/dev/null | sort | head -n "$3"'
        out = self._tail(["sh", "-c", script, "sh", folder, mark.replace("*", ""), str(FOUND_AT_MOST)])
        return [line for line in (out or b"").decode(errors="replace").splitlines() if line]

    def _tail(self, argv: list[str]) -> bytes | None:
        code, out, _ = self.exchange(self.start(argv), argv, None)
        return out if code == 0 else None


def connect_refusal(target: Target, exc: Exception, transport: paramiko.Transport | None) -> BackendError:
    """What a failed connect means, in one line."""
    if isinstance(exc, paramiko.BadHostKeyException):
        return BackendError(
            f"host key for {target.host} has CHANGED since it was recorded in known_hosts: refusing to "
            "connect (possible man-in-the-middle; if the host was reinstalled, remove its old key: ssh-keygen -R)"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        if isinstance(transport, _Transport) and transport.no_terminal:
            return BackendError(
                f"{target} accepted the key and asks for a second factor (keyboard-interactive), but there "
                "is no terminal to ask on: run ti-slurm from a terminal"
            )
        if isinstance(transport, _Transport) and transport.second_factor_asked:
            return BackendError(f"{target} accepted the key but refused the second factor (keyboard-interactive)")
        return BackendError(
            f"authentication failed for {target}: no key or agent identity was accepted "
            "(ti-slurm uses keys and the agent only, never passwords)"
        )
    if isinstance(exc, HostKeyRefused):
        return BackendError(str(exc))
    if isinstance(exc, paramiko.SSHException):
        if "banner" in str(exc) or "No existing session" in str(exc):
            return BackendError(
                f"{target} accepted the connection but sent no SSH banner within {CONNECT_TIMEOUT:.0f}s"
            )
        return BackendError(f"ssh to {target}: {exc}")
    if isinstance(exc, TimeoutError):
        return BackendError(f"cannot reach {target}: timed out after {CONNECT_TIMEOUT:.0f}s")
    assert isinstance(exc, OSError)
    return BackendError(f"cannot reach {target}: {exc.strerror or exc}")


class HostKeyRefused(paramiko.SSHException):
    """The host's key is not in known_hosts and accepting new keys was not asked for."""


SECOND_FACTOR_TIMEOUT = 180.0  # seconds a person has to type a one-time code


class _Transport(paramiko.Transport):
    """A transport that asks for a second factor on the terminal (``/dev/tty``), with echo off.

    paramiko's own fallback prints the server's prompts on stdout (where ti-slurm
    prints job ids) and reads the answer from stdin with echo on.
    """

    second_factor_asked = False
    no_terminal = False

    def auth_interactive_dumb(self, username: str, handler: Any = None, submethods: str = "") -> list[str]:
        self.second_factor_asked = True
        self.auth_timeout = max(self.auth_timeout or 0.0, SECOND_FACTOR_TIMEOUT)
        return self.auth_interactive(username, self._answer_on_terminal, submethods)

    def _answer_on_terminal(self, title: str, instructions: str, prompts: list[tuple[str, bool]]) -> list[str]:
        if not prompts:
            return []
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            self.no_terminal = True
            return []  # the server refuses the empty answer; connect() says why
        import getpass
        import io

        with io.TextIOWrapper(io.FileIO(fd, "w+"), encoding="utf-8") as tty:  # a terminal cannot seek: no "r+"
            for text in (title, instructions):
                if text.strip():
                    tty.write(text.strip() + "\n")
            answers = []
            for prompt, echo in prompts:
                if echo:
                    tty.write(prompt)
                    tty.flush()
                    answers.append(tty.readline().rstrip("\n"))
                else:
                    answers.append(getpass.getpass(prompt, stream=tty))
        return answers


def _new_transport(sock: Any, **options: Any) -> paramiko.Transport:
    """``SSHClient.connect``'s transport factory (the options differ between paramiko releases)."""
    return _Transport(sock, **options)


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Missing-host-key policy: refuse (the default); a revoked key is always refused."""

    def __init__(self, target: Target, known: KnownHosts) -> None:
        self.target, self.known = target, known

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        if self.known.is_revoked(key):
            raise HostKeyRefused(f"host key for {hostname} is marked @revoked in known_hosts: refusing to connect")
        if self.known.cert_authorities:
            raise HostKeyRefused(
                f"host key for {hostname} is not in known_hosts; known_hosts trusts host certificates "
                "(@cert-authority), which ti-slurm does not check: add the host's own key (ssh-keyscan)"
            )
        raise HostKeyRefused(
            f"host key for {hostname} is not in known_hosts ({', '.join(self.target.known_hosts)}): verify it, then "
            "add it (ssh-keyscan, or connect once with --accept-new-host-key)"
        )


class _AcceptNew(_Refuse):
    """Missing-host-key policy: record a never-seen host's key (``accept-new``), never a revoked one."""

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        if self.known.is_revoked(key):
            super().missing_host_key(client, hostname, key)
        # paramiko names the host "[host]:port" already when the port is not 22
        path = self.target.known_hosts[0] if self.target.known_hosts else os.path.expanduser("~/.ssh/known_hosts")
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
