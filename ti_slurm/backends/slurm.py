"""Slurm backend: ``sbatch --parsable``, ``scontrol``, ``scancel`` (and ``squeue`` to find a job by its comment),
here or over SSH: the commands go through a transport (:mod:`ti_slurm.transports`).

Nothing here depends on accounting (``sacct``): many sites have none. A
job's outcome comes from its own status file; the queue (``scontrol -o show
job``) only says whether it is still pending or running. One call serves many jobs.

Only interfaces that are the same from Slurm 22.05 to 25.x are used:
``--parsable`` output, ``squeue -o`` format strings (not the JSON output,
which changed between releases) and ``scontrol -o show job`` fields.
``ti-slurm doctor`` reports the version found (``sinfo --version``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace

from ti_slurm.backends.base import (
    JobInfo,
    SubmitsInOneStep,
    make_output_dir,
)
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.errors import BackendError, SubmissionError
from ti_slurm.transports import LocalTransport, Transport

_VERSION = re.compile(r"slurm[- ](?:wlm )?(\d+)\.(\d+)")
_JOB_ID = re.compile(r"(\d+)(?:;\S+)?")


def parse_version(text: str) -> tuple[int, int]:
    """``slurm 22.05.8`` -> (22, 5)."""
    m = _VERSION.search(text)
    if m is None:
        raise BackendError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2))


def parse_job_id(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    m = _JOB_ID.fullmatch(line)
    if m is None:
        raise SubmissionError(f"sbatch printed no job id: {text.strip()[:200]!r}")
    return m.group(1)


def checked_stdout(
    res: subprocess.CompletedProcess[str], what: str, error: type[BackendError | SubmissionError] = BackendError
) -> str:
    """A command's stdout, or its last error line as a one-line ``error``."""
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise error(f"{what} failed: {msg[-1] if msg else f'exit {res.returncode}'}")
    return res.stdout


SINFO_FORMAT = "%P|%D|%G|%l"  # partition (* = default), nodes, gres, time limit: a line per group of alike nodes


def refuse_unfit(plan: JobPlan, shared: str | None, ask: Callable[[], str], key: str) -> None:
    """A :class:`SubmissionError` when ``plan`` can never start on its partitions as they stand.

    ``shared`` is the partitions (``sinfo`` text) another submit learnt lately, or ``None``;
    ``ask`` asks the scheduler. A job the shared answer cannot fit is checked again on a
    fresh one (nodes may have been added meanwhile) before it is refused.
    """
    from ti_slurm.queue import parse_sinfo, store_text, unfit_reason

    def reason_from(text: str) -> str | None:
        partitions = parse_sinfo(text)
        return unfit_reason(plan, partitions) if partitions else None  # no sinfo answer: let sbatch judge

    def fresh() -> str:
        text = ask()
        if text.strip():
            store_text(key, text)
        return text

    reason = reason_from(fresh() if shared is None else shared)
    if reason and shared is not None:
        reason = reason_from(fresh())
    if reason:
        raise SubmissionError(f"the job can never start: {reason} (nothing was submitted)")


_FIELD = re.compile(r"(?:^| )(JobId|HetJobId|ArrayJobId|ArrayTaskId|JobState|Reason|NodeList|UserId|Dependency)=(\S*)")
_JOB_NAME = re.compile(r" JobName=(.*?) (?:HetJobIdSet|UserId)=")


def parse_scontrol_jobs(text: str, uid: int) -> dict[str, JobInfo]:
    """``scontrol -o show job`` (a line per job, or per heterogeneous component) for user ``uid``."""
    out: dict[str, JobInfo] = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        owner = fields.get("UserId", "")
        if "JobId" not in fields or not owner.endswith(f"({uid})"):
            continue
        job_id = fields.get("HetJobId") or fields["JobId"]
        name = _JOB_NAME.search(line)
        nodes, needs = fields.get("NodeList", ""), fields.get("Dependency", "")
        entry = JobInfo(job_id, name.group(1) if name else "", "slurm", nodes="" if nodes == "(null)" else nodes)
        entry.dependency = "" if needs == "(null)" else needs
        for key in array_task_ids(fields.get("ArrayJobId", ""), fields.get("ArrayTaskId", "")) or [job_id]:
            add_queue_entry(out, replace(entry, job_id=key), fields.get("JobState", ""), fields.get("Reason", ""))
    return out


def array_task_ids(array_id: object, tasks: object) -> list[str]:
    """The ids of the array tasks a queue entry stands for, as ti-slurm names a sweep's points (``100_3``):
    a running task's one, or each of a pending entry's (``ArrayTaskId=2-5%2``, ``1,3``); none for a job
    that is no array task."""
    array, spec = str(array_id or ""), str(tasks or "").split("%")[0]
    if not array.isdigit() or not spec:
        return []
    ids: list[str] = []
    for part in spec.split(","):
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if first.isdigit() and (not last or last.isdigit()) and (not step or step.isdigit()):
            ids += [f"{array}_{n}" for n in range(int(first), int(last or first) + 1, int(step or 1))]
    return ids


def add_queue_entry(out: dict[str, JobInfo], entry: JobInfo, slurm_state: str, reason: str) -> None:
    """Fold one controller entry (a job, or one component of a heterogeneous job) into ``out``.

    ``slurm_state`` and ``reason`` as Slurm says them. The job's state is Slurm's, named by
    :class:`JobState` (a state it folds, such as COMPLETING, becomes the reason when there is
    none); a later component adds its nodes, and a running one makes the job running.
    """
    state = JobState.from_slurm(slurm_state)
    reason = "" if reason == "None" else reason
    if state.value != slurm_state and not reason:
        reason = slurm_state  # CONFIGURING, COMPLETING, REQUEUED...: say which
    info = out.get(entry.job_id)
    if info is None:
        entry.state, entry.reason = state, reason
        out[entry.job_id] = entry
        return
    if state is JobState.RUNNING:
        info.state = JobState.RUNNING
    info.nodes = ",".join(x for x in (info.nodes, entry.nodes) if x)


# the script comes on stdin; it carries every option, the submission's comment included (ti_slurm.slurm.request)
SBATCH_ARGV = ("sbatch", "--parsable")


class SlurmBackend(SubmitsInOneStep):
    """The Slurm command-line tools, here or through a runner (SSH)."""

    name = "slurm"

    def __init__(self, transport: Transport | None = None) -> None:
        self.transport: Transport = transport or LocalTransport()
        self.run = self.transport.run

    def _ok(self, argv: Sequence[str], stdin: str | None = None) -> str:
        return checked_stdout(self.run(argv, stdin), argv[0])

    def _info(self, job_id: str, plan: JobPlan) -> JobInfo:
        job_dir = JobPaths.of(plan.output_dir, job_id).root
        return JobInfo(job_id, plan.name, self.name, job_dir, JobState.PENDING, submission=plan.submission)

    def sbatch(self, argv: Sequence[str], script: str) -> str:
        """Run ``sbatch`` with the script on stdin; its job id, or a :class:`SubmissionError` with its reason."""
        return parse_job_id(checked_stdout(self.run(argv, script), "sbatch", SubmissionError))

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        if check_fit:
            refuse_unfit(plan, self.fresh_partitions(), self.sinfo, self.partitions_key())
        make_output_dir(plan.output_dir)
        return self._info(self.sbatch(SBATCH_ARGV, script), plan)

    def sinfo(self) -> str:
        """The partitions, as :func:`~ti_slurm.queue.parse_sinfo` reads them."""
        return self._ok(["sinfo", "-h", "-o", SINFO_FORMAT])

    def partitions_key(self) -> str:
        """The shared cache's name for this cluster's partitions."""
        return f"partitions-{self.name}"

    def fresh_partitions(self) -> str | None:
        """The partitions another submit learnt lately (``None``: ask again)."""
        from ti_slurm.queue import PARTITIONS_MAX_AGE, shared_text

        return shared_text(self.partitions_key(), PARTITIONS_MAX_AGE, None)

    def max_array_size(self) -> int | None:
        """The cluster's ``MaxArraySize`` (a job array's indices are below it); ``None`` when not told."""
        from ti_slurm.queue import PARTITIONS_MAX_AGE, shared_text

        def ask() -> str:
            res = self.run(["scontrol", "show", "config"], None)
            found = re.search(r"^MaxArraySize\s*=\s*(\d+)", res.stdout, re.M) if res.returncode == 0 else None
            return found.group(1) if found else ""

        text = shared_text(f"max-array-size-{self.name}", PARTITIONS_MAX_AGE, ask)
        return int(text) if text and text.isdigit() else None

    def user_queue(self) -> dict[str, JobInfo]:
        """Every job of this user the controller still holds (ended ones too, with Slurm's verdict).

        ``scontrol -o show job``: one controller RPC however many jobs are followed
        (``squeue`` costs two: it also loads the partitions).
        """
        res = self.run(["sh", "-c", 'id -u && exec scontrol -o show job "$@"', "sh"], None)
        uid, _, jobs = res.stdout.partition("\n")
        if res.returncode != 0 and "No jobs in the system" in res.stdout + res.stderr:
            return {}
        checked_stdout(res, "scontrol show job")
        return parse_scontrol_jobs(jobs, int(uid))

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        """The controller's entries for ``jobs``: one call for all of them (see :meth:`user_queue`)."""
        if not jobs:
            return {}
        held = self.user_queue()
        return {j.job_id: held[j.job_id] for j in jobs if j.job_id in held}

    def find_by_comment(self, comment: str) -> str | None:
        """A queued job of this user whose comment is ``comment`` (for safe retries)."""
        out = self._ok(["squeue", "--me", "-h", "-o", "%i|%k"])
        for line in out.splitlines():
            job_id, _, text = line.partition("|")
            if text.strip() == comment:
                return job_id.split("+", 1)[0]
        return None

    def find_job_dir(self, job_id: str) -> str | None:
        """A job's directory from its StdOut path (``<output dir>/slurm-<id>.out``)."""
        res = self.run(["scontrol", "show", "job", job_id], None)
        m = re.search(r"StdOut=(\S+)", res.stdout) if res.returncode == 0 else None
        return JobPaths.of(os.path.dirname(m.group(1)), job_id).root if m else None

    def cancel(self, job: JobInfo) -> None:
        self._ok(["scancel", job.job_id])

    def read_text(self, path: str) -> str | None:
        return self.transport.read_text(path)

    def read_bytes(self, path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        return self.transport.read_bytes(path, offset, size)

    def read_tail(self, path: str, size: int) -> bytes | None:
        return self.transport.read_tail(path, size)
