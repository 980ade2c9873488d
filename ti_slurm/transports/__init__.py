"""Transports: how a backend reaches the machine where Slurm's commands run and the job's files are.

- :class:`LocalTransport`: this machine (the commands as processes, the files read here or on the
  shared filesystem);
- :class:`~ti_slurm.transports.ssh.SSHSession`: a login node over one SSH connection (known_hosts,
  a second factor, ProxyJump inside it), with :mod:`~ti_slurm.transports.sync` beside it to upload
  a tree.

The Slurm backend (:class:`ti_slurm.backends.slurm.SlurmBackend`) takes a transport: the same
commands, here or there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from ti_slurm.core.environ import job_environment
from ti_slurm.core.errors import BackendError
from ti_slurm.core.files import find_named, open_regular, read_local_bytes

Runner = Callable[[Sequence[str], str | None], "subprocess.CompletedProcess[str]"]


def run_local(
    argv: Sequence[str],
    stdin: str | None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    cluster: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command here; a missing command or one that does not answer within ``timeout`` is a
    one-line error. The command gets a clean environment (:func:`job_environment`): sbatch hands its
    environment to the job. ``env`` replaces this process's environment as its base (another cluster's
    ``SLURM_CONF`` and ``PATH``); ``cluster`` names that cluster in the errors."""
    base = job_environment(env if env is not None else os.environ)
    if shutil.which(argv[0], path=base.get("PATH")) is None:
        if cluster:
            raise BackendError(f"{argv[0]}: not found for cluster {cluster} (its bin_dir?)")
        raise BackendError(f"{argv[0]}: not found on PATH (is this a Slurm login node? try --local or --host)")
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base
    )
    running(proc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        on = f" on cluster {cluster}" if cluster else ""
        raise BackendError(f"{argv[0]}{on} did not answer within {timeout:g} s") from None
    finally:
        RUNNING.discard(proc)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


RUNNING: set[subprocess.Popen[str]] = set()  # Slurm commands under way: none outlives this process


def running(proc: subprocess.Popen[str]) -> None:
    """Note ``proc`` as under way; at exit, whatever is still under way is killed (a cluster that did not answer
    `--cluster auto` in time is left behind by a thread, and must not be left behind by ti-slurm)."""
    if not RUNNING:
        import atexit

        atexit.unregister(end_running)
        atexit.register(end_running)
    RUNNING.add(proc)


def end_running() -> None:
    for proc in list(RUNNING):
        with contextlib.suppress(OSError):
            proc.kill()


def run_capped(argv: Sequence[str], cap: int, timeout: float) -> tuple[int, bytes, bytes]:
    """Run ``argv`` here and return its exit status, output and error output, each at most ``cap`` bytes: a
    command that prints more (an endless device) or does not end within ``timeout`` seconds is killed (its
    whole process group: nothing of it outlives the call) and said as a :class:`BackendError` naming the
    command's first word only (its arguments may hold secrets)."""
    import selectors
    import signal
    import time

    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    taken: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    why = ""
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        deadline = time.monotonic() + timeout
        while sel.get_map() and not why:
            left = deadline - time.monotonic()
            ready = sel.select(max(left, 0)) if left > 0 else []
            if not ready:
                why = f"did not end within {timeout:g} s"
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                taken[key.data] += chunk
                if len(taken[key.data]) > cap:
                    why = f"printed more than {cap} bytes"
    if why:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    if why:
        raise BackendError(f"{os.path.basename(argv[0])} {why}: stopped")
    return code, bytes(taken[1]), bytes(taken[2])


class Transport(Protocol):
    """Run a command there and read the job's files there."""

    def run(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]: ...

    def read_text(self, path: str) -> str | None: ...

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None: ...

    def read_end(self, path: str, size: int) -> tuple[int, bytes] | None: ...

    def find_files(self, folder: str, mark: str) -> list[str]: ...

    def read_own(self, path: str) -> tuple[bytes | None, str]: ...


FOUND_AT_MOST = 64  # files find_files names at most (a job's TensorBoard files: a few per run)


class LocalFiles:
    """Job files read on this machine (or its shared filesystem); ``None`` when absent."""

    def read_text(self, path: str) -> str | None:
        data = read_local_bytes(path)
        return None if data is None else data.decode(errors="replace")

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        return read_local_bytes(path, offset, size)

    def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
        """The file's length, and at most its last ``size`` bytes (read from there on)."""
        try:
            with open_regular(path) as fh:
                length = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, length - size))
                return length, fh.read(size)
        except OSError:
            return None

    def read_own(self, path: str) -> tuple[bytes | None, str]:
        """``(its bytes, "")`` when ``path`` is a regular file of this user's in a directory of this user's alone
        (neither a link: they are not followed), else ``(None, why not)``: what is run again as this user (a
        job's plan, by resubmit) must be what this user wrote, never what another user left or linked there."""
        import stat

        folder, name = os.path.split(path)
        try:
            top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            return None, f"{folder}: {'a symlink' if os.path.islink(folder) else exc.strerror}"
        try:
            info = os.fstat(top)
            if info.st_uid != os.getuid() or info.st_mode & 0o077:
                return None, f"{folder} is not a private directory of yours (uid {info.st_uid}, mode" \
                             f" {stat.S_IMODE(info.st_mode):o})"  # fmt: skip
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=top)
            except OSError as exc:
                return None, f"{path}: {'a symlink' if os.path.islink(path) else exc.strerror}"
            with os.fdopen(fd, "rb") as fh:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                    return None, f"{path} is not a file of yours (uid {info.st_uid})"
                return fh.read(), ""
        finally:
            os.close(top)

    def find_files(self, folder: str, mark: str) -> list[str]:
        return find_named(folder, mark, FOUND_AT_MOST)


class LocalTransport(LocalFiles):
    """This machine: commands through ``run`` (the Slurm commands in a clean environment by default)."""

    def __init__(self, run: Runner | None = None) -> None:
        self._run = run or run_local

    def run(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self._run(argv, stdin)
