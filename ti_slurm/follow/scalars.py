"""A job's training scalars for the console and a sweep's columns: its TensorBoard event files (the format:
:mod:`ti_slurm.core.tfevents`), found and read through the job's backend (here, or over SSH)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ti_slurm.core.tfevents import ScalarReader

if TYPE_CHECKING:
    from ti_slurm.backends.base import Backend


def job_scalars(backend: Backend, job_dir: str) -> ScalarReader:
    """A reader of one job's training scalars: the TensorBoard event files it writes to
    ``TI_SLURM_TENSORBOARD_DIR``, found and read through ``backend`` (here, or over SSH)."""
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.follow.status import ran_plan

    try:
        outputs = ran_plan(backend, job_dir).outputs
    except (ValueError, PermissionError):  # no plan, another ti-slurm's or user's: the job directory's results
        outputs = ""
    folder = JobPaths(job_dir).tensorboard(outputs) if job_dir else ""

    def find(where: str, mark: str) -> list[str]:
        return backend.find_files(where, mark) if where else []

    def read(path: str, offset: int, size: int) -> bytes | None:
        return backend.read_bytes(path, offset, size)

    return ScalarReader(folder, find, read)
