"""Where a job goes, and where a job is: the backend, login node or cluster of a submit (``--backend``,
``--host``, ``--cluster``, the spec's ``remote:`` and ``cluster:``, the user and site configs), the pipeline's
jobs it waits for (``--after``: within one cluster), and the backend that reaches a job submitted earlier.
Used alike by submit, sweeps, resubmit and every command that follows a job."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ti_slurm.backends import Backend, JobInfo, get_backend
from ti_slurm.core.choices import AUTO_CLUSTER
from ti_slurm.core.errors import ConfigError, UnknownJobError
from ti_slurm.core.plan import JobPlan

if TYPE_CHECKING:  # the spec's models (pydantic): imported by what reads a spec, not by what follows jobs
    from ti_slurm.submitting.spec import JobSpec


@dataclass(frozen=True)
class Target:
    """Where a submit goes."""

    spec: JobSpec  # with the cluster's defaults filled in
    backend: Backend
    host: str = ""  # the login node ("" for this machine)
    cluster: str = ""  # the cluster's name ("" for the default one)
    placement: str = ""  # with ``auto``: why that cluster
    plan: JobPlan | None = None  # with ``auto``: the job as planned for that cluster (submitted as is)


def open_backend(
    name: str, host: str = "", *, accept_new_host_key: bool = False, ssh_config: str | None = None
) -> Backend:
    """The backend called ``name``; a host means the Slurm commands over SSH."""
    return get_backend("ssh" if host else name, host, accept_new_host_key, ssh_config)


def default_backend() -> str:
    """The backend used when none is named: the user config's ``backend``, else the site config's (``slurm``
    unless the admin chose)."""
    from ti_slurm.core.site import load_site_config
    from ti_slurm.submitting.userconfig import read_user_config

    return read_user_config().backend or load_site_config().backend


def named_cluster(spec: JobSpec, cluster: str | None, backend: str | None, host: str | None) -> str | None:
    """The cluster a submit (or a sweep) names: ``cluster``, else the spec's ``cluster:`` unless a backend or host
    says where."""
    return cluster or (None if backend or host else spec.cluster)


def choose_target(
    spec: JobSpec,
    cluster: str | None,
    backend: str | None,
    host: str | None,
    accept_new_host_key: bool = False,
    ssh_config: str | None = None,
    submission: str = "",
) -> Target:
    """Where a submit (or a sweep) goes. ``cluster`` (else the spec's ``cluster:``, unless a backend or host says
    where) names one of the user config's clusters, or ``auto`` (planned with ``submission`` for each); else
    :func:`choose_backend` decides."""
    cluster = named_cluster(spec, cluster, backend, host)
    if not cluster:
        chosen, host = choose_backend(spec, backend, host, accept_new_host_key, ssh_config)
        return Target(spec, chosen, host)
    if backend or host:
        why = "says how to reach the cluster: give no backend (--local, --backend) or host beside it"
        raise ConfigError("cluster", cluster, why)
    from ti_slurm.clusters import choose_cluster, open_cluster, with_defaults

    target, placement, planned = choose_cluster(spec, cluster, submission)
    reached = open_cluster(target, accept_new_host_key, ssh_config)
    return Target(with_defaults(spec, target), reached, target.host, target.name, placement, planned)


def choose_backend(
    spec: JobSpec, backend: str | None, host: str | None, accept_new_host_key: bool, ssh_config: str | None
) -> tuple[Backend, str]:
    """The backend a submit goes through, and the login node it reaches ("" for this machine): ``host``, else the
    spec's ``remote.host`` and then the user config's, unless ``backend`` is named."""
    if host is None:
        from ti_slurm.submitting.userconfig import read_user_config

        host = "" if backend else (spec.remote.host if spec.remote else "") or read_user_config().remote.host
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


def reach_job(job_id: str, host: str | None, **options: Any) -> tuple[JobInfo, Backend]:
    """A job submitted earlier and the backend that reaches it: from this account's records, else asked of the
    scheduler (``<cluster>:<id>``: of that cluster, recorded or not)."""
    from ti_slurm.follow.registry import recall

    check_job_id(job_id)
    check_host(host)
    info = recall(job_id)
    host = host or (info.host if info else "")
    cluster, _, plain_id = job_id.rpartition(":")
    if cluster:
        from ti_slurm.clusters import find_cluster, open_cluster

        reached = open_cluster(find_cluster(cluster), **options)
        if info is None:
            job_dir = reached.find_job_dir(plain_id) or ""
            info = JobInfo(plain_id, backend=reached.name, job_dir=job_dir, cluster=cluster)
        return info, reached
    if info is None:
        if job_id.startswith("local-"):
            raise UnknownJobError(f"job {job_id}: unknown local job (not submitted from this account)")
        backend = open_backend(default_backend(), host, **options)
        return JobInfo(job_id, backend=backend.name, job_dir=backend.find_job_dir(job_id) or "", host=host), backend
    return info, open_backend(info.backend, host, **options)


def backend_of_group(name: str, host: str, cluster: str, **options: Any) -> tuple[Backend, str]:
    """The backend that reaches recorded jobs of backend ``name`` on ``host`` or ``cluster``, and the key their
    shared queue answers go by."""
    if not cluster:
        return open_backend(name, host, **options), host
    from ti_slurm.clusters import find_cluster, open_cluster

    return open_cluster(find_cluster(cluster), **options), f"cluster:{cluster}"


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
