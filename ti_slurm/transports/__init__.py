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

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Protocol

from ti_slurm.backends.base import read_local_bytes, read_local_tail, read_local_text
from ti_slurm.core.environ import job_environment
from ti_slurm.errors import BackendError

Runner = Callable[[Sequence[str], str | None], "subprocess.CompletedProcess[str]"]


def run_local(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command here; a missing command is a one-line error. The command gets a clean
    environment (:func:`job_environment`): sbatch hands its environment to the job."""
    if shutil.which(argv[0]) is None:
        raise BackendError(f"{argv[0]}: not found on PATH (is this a Slurm login node? try --local or --host)")
    env = job_environment(os.environ)
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False, env=env)


class Transport(Protocol):
    """Run a command there and read the job's files there."""

    def run(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]: ...

    def read_text(self, path: str) -> str | None: ...

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None: ...

    def read_tail(self, path: str, size: int) -> bytes | None: ...


class LocalTransport:
    """This machine: commands through ``run`` (the Slurm commands in a clean environment by default)."""

    def __init__(self, run: Runner | None = None) -> None:
        self._run = run or run_local

    def run(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self._run(argv, stdin)

    def read_text(self, path: str) -> str | None:
        return read_local_text(path)

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        return read_local_bytes(path, offset, size)

    def read_tail(self, path: str, size: int) -> bytes | None:
        return read_local_tail(path, size)
