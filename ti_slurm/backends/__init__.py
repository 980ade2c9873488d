"""Backends: the only code that touches the world (processes, Slurm, SSH).

Chosen by name with :func:`get_backend`: ``local`` (processes on this
machine), ``slurm`` (the Slurm CLI), ``ssh`` (the Slurm CLI over one SSH
connection), ``pyslurm`` (optional, see the README).
"""

from __future__ import annotations

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.errors import SpecError

__all__ = ["Backend", "JobInfo", "get_backend"]


def get_backend(name: str, **options: object) -> Backend:
    """Return the backend called ``name``."""
    if name == "local":
        from ti_slurm.backends.local import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from ti_slurm.backends.slurm import SlurmBackend

        return SlurmBackend()
    raise SpecError("backend", name, "expected one of: local, slurm")
