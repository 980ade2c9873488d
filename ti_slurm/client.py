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
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

from ti_slurm.backends import Backend, JobInfo, get_backend
from ti_slurm.core.choices import AUTO_CLUSTER
from ti_slurm.core.errors import BackendError, ConfigError, SpecError, TiSlurmError, UnknownJobError
from ti_slurm.core.events import parse_events
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import JobStatus, job_status
from ti_slurm.submitting.spec import JobSpec, load_spec, parse_spec, with_after

if TYPE_CHECKING:
    pass

SpecLike: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | JobSpec"
"""A spec file's path, a decoded spec document, or a validated :class:`JobSpec`."""

TAIL_BYTES = 64 * 1024  # what a failure's last lines are read from
LOG_CHUNK = 1 << 20  # logs are read (and sent over SSH) this much at a time
RECORD_POLL_MAX = 1.0  # seconds between reads of a followed job's own record, at most (no controller call)


def load(spec: SpecLike) -> JobSpec:
    """A validated spec from a file path, a mapping, or a :class:`JobSpec`."""
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


def render(spec: SpecLike, *, python: str | None = None) -> str:
    """The sbatch script ``submit`` would send (a dry run)."""
    from ti_slurm.submitting.script import render as render_plan

    return render_plan(plan(spec, python=python))


def open_backend(
    name: str, host: str = "", *, accept_new_host_key: bool = False, ssh_config: str | None = None
) -> Backend:
    """The backend called ``name``; a host means the Slurm commands over SSH."""
    return get_backend("ssh" if host else name, host, accept_new_host_key, ssh_config)


def default_backend() -> str:
    """The backend used when none is named: the user config's ``backend``, else the site config's (``slurm``
    unless the admin chose)."""
    from ti_slurm.core.choices import NAMED_BACKENDS
    from ti_slurm.core.site import load_site_config
    from ti_slurm.submitting.userconfig import user_backend, user_config_path

    own = user_backend()
    if own and own not in NAMED_BACKENDS:
        raise ConfigError("user config", user_config_path(), f"backend = {own!r}: expected one of {NAMED_BACKENDS}")
    return own or load_site_config().backend


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
) -> Job:
    """Submit a job; return its handle once the scheduler has its id.

    ``backend`` is ``"slurm"`` (the Slurm commands; the default unless the site
    config's ``backend`` says otherwise), ``"pyslurm"`` (libslurm in this
    process) or ``"local"`` (every node a process on this machine). ``host`` submits over SSH to a login
    node (``host``, ``user@host[:port]`` or an ``~/.ssh/config`` alias); without
    it, the spec's ``remote.host`` and then the user config's are used, unless
    ``backend`` is given. ``sync`` uploads a directory's changed files to the
    remote workdir first. A job that can never start on its partition as it
    stands (more nodes or GPUs per node than it has, no such partition, a time
    above its maximum) is refused with a :class:`SubmissionError` and nothing is
    submitted, unless ``queue_anyway`` (say, for nodes about to be added). The
    job is recorded so :func:`get_job` and :func:`jobs` find it later, from
    this process or another. ``after`` (jobs or their ids) makes it a pipeline's next step: it starts once
    they ended ``when`` (``ok``, ``failed``, ``any``), in place of the spec's ``after:``. ``cluster`` names one
    of the user config's clusters (docs/clusters.md), or ``"auto"``: the one that would start the job first
    (:attr:`Job.placement` says why); the spec's ``cluster:`` when neither it nor a backend or host is given.
    """
    check_host(host)
    job_spec = load(spec)
    cluster = named_cluster(job_spec, cluster, backend, host)
    after_on, cluster = on_cluster_of(after_ids(after), cluster, backend or host)
    where = choose_target(job_spec, cluster, backend, host, accept_new_host_key, ssh_config)
    job_spec, chosen, host, target, placement = where
    waits = [getattr(a, "id", a) for a in after] or (job_spec.after.jobs if job_spec.after else [])
    if waits and not chosen.queues_jobs:  # before the ids are checked: a local job's is no Slurm id
        from ti_slurm.backends.local import NO_PIPELINES

        raise ConfigError("--after" if after else "after", waits, NO_PIPELINES)
    if after:
        job_spec = with_after(job_spec, after_on, when)
    submission = uuid.uuid4().hex[:16]
    info, synced = submit_to(chosen, job_spec, submission, bool(host), sync, check_fit=not queue_anyway)
    # stamped once the scheduler holds the job: a shared queue answer asked before then lacks it, and one whose
    # time is older than this is asked again (queue.SharedQueue), never read as "the job is gone"
    info.submitted = time.time()
    info.cluster = target
    remember_job(info, chosen)
    submitted = Job(info, chosen)
    submitted.synced_files, submitted.placement = synced, placement
    return submitted


def named_cluster(spec: JobSpec, cluster: str | None, backend: str | None, host: str | None) -> str | None:
    """The cluster a submit (or a sweep) names: ``cluster``, else the spec's ``cluster:`` unless a backend or host
    says where."""
    return cluster or (None if backend or host else spec.cluster)


def choose_target(
    spec: JobSpec,
    cluster: str | None,
    backend: str | None,
    host: str | None,
    accept_new_host_key: bool,
    ssh_config: str | None,
) -> tuple[JobSpec, Backend, str, str, str]:
    """Where a submit (or a sweep) goes: the spec (with a cluster's defaults), the backend, the login node, the
    cluster's name and (``auto``) why that one. ``cluster`` (else the spec's ``cluster:``, unless a backend or
    host says where) names one of the user config's clusters; else ``choose_backend`` decides."""
    cluster = named_cluster(spec, cluster, backend, host)
    if not cluster:
        chosen, host = choose_backend(spec, backend, host, accept_new_host_key, ssh_config)
        return spec, chosen, host, "", ""
    if backend or host:
        why = "says how to reach the cluster: give no backend (--local, --backend) or host beside it"
        raise ConfigError("cluster", cluster, why)
    return to_cluster(spec, cluster, accept_new_host_key, ssh_config)


def to_cluster(
    spec: JobSpec, name: str, accept_new_host_key: bool, ssh_config: str | None
) -> tuple[JobSpec, Backend, str, str, str]:
    """A submit to cluster ``name`` (or ``auto``): the spec with the cluster's defaults, the backend and login
    node that reach it, the cluster's name, and (``auto``) why that cluster."""
    from ti_slurm.clusters import choose_cluster, open_cluster, with_defaults

    target, placement = choose_cluster(spec, name)
    backend = open_cluster(target, accept_new_host_key, ssh_config)
    return with_defaults(spec, target), backend, target.host, target.name, placement


def choose_backend(
    spec: JobSpec, backend: str | None, host: str | None, accept_new_host_key: bool, ssh_config: str | None
) -> tuple[Backend, str]:
    """The backend a submit goes through, and the login node it reaches ("" for this machine): ``host``, else the
    spec's ``remote.host`` and then the user config's, unless ``backend`` is named."""
    if host is None:
        from ti_slurm.submitting.userconfig import user_remote_host

        host = "" if backend else (spec.remote.host if spec.remote else "") or user_remote_host()
    if host and backend not in (None, "slurm", "ssh"):
        why = f"runs on this machine; a host ({host}) means the Slurm commands over SSH"
        raise ConfigError("backend", backend, why)
    if host:
        return get_backend("ssh", host, accept_new_host_key, ssh_config), host  # one line if paramiko is missing
    return open_backend(backend or default_backend()), host


def after_ids(after: Sequence[object]) -> list[str]:
    """The Slurm job ids ``after`` names: jobs, their ids, and sweeps (a job array's id waits for all of its
    tasks; a sweep of separate jobs is each of them)."""
    from ti_slurm.follow.registry import sweep_job_ids

    ids: list[Any] = []  # what is no id as text is with_after's to refuse, in one line
    for item in after:
        given = getattr(item, "id", item)  # a Job, a Sweep, or an id
        ids += sweep_job_ids(given) if isinstance(given, str) else [given]
    return ids


def on_cluster_of(ids: list[str], cluster: str | None, elsewhere: object) -> tuple[list[str], str | None]:
    """A pipeline waits within one cluster: ids that name theirs (``old:123``, a sweep's points on ``old``) send
    the job there, as Slurm's ids (``123``); the submit's ``cluster`` (:func:`named_cluster`) must be that one
    or ``auto``, and no backend or host may say where instead (``elsewhere``). Jobs of two clusters, or of one
    beside jobs of the default cluster, are one line."""
    named = {str(i).rpartition(":")[0] for i in ids}
    if named <= {""}:
        return ids, cluster
    text = " ".join(str(i) for i in ids)
    if len(named) > 1:
        on = ", ".join(sorted(n or "the default one" for n in named))
        why = f"a job waits only for jobs of its own cluster: these are on {on}"
        raise ConfigError("after", text, why)
    (name,) = named
    if cluster not in (None, name, AUTO_CLUSTER) or elsewhere:
        why = f"these jobs are on cluster {name}, and a job waits only for jobs of its own cluster: submit there"
        raise ConfigError("after", text, why + f" (--cluster {name})")
    return [str(i).rpartition(":")[2] for i in ids], name


def submit_to(
    backend: Backend,
    spec: JobSpec,
    submission: str,
    remote: bool,
    sync: str | None,
    check_fit: bool,
    shape: Callable[[JobPlan], JobPlan] | None = None,
) -> tuple[JobInfo, int | None]:
    """Plan, render and submit through ``backend``'s submit seam; the job, and how many files ``sync`` sent.
    ``shape`` makes the plan what is submitted (a sweep's array, or one of its points)."""
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render as render_plan

    job_plan, synced = None, None
    if sync:  # the files must be there before the job is
        job_plan = plan_job(spec, remote=remote, submission=submission)
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
        script = render_plan(job_plan)  # a remote code snapshot: the login node renders it once taken
    except BaseException:
        backend.abort_submit(begun)
        raise
    ignore = tuple(spec.code_ignore)
    return backend.finish_submit(begun, job_plan, script, check_fit=check_fit, code_ignore=ignore), synced


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
    remember_job(info, job.backend)
    return Job(info, job.backend)


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
    from ti_slurm.follow.registry import recall

    check_job_id(job_id)
    check_host(host)
    info = recall(job_id)
    host = host or (info.host if info else "")
    options: dict[str, Any] = {"accept_new_host_key": accept_new_host_key, "ssh_config": ssh_config}
    cluster, _, plain_id = job_id.rpartition(":")
    if cluster:  # <cluster>:<id>: followed on that cluster, recorded or not
        from ti_slurm.clusters import find_cluster, open_cluster

        reached = open_cluster(find_cluster(cluster), **options)
        if info is None:
            job_dir = reached.find_job_dir(plain_id) or ""
            info = JobInfo(plain_id, backend=reached.name, job_dir=job_dir, cluster=cluster)
        return Job(info, reached)
    if info is None:
        if job_id.startswith("local-"):
            raise UnknownJobError(f"job {job_id}: unknown local job (not submitted from this account)")
        backend = open_backend(default_backend(), host, **options)
        info = JobInfo(job_id, backend=backend.name, job_dir=backend.find_job_dir(job_id) or "", host=host)
        return Job(info, backend)
    return Job(info, open_backend(info.backend, host, **options))


# a job, an array task, a het component, a local run, a sweep of separate jobs: ASCII digits only (\d takes any
# script's digits, which would reach scontrol), of the lengths Slurm's 32-bit ids have
JOB_ID = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9_-]{0,31}:)?[0-9]{1,10}(?:_[0-9]{1,10})?(?:\+[0-9]{1,4})?"  # <cluster>: on a named one
    r"|local-[0-9]{1,12}|sweep-(?:local-|[A-Za-z][A-Za-z0-9_-]{0,31}:)?[0-9]{1,12}"
)


def check_host(host: object) -> None:
    """The API's ``host`` is a login node's name as text (``host=5`` would fail deep inside SSH)."""
    if host is not None and not isinstance(host, str):
        raise ConfigError("host", host, "expected a login node as text: host, user@host[:port] or an ssh alias")


def check_job_id(job_id: object) -> None:
    """Refuse what is not a job id, before it reaches a registry path or a Slurm command line (``--me`` would
    make ``scancel --me`` of it: every job of the account)."""
    if not isinstance(job_id, str):
        raise ConfigError("job id", job_id, "expected the id as text, as submit printed it (e.g. '5603576')")
    if not JOB_ID.fullmatch(job_id):
        why = (
            "not a job id (digits, an array task 123_4, a component 123+1, gpu:123 on cluster gpu, local-N, or a"
            " sweep's sweep-N)"
        )
        raise ConfigError("job id", job_id, why)


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
    from ti_slurm.follow.registry import recall_all

    check_host(host)
    infos = sorted((j for j in recall_all() if not host or j.host == host), key=lambda j: j.submitted)  # oldest first
    infos = infos[-newest:] if newest else infos
    out: list[JobStatus] = []
    options: dict[str, Any] = {"accept_new_host_key": accept_new_host_key, "ssh_config": ssh_config}
    for name, on_host, cluster in sorted({(j.backend, j.host, j.cluster) for j in infos}):
        group = [j for j in infos if (j.backend, j.host, j.cluster) == (name, on_host, cluster)]
        try:
            out.extend(_statuses(group, name, on_host, cluster, max_age, **options))
        except TiSlurmError as exc:  # one unreachable host, backend or cluster does not hide the other jobs
            where = f"cluster {cluster}" if cluster else f"{name} backend" + (f" on {on_host}" if on_host else "")
            out.extend(
                JobStatus(j.ref, j.name, JobState.UNKNOWN, f"cannot reach its {where}: {exc}", job_dir=j.job_dir)
                for j in group
            )
    order = {j.ref: i for i, j in enumerate(infos)}
    return sorted(out, key=lambda s: order[s.job_id])


def _statuses(
    group: list[JobInfo], name: str, host: str, cluster: str, max_age: float | None, **options: Any
) -> list[JobStatus]:
    """The status of jobs of one backend, host and cluster: their records, and one shared queue query for the
    unended."""
    if not cluster:
        return statuses_of(open_backend(name, host, **options), host, group, max_age)
    from ti_slurm.clusters import find_cluster, open_cluster

    return statuses_of(open_cluster(find_cluster(cluster), **options), f"cluster:{cluster}", group, max_age)


def statuses_of(backend: Backend, host: str, group: list[JobInfo], max_age: float | None = None) -> list[JobStatus]:
    """The status of jobs of ``backend``: their records, and for the unended one shared queue answer at most
    ``max_age`` old (default: :data:`~ti_slurm.follow.queue.SHARED_MAX_AGE`)."""
    from ti_slurm.follow.queue import SHARED_MAX_AGE, SharedQueue
    from ti_slurm.follow.status import recorded_end

    records = {j.job_id: read_events(backend, j) for j in group}
    unended = [j for j in group if not recorded_end(j, records[j.job_id])]  # only these need the queue
    age = SHARED_MAX_AGE if max_age is None else max_age
    queued = SharedQueue(backend, host).states(unended, age) if unended else {}
    return [job_status(j, records[j.job_id], queued.get(j.job_id)) for j in group]


class Follower:
    """One job's status over time: its record read every time, the queue asked on a backoff.

    The queue is first asked right away, or, for a job this process has just
    submitted, after FOLLOW_FIRST seconds (its record often says it runs by
    then); then again after twice as long each time, up to FOLLOW_MAX. Once
    the record shows the job running, its supervisor's "alive" events (one a
    minute) say it still runs: the queue is asked only when the record has not
    grown for RECORD_STALE seconds (the supervisor was killed, its node was
    lost), and then every FOLLOW_MAX. A record with its final event needs no
    queue at all.
    """

    def __init__(self, job: Job, interval: float | None = None) -> None:
        from ti_slurm.follow.queue import FOLLOW_FIRST, UserQueue

        self.job = job
        self.interval = interval or FOLLOW_FIRST  # a console's: FOLLOW_MAX from the start (the list's answers)
        just_submitted = job.info.submitted and time.time() - job.info.submitted < FOLLOW_FIRST
        self.next_ask = time.monotonic() + (FOLLOW_FIRST if just_submitted else 0.0)
        # until the queue is asked, a job just submitted counts as what sbatch left it: pending
        self.queued: JobInfo | None = replace(job.info, reason="submitted")
        self.seen_running = False
        self.events_seen, self.changed_at = 0, time.monotonic()  # when the job's record last grew
        self.asks_controller = isinstance(job.backend, UserQueue)  # else asking costs nothing: ask every time

    def status(self, ask_now: bool = False) -> JobStatus:
        from ti_slurm.follow.queue import FOLLOW_MAX, RECORD_STALE, SHARED_MAX_AGE
        from ti_slurm.follow.status import recorded_end

        job = self.job
        events = read_events(job.backend, job.info)
        if recorded_end(job.info, events):
            return job_status(job.info, events, None)
        now = time.monotonic()
        if len(events) != self.events_seen:
            self.events_seen, self.changed_at = len(events), now
        if self.seen_running and now - self.changed_at < RECORD_STALE and self.asks_controller:
            self.next_ask = max(self.next_ask, now)  # its supervisor says it is alive: the controller is not asked
        elif ask_now or now >= self.next_ask or not self.asks_controller:  # a local job's "queue": a pid check
            max_age = SHARED_MAX_AGE if ask_now else self.interval
            self.queued = job.queue.states([job.info], max_age).get(job.info.job_id)  # Slurm's id, not gpu:123
            self.next_ask, self.interval = now + self.interval, min(self.interval * 2, FOLLOW_MAX)
            gone = self.queued is None or self.queued.state.is_terminal
            if gone and job.job_dir:  # it left the queue: its last record may still be landing
                time.sleep(1.0)
                events = read_events(job.backend, job.info)
        status = job_status(job.info, events, self.queued)
        if not events and status.state is JobState.UNKNOWN and job.directory_gone():  # a job never started has none
            status.reason = f"its job directory {job.job_dir} is gone (deleted while the job ran?): {status.reason}"
        if status.state.is_terminal and job.job_dir:  # ended, and its record did not say so: the batch output may
            job.add_batch_output(status)
        if status.state is JobState.RUNNING and status.components and not self.seen_running:
            self.seen_running = True  # from now on the queue only tells that it vanished: rarely
            self.interval = FOLLOW_MAX
        if status.state is JobState.UNKNOWN and not status.components and not job.info.name:
            raise UnknownJobError(f"job {job.id}: not queued and no record of it here (unknown id, or not yours)")
        return status


def read_events(backend: Backend, info: JobInfo) -> list[dict[str, Any]]:
    """The job's events from its ``status.jsonl``, through whichever backend reaches it."""
    return parse_events(backend.read_text(JobPaths(info.job_dir).status)) if info.job_dir else []


class Job:
    """A submitted job: its id, its state, and what can be done with it.

    Following it (:meth:`wait`, :meth:`logs` with ``follow``) reads the job's own
    record; the scheduler is asked only to tell pending from running and to
    learn that the job left the queue without a final record, and then rarely
    (see :mod:`ti_slurm.follow.queue`).
    """

    def __init__(self, info: JobInfo, backend: Backend) -> None:
        from ti_slurm.follow.queue import SharedQueue

        self.info, self.backend = info, backend
        self.queue = SharedQueue(backend, info.host or (f"cluster:{info.cluster}" if info.cluster else ""))
        self.synced_files: int | None = None  # submit(sync=...): how many files went up
        self.placement = ""  # submit(cluster="auto"): which cluster it went to, and why

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

    def status(self) -> JobStatus:
        """Components, nodes, the failed node and exit codes: the data of ``ti-slurm status --json``."""
        return Follower(self).status(ask_now=True)

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
        follower = Follower(self)

        def stuck(status: JobStatus) -> str:
            return f"job {self.id} is still {status.state} after {timeout}s"

        return follow_until_settled(follower.status, progress_line, on_change, timeout, stuck, (0.2, RECORD_POLL_MAX))

    def usage(self, status: JobStatus | None = None) -> list[Any]:
        """What each node of the latest attempt used (:class:`ti_slurm.follow.usage.NodeUsage`: CPU, memory, GPUs), as
        sampled while it ran; nodes with no sample yet are left out."""
        from ti_slurm.follow.usage import NodeUsage

        status = status or self.status()
        paths = JobPaths(status.job_dir)
        found = []
        for comp in status.components:
            for n in range(len(comp.nodes)):
                label = node_label(comp.name, n)
                usage = NodeUsage.parse(label, self.backend.read_text(paths.node_usage(comp.name, n)))
                if usage is not None:
                    found.append(usage)
        return found

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
        status = status or self.status()
        paths = JobPaths(status.job_dir)
        names = [name for comp in status.components for name in comp.nodes]
        if attempt is not None and (not status.attempts or attempt != status.attempts[-1].attempt):
            earlier = [a for a in status.attempts if a.attempt == attempt]
            if not earlier:
                numbers = ", ".join(str(a.attempt) for a in status.attempts) or "0"
                raise ConfigError("attempt", attempt, f"job {self.id} has no such attempt (attempts: {numbers})")
            paths, names = paths.attempt(attempt), earlier[0].nodes
        files: list[tuple[str, str]] = []
        index = 0
        for comp in status.components:
            for n in range(len(comp.nodes)):
                name = names[index] if index < len(names) else "?"
                label = node_label(comp.name, n)
                if node is None or node in (label, name, str(index)):
                    files.append((f"{label} ({name})", paths.node_log(comp.name, n)))
                index += 1
        if node is not None and not files:
            raise ConfigError(
                "node", node, f"no such node in job {self.id} (use an INDEX, a node name or <component>-<n>)"
            )
        return files

    def logs(self, node: str | None = None, follow: bool = False, attempt: int | None = None) -> Iterator[str]:
        """The job's log lines (each node's, headed ``==> label <==`` when there are several).

        With ``follow``, keep yielding new lines until the job ends, across requeues (each
        attempt's logs in turn); a line still being written waits until it is complete.
        ``attempt`` shows an earlier attempt's logs instead (they are kept).
        """
        offsets: dict[str, int] = {}  # bytes of each log already shown: only what was appended is read again
        follower = Follower(self)
        status = follower.status()
        if status.state is JobState.UNKNOWN and self.directory_gone():  # a job not started has none yet
            raise BackendError(f"job {self.id}: no logs to show: its job directory {self.job_dir} is gone")
        shown_attempt: int | None = None
        while True:
            last_round = not follow or status.settled
            if not status.components and not last_round:  # not started yet: no node to name
                time.sleep(1.0)
                status = follower.status()
                continue
            latest = status.attempts[-1].attempt if status.attempts else 0
            if attempt is None and latest != shown_attempt:
                if shown_attempt is not None:
                    yield f"==> attempt {latest} (TI_SLURM_RESTART_COUNT={latest}) <=="
                shown_attempt, offsets = latest, {}  # the same files, anew: the earlier ones were moved aside
            for label, path in self.log_files(node, status, attempt):
                headed = node is not None
                for lines in self._new_lines(path, offsets, last_round):
                    if not headed:
                        headed = True
                        yield f"==> {label} <=="
                    yield from lines
            if last_round:
                return
            time.sleep(1.0)
            status = follower.status()

    def _new_lines(self, path: str, offsets: dict[str, int], to_the_end: bool) -> Iterator[list[str]]:
        """What a log gained since ``offsets[path]``, a chunk at a time (a log may be gigabytes), in whole lines;
        a line still being written waits, unless ``to_the_end`` or it is longer than a chunk (then it comes in
        pieces, never read again)."""
        while True:
            start = offsets.get(path, 0)
            chunk = self.backend.read_bytes(path, start, LOG_CHUNK) or b""
            full = len(chunk) == LOG_CHUNK
            end = chunk.rfind(b"\n") + 1
            if (to_the_end and not full) or (full and end == 0):
                end = len(chunk)
            if end == 0:
                return
            offsets[path] = start + end
            yield chunk[:end].decode(errors="replace").splitlines()
            if not full:
                return

    def directory_gone(self) -> bool:
        """Whether the job's directory is gone (its plan, written at submit, is no longer there)."""
        return bool(self.job_dir) and self.backend.read_text(JobPaths(self.job_dir).plan) is None

    def add_batch_output(self, status: JobStatus, lines: int = 20) -> None:
        """Where the batch script's own output is, and its last lines (the job ended without a final record:
        the cause, say a Python without ti-slurm or a full disk, is there)."""
        paths = JobPaths(self.job_dir)
        path = self.backend.batch_log(paths)
        tail = self.last_lines(path, lines)
        if tail:
            status.batch_output, status.batch_tail = path, tail
            status.reason += f"; its batch output: {path}"

    def last_lines(self, path: str, lines: int) -> list[str]:
        """The last ``lines`` lines of a job file, from its last bytes only (a log may be gigabytes)."""
        end = self.backend.read_end(path, TAIL_BYTES)
        return end[1].decode(errors="replace").splitlines()[-lines:] if end else []

    def failure_tail(self, status: JobStatus, lines: int = 20) -> str:
        """The last lines of the failed node's log (or, when no node failed, of the batch script's output),
        with the command that shows all of it ("" if none)."""
        if status.batch_tail and not status.failed:
            head = f"ti-slurm: last {len(status.batch_tail)} lines of {status.batch_output}:\n"
            return head + "".join(f"  | {line}\n" for line in status.batch_tail)
        comp, index = status.failed.get("component"), status.failed.get("index")
        if comp is None or index is None or not status.job_dir:
            return ""
        label = node_label(comp, index)
        tail = self.last_lines(JobPaths(status.job_dir).node_log(comp, index), lines)
        if not tail:
            return ""
        everything = f"ti-slurm logs {status.job_id} --node {label}"
        head = f"ti-slurm: last {len(tail)} lines of {label}.log (all of it: {everything}):\n"
        return head + "".join(f"  | {line}\n" for line in tail)
