"""The backend interface: what every backend (local, slurm, ssh, pyslurm) does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ti_slurm.core.errors import SpecError
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState

if TYPE_CHECKING:
    from ti_slurm.transports import Transport


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
    cluster: str = ""  # the user config's cluster it went to ("" for the default one)
    command_line: str = ""  # how it was submitted: the submitting process's command line
    spec_text: str = ""  # the spec as given (a file's text; a mapping's YAML), cut at client.SPEC_TEXT_MOST

    @property
    def ref(self) -> str:
        """How users name it: its id, ``<cluster>:<id>`` on a named cluster."""
        return f"{self.cluster}:{self.job_id}" if self.cluster else self.job_id


@dataclass(frozen=True)
class StartEstimate:
    """When a scheduler would start a job (``--cluster auto`` compares them)."""

    start: str = ""  # "now", or Slurm's time (2026-12-05T11:30:00); "" when not known
    why: str = ""  # why it is not known (what the scheduler said instead)


class Backend(Protocol):
    """Submit, watch and stop jobs somewhere. Only backends touch the world.

    What a backend can do is said by its capabilities, never by its name: the API, the CLI and sweeps ask
    these, so a new backend (slurmrestd, another cluster) says what it is once.
    """

    name: str
    queues_jobs: bool  # a scheduler queues jobs (a sweep may keep to max_parallel, any number of points)
    job_arrays: bool  # a sweep may be one job array (its points the array's tasks)
    finds_jobs_by_id: bool  # the scheduler knows a job's directory from its id (no local record needed)
    knows_free_nodes: bool  # idle_nodes() and start_estimate() answer (`clusters`, `--cluster auto`)

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        """Create the output directory, submit a rendered job; return its id and job directory.

        With ``check_fit``, a job that can never start on its partitions as they stand is
        refused (:class:`~ti_slurm.core.errors.SubmissionError`) before anything is submitted.
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

    def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
        """A job file's length and at most its last ``size`` bytes (a failure's last lines, a log view's start:
        never the whole log); ``None`` when absent."""
        ...

    def find_files(self, folder: str, mark: str) -> list[str]:
        """A job's files below ``folder`` whose names hold ``mark`` (its TensorBoard event files), a few dozen at
        most; [] when there are none."""
        ...

    def read_own(self, path: str) -> tuple[bytes | None, str]:
        """A job file that is this user's own, in a private directory of theirs (no link followed): ``(its
        bytes, "")``, else ``(None, why not)``. What is run again as the user (resubmit's plan) is read so."""
        ...

    def find_job_dir(self, job_id: str) -> str | None:
        """The directory of a job this machine has no record of (``None`` when it cannot tell)."""
        ...

    def batch_log(self, paths: JobPaths) -> str:
        """The job file where the batch script's own output goes (a job that ended without a record: why)."""
        ...

    def idle_nodes(self) -> dict[str, int]:
        """Idle nodes per partition (every partition named); with ``knows_free_nodes`` only."""
        ...

    def partition_sizes(self) -> dict[str, int]:
        """How many nodes each partition has (the shared partitions answer); {} where there are none."""
        ...

    def start_estimate(self, plan: JobPlan, script: str) -> StartEstimate:
        """When the scheduler would start the job (``plan``, rendered as ``script``) were it submitted now;
        with ``knows_free_nodes`` only."""
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
        from ti_slurm.core.errors import ConfigError

        raise ConfigError("sync", local, "uploads to a login node: give a host too")


class ControllerQueue:
    """What a backend in front of a Slurm controller shares, however it asks: the queue states of many jobs
    from one answer for all of the user's (its ``user_queue``), and the job's files read through its
    ``transport`` (here or on the shared filesystem, or over SSH)."""

    transport: Transport

    def user_queue(self) -> dict[str, JobInfo]:
        raise NotImplementedError

    def sinfo(self) -> str:
        raise NotImplementedError

    def fresh_partitions(self) -> str | None:
        raise NotImplementedError

    def partition_sizes(self) -> dict[str, int]:
        """From the partitions another submit learnt lately, else asked."""
        from ti_slurm.slurm.text import parse_partitions

        return {name: p.nodes for name, p in parse_partitions(self.fresh_partitions() or self.sinfo()).items()}

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        """The controller's entries for ``jobs``: one question for all of them (see :meth:`user_queue`)."""
        if not jobs:
            return {}
        held = self.user_queue()
        return {j.job_id: held[j.job_id] for j in jobs if j.job_id in held}

    def batch_log(self, paths: JobPaths) -> str:
        return paths.batch_output  # sbatch's --output, the submit's standard_output

    def read_text(self, path: str) -> str | None:
        return self.transport.read_text(path)

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        return self.transport.read_bytes(path, offset, size)

    def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
        return self.transport.read_end(path, size)

    def find_files(self, folder: str, mark: str) -> list[str]:
        return self.transport.find_files(folder, mark)

    def read_own(self, path: str) -> tuple[bytes | None, str]:
        return self.transport.read_own(path)


MIN_FREE_KIB = 1024  # an output directory with less free space cannot hold a job's records and first logs


def full_output_dir(path: str, free_kib: int) -> SpecError | None:
    """The refusal of an output directory whose filesystem is (nearly) full, else ``None``: the job would start
    and end unable to write its records, said only as an unknown end."""
    if free_kib >= MIN_FREE_KIB:
        return None
    why = f"its filesystem has {free_kib} KiB free: the job could not write its records and logs; free some space"
    return SpecError("output_dir", path, why + " or choose another output_dir (nothing was submitted)")


def make_output_dir(path: str) -> None:
    """Create the job's output directory here (or on the shared filesystem), with room for the job's files; a
    failure names the spec field."""
    import os

    try:
        os.makedirs(path, exist_ok=True)
        stat = os.statvfs(path)
    except OSError as exc:
        why = "a file is in the way" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror
        raise SpecError("output_dir", path, f"cannot create it: {why}") from None
    refused = full_output_dir(path, stat.f_bavail * stat.f_frsize // 1024)
    if refused is not None and stat.f_blocks:  # /proc and /sys have no blocks at all: refused below, as such
        raise refused
