"""The backend that reaches one of the user's clusters (a ``[[cluster]]`` table: ``slurm_conf``, ``host``,
``rest_url``, ``slurm_cluster``), and the clusters of this machine's Slurm multi-cluster setup."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from ti_slurm.backends.base import Backend
from ti_slurm.core.errors import BackendError
from ti_slurm.submitting.userconfig import Cluster

ASK_TIMEOUT = 8.0  # seconds a cluster has to answer `clusters` and `--cluster auto`


def cluster_environment(cluster: Cluster, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment this machine's Slurm commands need to talk to ``cluster`` (``slurm_conf`` clusters)."""
    env = dict(environ)
    env["SLURM_CONF"] = cluster.slurm_conf
    if cluster.bin_dir:
        env["PATH"] = f"{cluster.bin_dir}:{env.get('PATH', '')}"
    return env


def open_cluster(cluster: Cluster, accept_new_host_key: bool = False, ssh_config: str | None = None) -> Backend:
    """The backend that reaches ``cluster`` (one for the console's life: :mod:`ti_slurm.backends.kept`)."""
    from ti_slurm.backends.kept import kept_backend

    key = ("cluster", cluster.model_dump_json(), accept_new_host_key, ssh_config)
    return kept_backend(key, lambda: reach_cluster(cluster, accept_new_host_key, ssh_config))


def reach_cluster(cluster: Cluster, accept_new_host_key: bool, ssh_config: str | None) -> Backend:
    if cluster.rest_url:
        from ti_slurm.backends.rest import RestBackend

        return RestBackend(cluster.rest_url, cluster.rest_token or None, ca_file=cluster.rest_ca_file or None)
    from ti_slurm.backends.slurm import SlurmBackend
    from ti_slurm.transports import LocalTransport, run_local

    if cluster.host:
        from ti_slurm.backends import ssh_backend

        over_ssh = ssh_backend(cluster.host, accept_new_host_key, ssh_config)
        over_ssh.reach(cluster.slurm_cluster)
        return over_ssh

    def run(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        env = cluster_environment(cluster, os.environ) if cluster.slurm_conf else os.environ
        return run_local(argv, stdin, env, timeout=60, cluster=cluster.name)

    backend = SlurmBackend(LocalTransport(run))
    backend.queue_key = cluster.slurm_conf
    backend.reach(cluster.slurm_cluster)
    return backend


def multicluster_names() -> list[str]:
    """The clusters of the Slurm multi-cluster setup this machine's commands are in: none without accounting,
    or when the database does not answer within :data:`ASK_TIMEOUT`."""
    from ti_slurm.backends.slurm import SlurmBackend
    from ti_slurm.transports import LocalTransport, run_local

    def run(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        return run_local(argv, stdin, None, timeout=ASK_TIMEOUT)

    try:
        return SlurmBackend(LocalTransport(run)).slurm_clusters()
    except BackendError:
        return []
