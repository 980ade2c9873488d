"""Training modes: each a :class:`Mode` in one module of this package.

A mode says everything that differs between DDP, MPI, Horovod, PS-Worker and
Ray, and nothing else does:

- at submit (pure): which spec fields name its roles, its own spec rules, the
  components (Slurm heterogeneous-job components) a spec becomes, and upper
  bounds of its variables' sizes;
- on every node (the job path): the node's role, its variables, its hostfile,
  whether it runs the start command, and how it runs it (Ray's node runtime,
  DDP's wait for the master);
- for the supervisor: its success :class:`Rule` and how many ports it takes.

Adding a mode is adding one module here whose ``MODE`` is an instance of a
:class:`Mode` subclass (:mod:`ti_slurm.job.modes.base`); :func:`mode_names` finds it by its file, and
:func:`get_mode` imports only the one a job uses. Standard library only: this
runs in every job step.
"""

from __future__ import annotations

from ti_slurm.core.errors import ModeError
from ti_slurm.core.plugins import FileRegistry
from ti_slurm.job.modes.base import Mode, Rule

__all__ = ["Mode", "Rule", "get_mode", "mode_names"]


def mode_names() -> tuple[str, ...]:
    """Every mode's name (``ps_worker.py`` is ``ps-worker``), from this package's modules but ``base.py``."""
    return MODES.names()


def get_mode(name: str) -> Mode:
    """The mode called ``name``; imports its module only (a :class:`~ti_slurm.core.errors.ModeError` for an unknown
    name)."""
    mode: Mode = MODES.get(name)
    return mode


MODES = FileRegistry(__name__, __file__, "MODE", Mode, ModeError, "mode")
