"""Several clusters: the ones a user has (the user config's ``[[cluster]]`` tables), how each is reached, which
answers and what it has free, and which would start a job first.

Each cluster is reached one of three ways, by the keys its table has: ``slurm_conf`` (this machine's Slurm
commands pointed at that cluster's ``slurm.conf``, with ``bin_dir`` first on ``PATH`` when its commands are
of another release), ``host`` (the Slurm commands over SSH on its login node) or ``rest_url`` (slurmrestd,
with ``rest_token``). ``slurm_cluster`` names a cluster of a Slurm multi-cluster setup (one slurmdbd that
knows every controller): the commands (this machine's, or those ``slurm_conf`` or ``host`` reach) are sent to
it with ``--clusters``. ``partition``, ``account`` and ``qos`` are the cluster's defaults for a spec that sets
none. A job submitted to a named cluster is shown as ``<cluster>:<id>`` and followed there.

A name that no table has may still be a cluster of this machine's multi-cluster setup (``sacctmgr list
clusters``): it is reached as a table ``{name, slurm_cluster: name}`` would be. With no tables at all, those
clusters are the ones ``clusters`` lists and ``auto`` chooses from.

``auto`` plans the job for every cluster (its defaults filled in) and asks each backend when it would start it
(``Backend.start_estimate``: ``sbatch --test-only`` with the job's own script; through slurmrestd, whether its
partition has the job's nodes idle), in parallel, each within :data:`ASK_TIMEOUT`; a cluster that does not
answer in time is skipped and named. The chosen cluster's plan is the one submitted. This module keeps the
tables and the choice; the backends (``backends/clusters.py``) reach the clusters and parse their answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ti_slurm.backends.base import Backend, StartEstimate
from ti_slurm.backends.clusters import ASK_TIMEOUT, multicluster_names, open_cluster
from ti_slurm.core.choices import AUTO_CLUSTER
from ti_slurm.core.errors import BackendError, ConfigError, TiSlurmError
from ti_slurm.core.plan import JobPlan
from ti_slurm.submitting.userconfig import Cluster, read_user_config

__all__ = ["ASK_TIMEOUT", "Cluster", "Estimate", "choose_cluster", "estimate_all", "find_cluster", "free_nodes",
           "free_nodes_of", "known_clusters", "open_cluster", "pick", "user_clusters", "with_defaults"]  # fmt: skip
Answer = TypeVar("Answer")


def user_clusters() -> list[Cluster]:
    """The user config's ``[[cluster]]`` tables."""
    return list(read_user_config().cluster)


def known_clusters() -> list[Cluster]:
    """The clusters ``clusters`` lists and ``auto`` chooses from: the user config's, or with none there, those of
    this machine's Slurm multi-cluster setup when it has more than one."""
    mine = user_clusters()
    if mine:
        return mine
    names = multicluster_names()
    return [Cluster(name=name, slurm_cluster=name) for name in names] if len(names) > 1 else []


def find_cluster(name: str, clusters: Sequence[Cluster] | None = None) -> Cluster:
    """The user config's cluster ``name``, else this machine's multi-cluster setup's; one line when neither has
    it."""
    clusters = user_clusters() if clusters is None else clusters
    for cluster in clusters:
        if cluster.name == name:
            return cluster
    slurms = multicluster_names()
    if name in slurms:
        return Cluster(name=name, slurm_cluster=name)
    known = [f"yours: {', '.join(c.name for c in clusters)}"] if clusters else []
    known += [f"this machine's Slurm reaches: {', '.join(slurms)}"] if slurms else []
    have = "; ".join(known) or "yours: none: add [[cluster]] tables to your user config (docs/clusters.md)"
    raise ConfigError("cluster", name, f"no such cluster ({have})")


# -- which cluster would start a job first ---------------------------------------------------------------------
@dataclass
class Estimate:
    """When ``cluster`` would start a job, and the job as planned for it (submitted as is when chosen)."""

    cluster: Cluster
    start: str = ""  # when it would start ("now", Slurm's time: 2026-12-05T11:30:00), "" when not known
    why: str = ""  # why not known / not answering
    plan: JobPlan | None = None


def free_nodes(backend: Backend) -> dict[str, int]:
    """Idle nodes per partition, as the cluster's backend says ({} when it cannot tell)."""
    return backend.idle_nodes() if backend.knows_free_nodes else {}


def free_nodes_of(clusters: Sequence[Cluster]) -> list[dict[str, int] | str]:
    """Each cluster's idle nodes per partition, asked of all at once, or why it gave none."""

    def ask(cluster: Cluster) -> dict[str, int] | str:
        try:
            return free_nodes(open_cluster(cluster))
        except TiSlurmError as exc:
            return str(exc)

    answers = ask_all(clusters, ask)
    return [f"no answer within {ASK_TIMEOUT:.0f} s" if a is None else a for a in answers]


def earliest(estimates: Sequence[Estimate]) -> Estimate | None:
    """The estimate that starts first: "now" before any time, a time before none; None when none answered."""
    answered = [e for e in estimates if e.start]
    if not answered:
        return None
    return min(answered, key=lambda e: "" if e.start == "now" else e.start)


def ask_all(clusters: Sequence[Cluster], ask: Callable[[Cluster], Answer]) -> list[Answer | None]:
    """``ask(cluster)`` for every cluster at once; one that has not answered within :data:`ASK_TIMEOUT`, or
    failed, is None (its thread is left behind: it holds nothing up, not even this process's exit)."""
    answers: list[Answer | None] = [None] * len(clusters)

    def one(k: int) -> None:
        answers[k] = ask(clusters[k])

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(clusters))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + ASK_TIMEOUT
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return list(answers)


def with_defaults(spec: Any, cluster: Cluster) -> Any:
    """``spec`` (a JobSpec) with the cluster's partition, account and QoS where it sets none."""
    return spec.model_copy(update={k: v for k, v in cluster.defaults().items() if not getattr(spec, k)})


def choose_cluster(spec: Any, name: str, submission: str = "") -> tuple[Cluster, str, JobPlan | None]:
    """The cluster a submit goes to (``name``, or ``auto``: the one that would start ``spec`` first), and for
    ``auto`` the line that says why and the job as planned for that cluster (with ``submission``)."""
    if name != AUTO_CLUSTER:
        return find_cluster(name), "", None
    clusters = known_clusters()
    if not clusters:
        raise ConfigError("cluster", name, "no clusters to choose from: add [[cluster]] tables to your user config")
    return pick(estimate_all(spec, clusters, submission))


def estimate_all(spec: Any, clusters: Sequence[Cluster], submission: str = "") -> list[Estimate]:
    """When each of ``clusters`` would start ``spec`` (planned for it: its own defaults filled in, and a login
    node's paths for a cluster reached over SSH), asked of all at once."""
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render

    def ask(cluster: Cluster) -> Estimate:
        try:
            job_plan = plan_job(with_defaults(spec, cluster), remote=bool(cluster.host), submission=submission)
            answer = open_cluster(cluster).start_estimate(job_plan, render(job_plan))
        except TiSlurmError as exc:
            answer, job_plan = StartEstimate("", str(exc)), None
        return Estimate(cluster, answer.start, answer.why, job_plan)

    answers = ask_all(clusters, ask)
    return [a if a is not None else Estimate(c, "", f"no answer within {ASK_TIMEOUT:.0f} s")
            for c, a in zip(clusters, answers, strict=True)]  # fmt: skip


def pick(estimates: Sequence[Estimate]) -> tuple[Cluster, str, JobPlan | None]:
    """The cluster that would start the job first, the line that says why (naming the others), and the job as
    planned for it."""
    best = earliest(estimates)
    if best is None:
        said = "; ".join(f"{e.cluster.name}: {e.why or 'no start time'}" for e in estimates)
        raise BackendError(f"no cluster says when the job would start ({said})")
    others = "; ".join(
        f"{e.cluster.name}: {'at ' + e.start if e.start and e.start != 'now' else e.start or e.why or 'later'}"
        for e in estimates if e is not best
    )  # fmt: skip
    when = "now" if best.start == "now" else f"at {best.start}"
    line = f"to cluster {best.cluster.name}: it would start the job {when}" + (f" ({others})" if others else "")
    return best.cluster, line, best.plan
