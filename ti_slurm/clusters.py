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

``auto`` asks every cluster when the job would start (``sbatch --test-only`` with the job's own script, in
parallel, each within :data:`ASK_TIMEOUT`); a cluster that does not answer in time is skipped and named.
Through slurmrestd there is no test-only submit: such a cluster counts as starting now when its partition has
the job's nodes idle (less those its pending jobs ask for: a job just submitted is not yet shown on its nodes),
else as after every cluster that gave a time.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ti_slurm.backends.base import Backend
from ti_slurm.core.choices import AUTO_CLUSTER, CLUSTER_NAME_PATTERN
from ti_slurm.core.errors import BackendError, ConfigError, TiSlurmError

ASK_TIMEOUT = 8.0  # seconds a cluster has to answer `clusters` and `--cluster auto`
NAME = re.compile(CLUSTER_NAME_PATTERN)
KEYS = (
    *("name", "slurm_conf", "bin_dir", "host", "rest_url", "rest_token", "slurm_cluster"),  # how it is reached
    *("partition", "account", "qos"),  # its defaults
)


@dataclass(frozen=True)
class Cluster:
    """One ``[[cluster]]`` table of the user config."""

    name: str
    slurm_conf: str = ""
    bin_dir: str = ""
    host: str = ""
    rest_url: str = ""
    rest_token: str = ""
    slurm_cluster: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""

    @property
    def reached(self) -> str:
        """How it is reached, in a few words."""
        if self.rest_url:
            return f"slurmrestd {self.rest_url}"
        through = f"ssh {self.host}" if self.host else f"slurm.conf {self.slurm_conf}" if self.slurm_conf else ""
        if self.slurm_cluster:
            return " ".join(x for x in (through, f"--clusters={self.slurm_cluster}") if x)
        return through

    def defaults(self) -> dict[str, str]:
        """The spec fields this cluster fills in when a spec leaves them out."""
        return {k: getattr(self, k) for k in ("partition", "account", "qos") if getattr(self, k)}


def parse_clusters(tables: object, where: str) -> list[Cluster]:
    """The ``[[cluster]]`` tables, checked: one line naming the table and the key for each problem."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{where}: cluster", tables, 'expected [[cluster]] tables: name = "gpu", and how to reach it')
    out: list[Cluster] = []
    for table in tables:
        name = table.get("name")
        label = f"{where}: cluster {name!r}" if isinstance(name, str) else f"{where}: cluster"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ConfigError(label + ".name", name, "expected a name (a letter, then letters, digits, - or _)")
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise ConfigError(f"{label}.{unknown[0]}", table[unknown[0]], f"unknown key; the keys: {', '.join(KEYS)}")
        if not all(isinstance(v, str) for v in table.values()):
            key = next(k for k, v in table.items() if not isinstance(v, str))
            raise ConfigError(f"{label}.{key}", table[key], "expected text")
        ways = [k for k in ("slurm_conf", "host", "rest_url") if table.get(k)]
        if len(ways) > 1 or not (ways or table.get("slurm_cluster")):
            why = "give exactly one of slurm_conf (a slurm.conf here), host (an SSH login) or rest_url (slurmrestd)"
            raise ConfigError(label, ", ".join(ways) or "none", why + ", or slurm_cluster alone")
        if table.get("slurm_cluster") and table.get("rest_url"):
            why = "slurmrestd serves its own cluster only: give slurm_cluster with slurm_conf, host or alone"
            raise ConfigError(label + ".slurm_cluster", table["slurm_cluster"], why)
        if table.get("slurm_cluster") and not NAME.fullmatch(table["slurm_cluster"]):
            why = "expected a Slurm ClusterName (a letter, then letters, digits, - or _)"
            raise ConfigError(label + ".slurm_cluster", table["slurm_cluster"], why)
        if any(c.name == name for c in out):
            raise ConfigError(label + ".name", name, "two clusters have this name")
        out.append(Cluster(**table))
    return out


def user_clusters() -> list[Cluster]:
    from ti_slurm.submitting.userconfig import read_user_config, user_config_path

    return parse_clusters(read_user_config().get("cluster", []), user_config_path())


def slurm_clusters() -> list[str]:
    """The clusters of the Slurm multi-cluster setup this machine's commands are in (``sacctmgr list clusters``):
    none without accounting, or when the database does not answer within :data:`ASK_TIMEOUT`."""
    from ti_slurm.transports import run_local

    try:
        done = run_local(["sacctmgr", "-n", "-P", "list", "clusters", "format=cluster"], None, timeout=ASK_TIMEOUT)
    except BackendError:
        return []
    names = done.stdout.split() if done.returncode == 0 else []
    return [name for name in names if NAME.fullmatch(name)]


def known_clusters() -> list[Cluster]:
    """The clusters ``clusters`` lists and ``auto`` chooses from: the user config's, or with none there, those of
    this machine's Slurm multi-cluster setup when it has more than one."""
    mine = user_clusters()
    if mine:
        return mine
    names = slurm_clusters()
    return [Cluster(name, slurm_cluster=name) for name in names] if len(names) > 1 else []


def find_cluster(name: str, clusters: Sequence[Cluster] | None = None) -> Cluster:
    """The user config's cluster ``name``, else this machine's multi-cluster setup's; one line when neither has
    it."""
    clusters = user_clusters() if clusters is None else clusters
    for cluster in clusters:
        if cluster.name == name:
            return cluster
    slurms = slurm_clusters()
    if name in slurms:
        return Cluster(name, slurm_cluster=name)
    known = [f"yours: {', '.join(c.name for c in clusters)}"] if clusters else []
    known += [f"this machine's Slurm reaches: {', '.join(slurms)}"] if slurms else []
    have = "; ".join(known) or "yours: none: add [[cluster]] tables to your user config (docs/clusters.md)"
    raise ConfigError("cluster", name, f"no such cluster ({have})")


def cluster_environment(cluster: Cluster, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment this machine's Slurm commands need to talk to ``cluster`` (``slurm_conf`` clusters)."""
    env = dict(environ)
    env["SLURM_CONF"] = cluster.slurm_conf
    if cluster.bin_dir:
        env["PATH"] = f"{cluster.bin_dir}:{env.get('PATH', '')}"
    return env


def open_cluster(cluster: Cluster, accept_new_host_key: bool = False, ssh_config: str | None = None) -> Backend:
    """The backend that reaches ``cluster``."""
    from ti_slurm.backends import get_backend

    if cluster.rest_url:
        from ti_slurm.backends.rest import RestBackend

        return RestBackend(cluster.rest_url, cluster.rest_token or None)
    from ti_slurm.backends.slurm import SlurmBackend

    if cluster.host:
        backend = get_backend("ssh", cluster.host, accept_new_host_key, ssh_config)
        assert isinstance(backend, SlurmBackend)
        backend.reach(cluster.slurm_cluster)
        return backend
    from ti_slurm.transports import LocalTransport, run_local

    def run(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        env = cluster_environment(cluster, os.environ) if cluster.slurm_conf else os.environ
        return run_local(argv, stdin, env, timeout=60, cluster=cluster.name)

    backend = SlurmBackend(LocalTransport(run))
    backend.queue_key = cluster.slurm_conf
    backend.reach(cluster.slurm_cluster)
    return backend


# -- which cluster would start a job first ---------------------------------------------------------------------
_START = re.compile(r"to start at (\S+) .*?in partition (\S+)")  # 25.11 says "at <time> a using ..."


def parse_test_only(text: str, now: float | None = None) -> tuple[str, str] | None:
    """``sbatch --test-only``'s answer: (when, partition), or None when it says no start, or a time that is no
    time Slurm would give (``0000-...``: before a day ago; a far one, 2537-..., is Slurm's "when running jobs
    without a limit end": kept, it ranks last)."""
    import datetime
    import time

    found = _START.search(text)
    if not found:
        return None
    try:
        when = datetime.datetime.fromisoformat(found[1]).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    now = time.time() if now is None else now
    return (found[1], found[2]) if now - 86400 <= when else None


@dataclass
class Estimate:
    cluster: Cluster
    start: str = ""  # when it would start (Slurm's time: 2026-12-05T11:30:00), "" when not known
    why: str = ""  # why not known / not answering


def estimate(cluster: Cluster, script: str, nodes: int, partition: str) -> Estimate:
    """When ``cluster`` would start a job (its rendered ``script``, ``nodes`` nodes in ``partition``)."""
    try:
        backend = open_cluster(cluster)
        if cluster.rest_url:
            from ti_slurm.backends.rest import RestBackend

            assert isinstance(backend, RestBackend)
            idle, waiting = backend.idle_nodes(), backend.pending_nodes()
            free = {name: n - waiting.get(name, 0) for name, n in idle.items()}
            room = free.get(partition) if partition else max(free.values(), default=0)
            return Estimate(cluster, "now" if room is not None and room >= nodes else "", "" if free else "no answer")
        from ti_slurm.backends.slurm import SlurmBackend

        assert isinstance(backend, SlurmBackend)
        done = backend.transport.run(backend.command("sbatch", "--test-only"), script)
        found = parse_test_only(done.stdout + done.stderr)
        if found is None:
            said = (done.stderr or done.stdout).strip().splitlines()
            return Estimate(cluster, "", said[-1] if said else f"sbatch --test-only exited {done.returncode}")
        return Estimate(cluster, found[0])
    except TiSlurmError as exc:
        return Estimate(cluster, "", str(exc))


def free_nodes(backend: Backend) -> dict[str, int]:
    """Idle nodes per partition (``sinfo``, or what slurmrestd says of the nodes)."""
    from ti_slurm.backends.rest import RestBackend

    if isinstance(backend, RestBackend):
        return backend.idle_nodes()
    from ti_slurm.backends.slurm import SlurmBackend, checked_stdout

    assert isinstance(backend, SlurmBackend)
    text = checked_stdout(backend.transport.run(backend.command("sinfo", "-h", "-o", "%P %t %D"), None), "sinfo")
    return parse_idle(text)


def parse_idle(text: str) -> dict[str, int]:
    """``sinfo -h -o '%P %t %D'``: idle nodes per partition (every partition named, 0 when none is idle)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[2].isdigit():
            continue
        name = parts[0].rstrip("*")
        out[name] = out.get(name, 0) + (int(parts[2]) if parts[1] == "idle" else 0)
    return out


def earliest(estimates: Sequence[Estimate]) -> Estimate | None:
    """The estimate that starts first: "now" before any time, a time before none; None when none answered."""
    answered = [e for e in estimates if e.start]
    if not answered:
        return None
    return min(answered, key=lambda e: ("" if e.start == "now" else e.start))


def ask_all(clusters: Sequence[Cluster], ask: Any) -> list[Any]:
    """``ask(cluster)`` for every cluster at once; one that has not answered within :data:`ASK_TIMEOUT` is None
    (its thread is left behind: it holds nothing up, not even this process's exit)."""
    import threading
    import time

    answers: list[Any] = [None] * len(clusters)

    def one(k: int) -> None:
        try:
            answers[k] = ask(clusters[k])
        except TiSlurmError as exc:
            answers[k] = Estimate(clusters[k], "", str(exc))

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


def choose_cluster(spec: Any, name: str) -> tuple[Cluster, str]:
    """The cluster a submit goes to (``name``, or ``auto``: the one that would start ``spec`` first) and, for
    ``auto``, the line that says why."""
    if name != AUTO_CLUSTER:
        return find_cluster(name), ""
    clusters = known_clusters()
    if not clusters:
        raise ConfigError("cluster", name, "no clusters to choose from: add [[cluster]] tables to your user config")
    return pick(estimate_all(spec, clusters))


def estimate_all(spec: Any, clusters: Sequence[Cluster]) -> list[Estimate]:
    """When each of ``clusters`` would start ``spec`` (its own defaults filled in), asked of all at once."""
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render

    def ask(cluster: Cluster) -> Estimate:
        job_plan = plan_job(with_defaults(spec, cluster))
        partition = job_plan.partition or job_plan.components[0].partition or ""
        return estimate(cluster, render(job_plan), sum(c.nodes for c in job_plan.components), partition)

    answers = ask_all(clusters, ask)
    return [a if a is not None else Estimate(c, "", f"no answer within {ASK_TIMEOUT:.0f} s")
            for c, a in zip(clusters, answers, strict=True)]  # fmt: skip


def pick(estimates: Sequence[Estimate]) -> tuple[Cluster, str]:
    """The cluster that would start the job first, and the line that says why (naming the others)."""
    best = earliest(estimates)
    if best is None:
        said = "; ".join(f"{e.cluster.name}: {e.why or 'no start time'}" for e in estimates)
        raise BackendError(f"no cluster says when the job would start ({said})")
    others = "; ".join(
        f"{e.cluster.name}: {'at ' + e.start if e.start and e.start != 'now' else e.start or e.why or 'later'}"
        for e in estimates if e is not best
    )  # fmt: skip
    when = "now" if best.start == "now" else f"at {best.start}"
    return best.cluster, f"to cluster {best.cluster.name}: it would start the job {when}" + (
        f" ({others})" if others else ""
    )
