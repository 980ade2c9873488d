"""Backends: the only code that touches the world (processes, Slurm, SSH).

Chosen by name with :func:`get_backend`: ``local`` (processes on this
machine), ``slurm`` (the Slurm CLI), ``ssh`` (the Slurm CLI over one SSH
connection), ``pyslurm`` (optional, docs/admin.md), ``rest`` (slurmrestd, docs/rest.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.core.choices import BACKENDS
from ti_slurm.core.errors import ConfigError

if TYPE_CHECKING:
    from ti_slurm.backends.ssh import SSHBackend

__all__ = ["BACKENDS", "Backend", "JobInfo", "get_backend"]


def get_backend(name: str, host: str = "", accept_new_host_key: bool = False, ssh_config: str | None = None) -> Backend:
    """Return the backend called ``name`` (``ssh`` needs ``host``)."""
    if name == "local":
        from ti_slurm.backends.local import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from ti_slurm.backends.slurm import SlurmBackend

        return SlurmBackend()
    if name == "ssh":
        from ti_slurm.backends.kept import kept_backend

        return kept_backend(("ssh", host, accept_new_host_key, ssh_config),
                            lambda: ssh_backend(host, accept_new_host_key, ssh_config))  # fmt: skip
    if name == "pyslurm":
        from ti_slurm.backends.pyslurm import PyslurmBackend

        return PyslurmBackend()
    if name == "rest":
        from ti_slurm.backends.kept import kept_backend
        from ti_slurm.backends.rest import RestBackend

        return kept_backend(("rest",), RestBackend)
    raise ConfigError("backend", name, f"expected one of: {', '.join(BACKENDS)}")


def ssh_backend(host: str, accept_new_host_key: bool = False, ssh_config: str | None = None) -> SSHBackend:
    """The Slurm commands over SSH on login node ``host``; one line when paramiko is missing."""
    try:
        from ti_slurm.backends.ssh import SSHBackend
        from ti_slurm.transports.ssh import SSHSession, parse_target
    except ImportError:
        raise ConfigError("host", host, "remote submission needs paramiko: pip install 'ti-slurm[ssh]'") from None
    return SSHBackend(SSHSession(parse_target(host, ssh_config), accept_new_host_key, ssh_config))
