"""The user's own defaults: ``$XDG_CONFIG_HOME/ti-slurm/config.toml`` (``~/.config/ti-slurm/config.toml``)::

    [remote]
    host = "login"                          # where submit goes without --host (see "Remote submission")

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

KEYS = {"remote": {"host"}, "notify": {"url", "on", "format"}}


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
    expected = 'expected [remote] host = "login" and [[notify]] url = "https://...", on = [...], format = "json"'
    if set(data) - set(KEYS):
        raise ConfigError("user config", path, expected)
    remote, notify = data.get("remote", {}), data.get("notify", [])
    notify = [notify] if isinstance(notify, dict) else notify
    if not isinstance(remote, dict) or set(remote) - KEYS["remote"] or not isinstance(remote.get("host", ""), str):
        raise ConfigError("user config", path, expected)
    if not isinstance(notify, list) or not all(isinstance(n, dict) and not set(n) - KEYS["notify"] for n in notify):
        raise ConfigError("user config", path, expected)
    return {"remote": remote, "notify": notify}


def user_remote_host() -> str:
    """``host`` under ``[remote]`` ("" for none)."""
    return str(read_user_config().get("remote", {}).get("host", ""))


def user_notify() -> list[dict[str, Any]]:
    """The ``[[notify]]`` tables, as a spec's ``notify:`` entries."""
    return list(read_user_config().get("notify", []))
