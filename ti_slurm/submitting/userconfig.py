"""The user's own defaults: ``$XDG_CONFIG_HOME/ti-slurm/config.toml`` (``~/.config/ti-slurm/config.toml``)::

    backend = "rest"                        # where submit goes without --backend (slurm, pyslurm, rest, local)

    [remote]
    host = "login"                          # where submit goes without --host (see "Remote submission")

    [rest]                                  # slurmrestd, when the site config does not name it (docs/rest.md)
    url = "https://slurm.example.org:6820"
    token = "file:~/.slurm-jwt"             # auto | env | file:PATH | command:ARGV

    [[cluster]]                             # another cluster: submit --cluster gpu (docs/clusters.md)
    name = "gpu"
    host = "gpu-login"                      # or slurm_conf = "/etc/slurm-gpu/slurm.conf", or rest_url = "...";
                                            # slurm_cluster = "gpu2": a cluster of a Slurm multi-cluster setup
    partition = "a100"

    [[notify]]                              # the jobs' notifications when the spec has no notify:
    url = "https://hooks.slack.com/services/..."
    on = ["failed", "hung"]
    format = "slack"

Every problem is one line naming the file.
"""

from __future__ import annotations

import os
from typing import Any

from ti_slurm.core.errors import ConfigError

KEYS = {
    "backend": set(),
    "remote": {"host"},
    "rest": {"url", "token"},
    "notify": {"url", "on", "format"},
    "cluster": set(),  # its tables are checked by ti_slurm.clusters
}


def user_config_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "ti-slurm", "config.toml")


def read_user_config() -> dict[str, Any]:
    """The decoded file ({} when there is none), its tables checked."""
    import tomllib

    path = user_config_path()
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("user config", path, f"cannot read: {exc}") from None
    expected = (
        'expected backend = "rest", [remote] host = "login", [rest] url = "https://...", token = "env" and'
        ' [[notify]] url = "https://...", on = [...], format = "json"'
    )
    if set(data) - set(KEYS):
        raise ConfigError("user config", path, expected)
    backend, rest = data.get("backend", ""), data.get("rest", {})
    if not isinstance(backend, str) or not isinstance(rest, dict) or set(rest) - KEYS["rest"]:
        raise ConfigError("user config", path, expected)
    if not all(isinstance(v, str) for v in rest.values()):
        raise ConfigError("user config", path, expected)
    remote, notify = data.get("remote", {}), data.get("notify", [])
    notify = [notify] if isinstance(notify, dict) else notify
    if not isinstance(remote, dict) or set(remote) - KEYS["remote"] or not isinstance(remote.get("host", ""), str):
        raise ConfigError("user config", path, expected)
    if not isinstance(notify, list) or not all(isinstance(n, dict) and not set(n) - KEYS["notify"] for n in notify):
        raise ConfigError("user config", path, expected)
    return {"backend": backend, "remote": remote, "rest": rest, "notify": notify, "cluster": data.get("cluster", [])}


def user_remote_host() -> str:
    """``host`` under ``[remote]`` ("" for none)."""
    return str(read_user_config().get("remote", {}).get("host", ""))


def user_backend() -> str:
    """The top-level ``backend`` ("" for none)."""
    return str(read_user_config().get("backend", ""))


def user_rest() -> dict[str, str]:
    """The ``[rest]`` table: ``url`` and ``token`` (each missing when not given)."""
    return dict(read_user_config().get("rest", {}))


def user_notify() -> list[dict[str, Any]]:
    """The ``[[notify]]`` tables, as a spec's ``notify:`` entries."""
    return list(read_user_config().get("notify", []))
