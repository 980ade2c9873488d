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

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace

from ti_slurm.backends.base import ControllerQueue, JobInfo, StartEstimate, SubmitsInOneStep, make_output_dir
from ti_slurm.core.errors import BackendError, SubmissionError
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.slurm.text import (
    CLUSTERS_ARGV,
    COMMENTS_FORMAT,
    IDLE_FORMAT,
    PARTITIONS_FORMAT,
    array_task_ids,
    no_controller,
    no_jobs,
    output_dir,
    owner_uid,
    parse_cluster_names,
    parse_comments,
    parse_config,
    parse_idle,
    parse_job_id,
    parse_partitions,
    parse_test_only,
    show_job_records,
    value,
)
from ti_slurm.transports import LocalTransport, Transport


def checked_stdout(
    res: subprocess.CompletedProcess[str], what: str, error: type[BackendError | SubmissionError] = BackendError
) -> str:
    """A command's stdout, or its last error line as a one-line ``error``."""
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        said = msg[-1] if msg else f"exit {res.returncode}"
        if no_controller(said):  # the first submit on a machine with no cluster: say what to do
            said += "; no Slurm controller answers here (no cluster? --local runs the job on this machine)"
        raise error(f"{what} failed: {said}")
    return res.stdout


def refuse_unfit(plan: JobPlan, shared: str | None, ask: Callable[[], str], key: str) -> None:
    """A :class:`SubmissionError` when ``plan`` can never start on its partitions as they stand.

    ``shared`` is the partitions (``sinfo`` text) another submit learnt lately, or ``None``;
    ``ask`` asks the scheduler. A job the shared answer cannot fit is checked again on a
    fresh one (nodes may have been added meanwhile) before it is refused.
    """
    from ti_slurm.backends.answers import store_text
    from ti_slurm.slurm.request import unfit_reason

    def reason_from(text: str) -> str | None:
        partitions = parse_partitions(text)
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


def parse_scontrol_jobs(text: str, uid: int) -> dict[str, JobInfo]:
    """``scontrol -o show job`` (a line per job, or per heterogeneous component) for user ``uid``."""
    out: dict[str, JobInfo] = {}
    for fields in show_job_records(text):
        if owner_uid(fields) != uid:
            continue
        job_id = value(fields, "HetJobId") or fields["JobId"]
        entry = JobInfo(job_id, fields.get("JobName", ""), "slurm", nodes=value(fields, "NodeList"))
        entry.dependency = value(fields, "Dependency")
        for key in array_task_ids(value(fields, "ArrayJobId"), value(fields, "ArrayTaskId")) or [job_id]:
            add_queue_entry(out, replace(entry, job_id=key), fields.get("JobState", ""), fields.get("Reason", ""))
    return out


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


class SlurmBackend(ControllerQueue, SubmitsInOneStep):
    """The Slurm command-line tools, here or through a runner (SSH)."""

    name = "slurm"
    queues_jobs = job_arrays = finds_jobs_by_id = knows_free_nodes = True
    queue_key = ""  # what tells this controller's shared queue answers apart (a cluster's slurm.conf)

    def __init__(self, transport: Transport | None = None, slurm_cluster: str = "") -> None:
        self.transport: Transport = transport or LocalTransport()
        self.run = self.transport.run
        self.slurm_cluster = ""
        self.reach(slurm_cluster)

    def reach(self, slurm_cluster: str) -> None:
        """Send every command to ``slurm_cluster``, a cluster of the Slurm multi-cluster setup these commands
        are in (``--clusters``: their slurmdbd knows where its controller is); ``""``: their own cluster."""
        self.slurm_cluster = slurm_cluster
        if slurm_cluster:
            self.queue_key = f"{self.queue_key}@{slurm_cluster}"

    def command(self, name: str, *args: str) -> list[str]:
        """Slurm's command ``name`` with ``args``, sent to this backend's cluster."""
        return [name, f"--clusters={self.slurm_cluster}", *args] if self.slurm_cluster else [name, *args]

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
        return self._info(self.sbatch(self.command(*SBATCH_ARGV), script), plan)

    def sinfo(self) -> str:
        """The partitions, as :func:`~ti_slurm.slurm.text.parse_partitions` reads them."""
        return self._ok(self.command("sinfo", "-h", "-o", PARTITIONS_FORMAT))

    def answer_key(self, what: str) -> str:
        """The shared cache's name for this cluster's answer ``what``: by the Slurm config its commands read
        (two clusters reached from here never share an answer)."""
        from ti_slurm.backends.answers import cache_key

        return cache_key(f"{what}-{self.name}", "", self.queue_key)

    def partitions_key(self) -> str:
        """The shared cache's name for this cluster's partitions."""
        return self.answer_key("partitions")

    def fresh_partitions(self) -> str | None:
        """The partitions another submit learnt lately (``None``: ask again)."""
        from ti_slurm.backends.answers import PARTITIONS_MAX_AGE, shared_text

        return shared_text(self.partitions_key(), PARTITIONS_MAX_AGE, None)

    def max_array_size(self) -> int | None:
        """The cluster's ``MaxArraySize`` (a job array's indices are below it); ``None`` when not told."""
        from ti_slurm.backends.answers import PARTITIONS_MAX_AGE, shared_text

        def ask() -> str:
            res = self.run(self.command("scontrol", "show", "config"), None)
            return parse_config(res.stdout).get("MaxArraySize", "") if res.returncode == 0 else ""

        text = shared_text(self.answer_key("max-array-size"), PARTITIONS_MAX_AGE, ask)
        return int(text) if text and text.isdigit() else None

    def idle_nodes(self) -> dict[str, int]:
        return parse_idle(self._ok(self.command("sinfo", "-h", "-o", IDLE_FORMAT)))

    def start_estimate(self, plan: JobPlan, script: str) -> StartEstimate:
        """``sbatch --test-only`` with the job's own script."""
        import time

        done = self.run(self.command("sbatch", "--test-only"), script)
        found = parse_test_only(done.stdout + done.stderr, time.time())
        if found is not None:
            return StartEstimate(found[0])
        said = (done.stderr or done.stdout).strip().splitlines()
        return StartEstimate("", said[-1] if said else f"sbatch --test-only exited {done.returncode}")

    def slurm_clusters(self) -> list[str]:
        """The clusters of the Slurm multi-cluster setup these commands are in (``sacctmgr list clusters``)."""
        return parse_cluster_names(self._ok(list(CLUSTERS_ARGV)))

    def user_queue(self) -> dict[str, JobInfo]:
        """Every job of this user the controller still holds (ended ones too, with Slurm's verdict).

        ``scontrol -o show job``: one controller RPC however many jobs are followed
        (``squeue`` costs two: it also loads the partitions).
        """
        res = self.run(["sh", "-c", 'id -u && exec "$@"', "sh", *self.command("scontrol", "-o", "show", "job")], None)
        uid, _, jobs = res.stdout.partition("\n")
        if res.returncode != 0 and no_jobs(res.stdout + res.stderr):
            return {}
        checked_stdout(res, "scontrol show job")
        return parse_scontrol_jobs(jobs, int(uid))

    def find_by_comment(self, comment: str) -> str | None:
        """A queued job of this user whose comment is ``comment`` (for safe retries)."""
        found = parse_comments(self._ok(self.command("squeue", "--me", "-h", "-o", COMMENTS_FORMAT)))
        return next((job_id for job_id, text in found.items() if text == comment), None)

    def find_job_dir(self, job_id: str) -> str | None:
        """A job's directory from its StdOut path (``<output dir>/slurm-<id>.out``)."""
        res = self.run(self.command("scontrol", "-o", "show", "job", job_id), None)
        records = show_job_records(res.stdout) if res.returncode == 0 else []
        folder = output_dir(records[0]) if records else None
        return JobPaths.of(folder, job_id).root if folder else None

    def cancel(self, job: JobInfo) -> None:
        self._ok(self.command("scancel", job.job_id))
