"""Environment rules: the size limit of one environment string (Linux checks it at exec: E2BIG), and what
a submitting shell must not hand a job."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_ENV_STRING = 32 * 4096  # Linux's MAX_ARG_STRLEN: one "NAME=value" string, NUL included


def env_string_size(name: str, value: str) -> int:
    """Bytes one variable takes in a process's environment (what MAX_ARG_STRLEN limits)."""
    # isascii() is O(1) in CPython, and then characters are bytes: no 100 KB encode per variable
    size = len(value) if value.isascii() else len(value.encode())
    return len(name.encode()) + 1 + size + 1


# What the submitting shell must not hand the job: the Slurm commands' own input variables and a
# surrounding job's layout (SLURM_CPU_BIND from an outer step made one team's training 3x slower).
LEAKING_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMIX_", "PMI_")
KEPT = frozenset(("SLURM_CONF",))  # which cluster to talk to: users rely on it


def leaking(name: str) -> bool:
    """Whether variable ``name`` would change how Slurm lays out a job's steps (see LEAKING_PREFIXES)."""
    return name not in KEPT and name.startswith(LEAKING_PREFIXES)


def job_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what would change how Slurm lays out the job's steps."""
    return {k: v for k, v in environ.items() if not leaking(k)}


# Set on a job's batch step when Slurm was not asked for the checkpoint signal (Slurm 22.05's slurmrestd cannot
# say --signal=B:...): the supervisor then sends it itself, timed from the job's end. Not handed on to the steps.
SUPERVISOR_TIMES_SIGNAL = "TI_SLURM_SUPERVISOR_TIMES_SIGNAL"
