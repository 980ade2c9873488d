"""The backend interface: what every backend (local, slurm, ssh, pyslurm) does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState


@dataclass
class JobInfo:
    """What ti-slurm knows of a submitted job: the registry's record, or a queue entry."""

    job_id: str
    name: str = ""
    backend: str = ""
    job_dir: str = ""
    state: JobState = JobState.UNKNOWN
    reason: str = ""
    nodes: str = ""
    host: str = ""
    submission: str = ""
    submitted: float = 0.0  # when it was submitted (time.time()); 0 when not known
    dependency: str = ""  # what it waits for, as Slurm shows it (afterok:123(unfulfilled)); "" for none
    sweep: str = ""  # the sweep it is a point of ("" for none)


class Backend(Protocol):
    """Submit, watch and stop jobs somewhere. Only backends touch the world."""

    name: str

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        """Create the output directory, submit a rendered job; return its id and job directory.

        With ``check_fit``, a job that can never start on its partitions as they stand is
        refused (:class:`~ti_slurm.errors.SubmissionError`) before anything is submitted.
        """
        ...

    # The submit seam every backend has, so a submit takes one path whatever the backend and host:
    # begin (an SSH backend starts the remote half, whose login shell starts while the spec is planned
    # here), then finish with the rendered script, or abort (planning failed: nothing is submitted).
    def begin_submit(self, submission: str, python: str) -> object:
        """Start a submit before its script is ready; ``python`` is the job's (its ti-slurm is checked)."""
        ...

    def finish_submit(
        self, begun: object, plan: JobPlan, script: str, check_fit: bool = True, code_ignore: tuple[str, ...] = ()
    ) -> JobInfo:
        """:meth:`submit` of a begun submit; a remote plan whose code is still to be taken (``code_dir`` set,
        ``code_tree`` empty) is snapshotted where the job runs, leaving out ``code_ignore``."""
        ...

    def abort_submit(self, begun: object) -> None:
        """End a begun submit without submitting anything."""
        ...

    def upload(self, local: str, remote: str) -> int:
        """Copy the files of directory ``local`` that differ to ``remote`` where the job runs; how many went."""
        ...

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        """Scheduler state of many jobs in one call; jobs no longer queued are missing."""
        ...

    def cancel(self, job: JobInfo) -> None: ...

    def read_text(self, path: str) -> str | None:
        """A file of the job (status, logs); ``None`` when absent."""
        ...

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        """A file of the job from byte ``offset`` on (following a log), at most ``size`` bytes; ``None`` when
        absent."""
        ...

    def read_tail(self, path: str, size: int) -> bytes | None:
        """At most the last ``size`` bytes of a job file (a failure's last lines: never the whole log)."""
        ...

    def find_job_dir(self, job_id: str) -> str | None:
        """The directory of a job this machine has no record of (``None`` when it cannot tell)."""
        ...


class SubmitsInOneStep:
    """The submit seam of a backend whose submit is one step here: nothing to begin or abort, nothing to
    upload (the job runs where its files are)."""

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        raise NotImplementedError

    def begin_submit(self, submission: str, python: str) -> object:
        return None

    def finish_submit(
        self, begun: object, plan: JobPlan, script: str, check_fit: bool = True, code_ignore: tuple[str, ...] = ()
    ) -> JobInfo:
        return self.submit(plan, script, check_fit)  # a plan made here: its code, if any, was taken here

    def abort_submit(self, begun: object) -> None:
        pass

    def upload(self, local: str, remote: str) -> int:
        from ti_slurm.errors import ConfigError

        raise ConfigError("sync", local, "uploads to a login node: give a host too")


def make_output_dir(path: str) -> None:
    """Create the job's output directory here (or on the shared filesystem); a failure names the spec field."""
    import os

    from ti_slurm.errors import SpecError

    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        why = "a file is in the way" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror
        raise SpecError("output_dir", path, f"cannot create it: {why}") from None
