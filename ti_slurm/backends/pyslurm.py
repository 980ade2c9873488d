"""Optional pyslurm backend: offered only where pyslurm imports and matches the cluster's Slurm.

pyslurm binds one Slurm release (PyPI carries 25.11 only, which does not build
against Slurm 22.05), so this adapter is deliberately thin: it checks that the
bindings fit the running Slurm and otherwise refuses with one line. Submitting
and watching still go through the Slurm commands, which serve every release.
"""

from __future__ import annotations

from ti_slurm.backends.slurm import SlurmBackend, run_local
from ti_slurm.errors import ConfigError


def pyslurm_mismatch() -> str | None:
    """Why pyslurm cannot serve this cluster, or None when it can."""
    try:
        import pyslurm
    except ImportError:
        return "pyslurm is not installed (pip install pyslurm; it must match the cluster's Slurm release)"
    from ti_slurm.backends.slurm import parse_version

    wanted = parse_version(run_local(["sinfo", "--version"], None).stdout)
    have = getattr(pyslurm, "__version__", "0.0")
    major_minor = tuple(int(x) for x in have.split(".")[:2])
    if major_minor != wanted:
        built = f"{major_minor[0]}.{major_minor[1]:02d}"
        return f"pyslurm {have} is built for Slurm {built}, the cluster runs {wanted[0]}.{wanted[1]:02d}"
    return None


class PyslurmBackend(SlurmBackend):
    """The Slurm backend, on a node where pyslurm fits the running Slurm."""

    name = "pyslurm"

    def __init__(self) -> None:
        why = pyslurm_mismatch()
        if why:
            raise ConfigError("backend", "pyslurm", why)
        super().__init__()
