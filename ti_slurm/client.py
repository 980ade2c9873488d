"""The Python API: what ``ti-slurm`` does, from one entry point, with the same behaviour.

::

    import ti_slurm

    job = ti_slurm.submit("job.yaml")              # or a dict or a JobSpec; backend="local", host="login"
    job.id, job.state                               # "123", JobState.RUNNING
    final = job.wait(on_change=print)               # the final JobStatus; a failed job raises nothing
    for line in job.logs(node="ddp-1"): ...
    job.cancel()
    ti_slurm.get_job("123")                         # a job submitted earlier, from any process
    ti_slurm.jobs()                                 # this account's jobs: one queue query per backend and host
    ti_slurm.render("job.yaml"); ti_slurm.plan("job.yaml")

The CLI is a thin layer over these functions. Every error a user can cause
is a :class:`~ti_slurm.core.errors.TiSlurmError` with the one-line message the CLI
prints.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ti_slurm.backends import Backend, JobInfo
from ti_slurm.core.errors import ConfigError, SpecError, TiSlurmError, UnknownJobError
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.follow.files import JobFiles
from ti_slurm.follow.follower import RECORD_POLL_MAX, Follower, statuses_of
from ti_slurm.follow.status import JobStatus
from ti_slurm.follow.usage import NodeUsage
from ti_slurm.routing import (
    Target,
    after_ids,
    backend_of_group,
    check_host,
    choose_target,
    named_cluster,
    on_cluster_of,
    reach_job,
)

# Lazy, said once: planning, rendering and the packager (jinja2, hashing) are imported by the calls that use them,
# so following a job (`status`, `logs`, `list`, the console) never pays for them.

if TYPE_CHECKING:  # the spec's models (pydantic) load only when a spec is read: `list`, `status`... never do
    from ti_slurm.submitting.spec import JobSpec

SpecLike: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | JobSpec"
"""A spec file's path, a decoded spec document, or a validated :class:`JobSpec`."""


def load(spec: SpecLike) -> JobSpec:
    """A validated spec from a file path, a mapping, or a :class:`JobSpec`."""
    from ti_slurm.submitting.spec import JobSpec, load_spec, parse_spec

    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, str | os.PathLike):
        return load_spec(spec)
    if isinstance(spec, Mapping):
        return parse_spec(dict(spec))
    raise SpecError("spec", type(spec).__name__, "expected a spec file's path, a mapping or a JobSpec")


def plan(spec: SpecLike, *, python: str | None = None, remote: bool = False) -> JobPlan:
    """The plan ``submit`` would send: site config applied, paths absolute, sizes checked."""
    from ti_slurm.submitting.planning import plan_job

    return plan_job(load(spec), remote=remote, python=python)


def render(spec: SpecLike, *, python: str | None = None, reuse_plan: bool = False) -> str:
    """The sbatch script ``submit`` would send (a dry run). ``reuse_plan``: as :func:`submit`'s."""
    from ti_slurm.submitting.plancache import kept_script

    path = path_of(spec) if reuse_plan else None
    key, kept = kept_script(path, python) if path else (None, None)
    return kept if kept is not None else render_and_keep(spec, python, key)


def render_and_keep(spec: SpecLike, python: str | None, key: str | None) -> str:
    """Plan and render ``spec``; the plan and script kept under ``key`` when there is one (render's own)."""
    from ti_slurm.submitting.plancache import keep
    from ti_slurm.submitting.script import render as render_plan

    made = plan(spec, python=python)
    script = render_plan(made)
    if key:
        keep(key, made, script, "")
    return script


def path_of(spec: SpecLike) -> str | None:
    """The spec file's path, when ``spec`` names one."""
    return os.fspath(spec) if isinstance(spec, str | os.PathLike) else None


def submit(
    spec: SpecLike,
    *,
    backend: str | None = None,
    host: str | None = None,
    sync: str | None = None,
    accept_new_host_key: bool = False,
    ssh_config: str | None = None,
    queue_anyway: bool = False,
    after: Sequence[Job | str] = (),
    when: str = "ok",
    cluster: str | None = None,
    reuse_plan: bool = False,
) -> Job:
    """Submit a job; return its handle once the scheduler has its id.

    ``backend`` is ``"slurm"`` (the Slurm commands; the default unless the site config's ``backend`` says
    otherwise), ``"pyslurm"`` (libslurm in this process) or ``"local"`` (every node a process on this machine).
    ``host`` submits over SSH to a login node (``host``, ``user@host[:port]`` or an ``~/.ssh/config`` alias);
    without it, the spec's ``remote.host`` and then the user config's are used, unless ``backend`` is given.
    ``sync`` uploads a directory's changed files to the remote workdir first. A job that can never start on its
    partition as it stands (more nodes or GPUs per node than it has, no such partition, a time above its
    maximum) is refused with a :class:`SubmissionError` and nothing is submitted, unless ``queue_anyway`` (say,
    for nodes about to be added). The job is recorded so :func:`get_job` and :func:`jobs` find it later, from
    this process or another. ``after`` (jobs or their ids) makes it a pipeline's next step: it starts once they
    ended ``when`` (``ok``, ``failed``, ``any``), in place of the spec's ``after:``. ``cluster`` names one of the
    user config's clusters (docs/clusters.md), or ``"auto"``: the one that would start the job first
    (:attr:`Job.placement` says why); the spec's ``cluster:`` when neither it nor a backend or host is given.
    ``reuse_plan`` (the CLI's way): a spec file seen before, every input unchanged, goes with the plan kept then
    (:mod:`ti_slurm.submitting.plancache`).
    """
    check_host(host)
    plain = reuse_plan and not (host or sync or after or cluster)
    key, done = submit_kept(spec, backend, queue_anyway) if plain else (None, None)
    if done is not None:
        return done
    job_spec = load(spec)
    cluster = named_cluster(job_spec, cluster, backend, host)
    after_on, cluster = on_cluster_of(after_ids(after), cluster, backend or host)
    submission, avoided = uuid.uuid4().hex[:16], list[str]()
    to = choose_target(job_spec, cluster, backend, host, accept_new_host_key, ssh_config, submission)
    job_spec, planned = pipeline_step(to, after, after_on, when)
    keep = keeper(key, to.backend.name) if key and not (to.host or to.cluster or job_spec.code) else None
    info, synced = submit_to(
        to.backend, job_spec, submission, bool(to.host), sync, not queue_anyway, None, planned, to.cluster, avoided,
        keep,
    )  # fmt: skip
    # stamped once the scheduler holds the job: a shared queue answer asked before then lacks it, and one whose
    # time is older than this is asked again (queue.SharedQueue), never read as "the job is gone"
    info.submitted = time.time()
    info.cluster = to.cluster
    info.command_line, info.spec_text = invoked_as(), spec_as_given(spec, job_spec)
    remember_job(info, to.backend)
    submitted = Job(info, to.backend)
    submitted.synced_files, submitted.placement, submitted.avoided = synced, to.placement, avoided
    return submitted


def pipeline_step(
    to: Target, after: Sequence[Job | str], after_on: list[str], when: str
) -> tuple[JobSpec, JobPlan | None]:
    """The spec and plan (None: to be made) of a submit to ``to``: waiting for ``after`` (``after_on``: their
    Slurm ids) in place of the spec's own ``after:``; refused where the backend has no queue to wait in."""
    waits = [getattr(a, "id", a) for a in after] or (to.spec.after.jobs if to.spec.after else [])
    if waits and not to.backend.queues_jobs:  # before the ids are checked: a local job's is no Slurm id
        from ti_slurm.backends.local import NO_PIPELINES

        raise ConfigError("--after" if after else "after", waits, NO_PIPELINES)
    if not after:
        return to.spec, to.plan
    from ti_slurm.submitting.spec import with_after

    return with_after(to.spec, after_on, when), None  # (auto plans the spec's own after:)


def submit_to(
    backend: Backend,
    spec: JobSpec,
    submission: str,
    remote: bool,
    sync: str | None,
    check_fit: bool,
    shape: Callable[[JobPlan], JobPlan] | None = None,
    planned: JobPlan | None = None,
    cluster: str = "",
    said: list[str] | None = None,
    keep: Callable[[JobPlan, str], None] | None = None,
) -> tuple[JobInfo, int | None]:
    """Plan (unless ``planned``: the job as ``--cluster auto`` planned it for this cluster), render and submit
    through ``backend``'s submit seam; the job, and how many files ``sync`` sent. ``shape`` makes the plan what
    is submitted (a sweep's array, or one of its points). The nodes this user's jobs on ``cluster`` avoid are
    left out (:mod:`ti_slurm.submitting.avoided`), each said in a line appended to ``said``; ``keep`` gets the
    plan and script of a job that left none out (:mod:`ti_slurm.submitting.plancache`)."""
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render as render_plan

    job_plan, synced = planned, None
    if sync:  # the files must be there before the job is
        job_plan = job_plan or plan_job(spec, remote=remote, submission=submission)
        synced = backend.upload(sync, job_plan.code_dir or job_plan.workdir or ".")  # code: the snapshot's source
    # Begin first: over SSH the remote half then waits for its input while the plan is made and
    # rendered here, so the remote login shell starts meanwhile. If planning fails, nothing is submitted.
    begun = backend.begin_submit(submission, spec.python or "python3")  # plan_job's choice, remotely
    try:
        job_plan = job_plan or plan_job(spec, remote=remote, submission=submission)
        if spec.code and not remote:  # the code as it is now is what every node of every attempt runs
            from ti_slurm.submitting.packager import snapshot_plan

            job_plan = snapshot_plan(job_plan, spec.code, tuple(spec.code_ignore))
        if shape is not None:
            job_plan = shape(job_plan)
        shaped = job_plan
        job_plan = leave_out_avoided(job_plan, backend, cluster, said)
        script = render_plan(job_plan)  # a remote code snapshot: the login node renders it once taken
        if keep is not None and job_plan is shaped:
            keep(job_plan, script)
    except BaseException:
        backend.abort_submit(begun)
        raise
    ignore = tuple(spec.code_ignore)
    return backend.finish_submit(begun, job_plan, script, check_fit=check_fit, code_ignore=ignore), synced


def submit_kept(spec: SpecLike, backend: str | None, queue_anyway: bool) -> tuple[str | None, Job | None]:
    """A plain submit of a spec file: its plan cache key (:mod:`ti_slurm.submitting.plancache`), and the job
    submitted with the plan kept under it, when one is kept, what planning checked here still holds, and the
    user's jobs leave no node out (those are said, so the whole path says them); else no job."""
    from ti_slurm.submitting.plancache import key_of, recall

    path = path_of(spec)
    key = key_of(path, {"submit": True, "backend": backend}) if path else None
    kept = recall(key) if key else None
    if kept is None or not kept.plan.submission or not kept.still_holds():
        return key, None
    from ti_slurm.routing import open_backend
    from ti_slurm.submitting.avoided import avoided_on

    if avoided_on(""):
        return key, None
    chosen = open_backend(kept.backend)
    submission = uuid.uuid4().hex[:16]
    job_plan, script = kept.for_submission(submission)
    info = chosen.finish_submit(chosen.begin_submit(submission, job_plan.python), job_plan, script, not queue_anyway)
    info.submitted, info.cluster = time.time(), ""
    info.command_line, info.spec_text = invoked_as(), spec_as_given(spec, None)
    remember_job(info, chosen)
    return key, Job(info, chosen)


def keeper(key: str, backend: str) -> Callable[[JobPlan, str], None]:
    """What keeps a plain submit's plan and script under ``key``, once made."""
    from ti_slurm.submitting.plancache import keep

    return lambda plan, script: keep(key, plan, script, backend)


def leave_out_avoided(plan: JobPlan, backend: Backend, cluster: str, said: list[str] | None) -> JobPlan:
    """``plan`` with the nodes this user's jobs avoid on ``cluster`` in its ``--exclude`` (beside the spec's own),
    at most a quarter of its partition's nodes."""
    from ti_slurm.core.hostlist import compress, expand
    from ti_slurm.submitting.avoided import a_quarter, avoided_on
    from ti_slurm.submitting.avoided import said as said_of

    every = avoided_on(cluster) if backend.queues_jobs else []  # the local backend has no nodes to leave out
    if not every:
        return plan
    partition = plan.partition or plan.components[0].partition or ""
    sizes = backend.partition_sizes()
    size = sizes.get(partition) if partition else max(sizes.values(), default=None)
    leave = a_quarter(every, size)
    if not leave:
        return plan
    own = plan.sbatch.get("exclude")
    nodes = sorted({*(expand(own) if isinstance(own, str) and own else []), *(e["node"] for e in leave)})
    if said is not None:
        said.extend(said_of(e) for e in leave)
    return plan.replace(sbatch={**plan.sbatch, "exclude": compress(nodes)})


def resubmit(job: Job) -> Job:
    """Submit ``job`` again as it was planned (its mode, nodes, command, environment, the very code snapshot it
    ran), as a new job of its own: a new submission, where the first went (the same backend, login node or
    cluster), without its pipeline's ``after:`` (those jobs have ended). The console's "resubmit", ModelArts'
    "rebuild"."""
    from ti_slurm.follow.status import ran_plan
    from ti_slurm.submitting.script import render as render_plan

    try:
        plan = ran_plan(job.backend, job.job_dir)
    except PermissionError as exc:  # another user's job: never run as you
        raise UnknownJobError(f"job {job.id}: not resubmitted: {exc}") from None
    except ValueError as exc:
        raise UnknownJobError(f"job {job.id}: {exc}: submit its spec again") from None
    submission = uuid.uuid4().hex[:16]
    plan = plan.replace(submission=submission, dependency="")
    script = render_plan(plan)  # before the submit begins: a remote half is never left waiting
    begun = job.backend.begin_submit(submission, plan.python)
    info = job.backend.finish_submit(begun, plan, script)
    info.submitted, info.cluster = time.time(), job.info.cluster
    info.command_line, info.spec_text = f"resubmit of {job.id} ({invoked_as()})", job.info.spec_text
    remember_job(info, job.backend)
    return Job(info, job.backend)


SPEC_TEXT_MOST = 32 * 1024  # bytes of a spec's text (as JSON) kept in the job's record (the rest cut, and said)


def invoked_as() -> str:
    """The command line of this process, as a user would type it again (``ti-slurm submit job.yaml``; a
    program using the API: its own)."""
    import shlex
    import sys

    argv = list(sys.argv) or ["python3"]
    head = os.path.basename(argv[0])
    argv[0] = "ti-slurm" if head in ("ti-slurm", "__main__.py") else head
    return shlex.join(argv)[:4096]


def spec_as_given(given: SpecLike, spec: JobSpec | None) -> str:
    """The spec as the user gave it: a file's text, else (a mapping, a JobSpec) its settings as YAML."""
    text = ""
    if isinstance(given, str | os.PathLike):
        try:
            with open(given, "rb") as fh:
                text = fh.read(SPEC_TEXT_MOST * 2).decode(errors="replace")
        except OSError:
            text = ""
    if not text and spec is not None:
        import yaml

        text = yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False, allow_unicode=True)
    import json

    keep = len(text)  # measured as the record stores it (JSON's escapes: up to 12 bytes a character)
    while len(json.dumps(text[:keep])) > SPEC_TEXT_MOST:
        keep = keep * 3 // 4
    return text if keep == len(text) else text[:keep] + "\n# ... (cut: the spec is longer)\n"


def remember_job(info: JobInfo, backend: Backend) -> None:
    """Record the job for :func:`get_job` and :func:`jobs`; a failure is a warning (the job runs all the same:
    never a reason to submit it again)."""
    from ti_slurm.follow.registry import remember

    try:
        remember(info)
    except OSError as exc:
        import warnings

        # a Slurm job is found again by its id (the controller knows its directory); a local one only by its record
        follow = "follow it by its id" if backend.finds_jobs_by_id else f"its files are in {info.job_dir}"
        warnings.warn(
            f"job {info.job_id} is submitted, but recording it in {exc.filename or 'the registry'} failed "
            f"({exc.strerror}); {follow}",
            RuntimeWarning,
            stacklevel=3,
        )


def get_job(
    job_id: str, *, host: str | None = None, accept_new_host_key: bool = False, ssh_config: str | None = None
) -> Job:
    """The handle of a job submitted earlier: from this account's records, else asked of the scheduler."""
    return Job(*reach_job(job_id, host, accept_new_host_key=accept_new_host_key, ssh_config=ssh_config))


def jobs(
    *,
    host: str | None = None,
    accept_new_host_key: bool = False,
    ssh_config: str | None = None,
    newest: int | None = None,
    max_age: float | None = None,
) -> list[JobStatus]:
    """The status of every job submitted from this account (optionally only those on ``host``; only the
    ``newest`` so many), oldest first.

    Jobs whose own record has ended need no query; one shared queue query per
    backend and host serves all the others, taken from another process's answer at most ``max_age`` seconds
    old (default :data:`~ti_slurm.follow.queue.SHARED_MAX_AGE`; a job submitted since is asked about anew).
    """
    from ti_slurm.follow.registry import recall_all, recall_newest

    check_host(host)
    if newest:  # from the end of the registry's index: as fast over 100,000 recorded jobs as over 100
        infos = recall_newest(newest, lambda j: not host or j.host == host)
    else:
        infos = sorted((j for j in recall_all() if not host or j.host == host), key=lambda j: j.submitted)
    out: list[JobStatus] = []
    options: dict[str, Any] = {"accept_new_host_key": accept_new_host_key, "ssh_config": ssh_config}
    for name, on_host, cluster in sorted({(j.backend, j.host, j.cluster) for j in infos}):
        group = [j for j in infos if (j.backend, j.host, j.cluster) == (name, on_host, cluster)]
        try:
            out.extend(statuses_of(*backend_of_group(name, on_host, cluster, **options), group, max_age))
        except TiSlurmError as exc:  # one unreachable host, backend or cluster does not hide the other jobs
            where = f"cluster {cluster}" if cluster else f"{name} backend" + (f" on {on_host}" if on_host else "")
            out.extend(
                JobStatus(j.ref, j.name, JobState.UNKNOWN, f"cannot reach its {where}: {exc}", job_dir=j.job_dir)
                for j in group
            )
    order = {j.ref: i for i, j in enumerate(infos)}
    return sorted(out, key=lambda s: order[s.job_id])


class Job:
    """A submitted job: its id, its state, and what can be done with it.

    Following it (:meth:`wait`, :meth:`logs` with ``follow``) reads the job's own record
    (:class:`~ti_slurm.follow.follower.Follower`); the scheduler is asked only to tell pending from running and
    to learn that the job left the queue without a final record, and then rarely (see
    :mod:`ti_slurm.follow.queue`). Its files are read through :class:`~ti_slurm.follow.files.JobFiles`.
    """

    def __init__(self, info: JobInfo, backend: Backend) -> None:
        self.info, self.backend = info, backend
        self.files = JobFiles(info, backend)
        self.synced_files: int | None = None  # submit(sync=...): how many files went up
        self.placement = ""  # submit(cluster="auto"): which cluster it went to, and why
        self.avoided: list[str] = []  # submit: the nodes it was kept off, a line each

    def __repr__(self) -> str:
        return f"Job({self.id!r}, backend={self.backend.name!r})"

    @property
    def id(self) -> str:
        """Its id as users name it (``<cluster>:<id>`` on a named cluster)."""
        return self.info.ref

    @property
    def job_dir(self) -> str:
        return self.info.job_dir

    @property
    def state(self) -> JobState:
        """The job's state now (asks the job's record, and the queue only if the record has not ended)."""
        return self.status().state

    def follower(self, interval: float | None = None) -> Follower:
        """A follower of this job (the console keeps one per open job page, asking on ``interval``)."""
        return Follower(self.info, self.backend, interval)

    def status(self) -> JobStatus:
        """Components, nodes, the failed node and exit codes: the data of ``ti-slurm status --json``."""
        return self.follower().status(ask_now=True)

    def wait(self, timeout: float | None = None, on_change: Callable[[JobStatus], object] | None = None) -> JobStatus:
        """Follow the job until it ends; return its final status (a failed job raises nothing).

        ``on_change`` is called with the status whenever its progress line changes
        (:func:`ti_slurm.follow.status.progress_line`). Past ``timeout`` seconds, a
        :class:`TimeoutError` is raised and the job keeps running.
        """
        from ti_slurm.follow.queue import follow_until_settled
        from ti_slurm.follow.status import progress_line

        if timeout is not None and (not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0):
            raise ConfigError("timeout", timeout, "expected seconds (a number, 0 or more), or None: until it ends")

        def stuck(status: JobStatus) -> str:
            return f"job {self.id} is still {status.state} after {timeout}s"

        status = self.follower().status
        return follow_until_settled(status, progress_line, on_change, timeout, stuck, (0.2, RECORD_POLL_MAX))

    def usage(self, status: JobStatus | None = None) -> list[NodeUsage]:
        """What each node of the latest attempt used (CPU, memory, GPUs), as sampled while it ran."""
        return self.files.usage(status or self.status())

    def cancel(self) -> None:
        """Ask the scheduler to cancel the job (every node's processes are stopped)."""
        from ti_slurm.follow.registry import note_cancelled

        self.backend.cancel(self.info)
        note_cancelled(self.id)

    def log_files(
        self, node: str | None = None, status: JobStatus | None = None, attempt: int | None = None
    ) -> list[tuple[str, str]]:
        """(label, path) of each node's log; ``node`` picks one by its INDEX, its name or ``<component>-<n>``;
        ``attempt`` picks an earlier attempt of a requeued job (default: the latest)."""
        return self.files.log_files(status or self.status(), node, attempt)

    def logs(self, node: str | None = None, follow: bool = False, attempt: int | None = None) -> Iterator[str]:
        """The job's log lines (each node's, headed ``==> label <==`` when there are several); with ``follow``,
        until the job ends, across requeues; ``attempt``: an earlier attempt's."""
        return self.follower().logs(node, follow, attempt)

    def failure_tail(self, status: JobStatus, lines: int = 20) -> str:
        """The last lines of the failed node's log (or of the batch script's output), with the command that shows
        all of it ("" if none)."""
        return self.files.failure_tail(status, lines)
