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

The file is read into :class:`UserConfig`, models in the spec's style: every problem is one line naming the
file, the key (with the nearest known name for a typo), the value and why (``docs/reference/user-config.md``
is made from these models).
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from ti_slurm.core.choices import CLUSTER_NAME_PATTERN, NAMED_BACKENDS
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.paths import user_config_path
from ti_slurm.submitting.spec import Notifies, StrictModel, one_line

PAGE = "docs/reference/user-config.md"
NAME = re.compile(CLUSTER_NAME_PATTERN)


def _text(description: str, example: str = "") -> Any:
    return Field("", description=description, examples=[example] if example else None)


class RemoteTable(StrictModel):
    """``[remote]``: where ``submit`` goes without ``--host`` (docs/remote.md)."""

    host: str = _text("the login node: host, user@host[:port] or an ~/.ssh/config alias", "login")


class RestTable(StrictModel):
    """``[rest]``: slurmrestd, when the site config does not name it (docs/rest.md)."""

    url: str = _text("slurmrestd's URL (https://, http:// or unix:/path)", "https://slurm.example.org:6820")
    token: str = _text("where the token comes from: auto, env, file:PATH or command:ARGV", "file:~/.slurm-jwt")
    ca_file: str = _text("the CA bundle (PEM) that signs an https slurmrestd's certificate", "/etc/ssl/site-ca.pem")


class Cluster(StrictModel):
    """``[[cluster]]``: another cluster, named by ``submit --cluster NAME`` (docs/clusters.md). Exactly one of
    ``slurm_conf``, ``host`` or ``rest_url`` says how it is reached, or ``slurm_cluster`` alone."""

    name: str = Field(description="how you name it (a letter, then letters, digits, - or _)", examples=["gpu"])
    slurm_conf: str = _text("this machine's Slurm commands with that slurm.conf", "/etc/slurm-gpu/slurm.conf")
    bin_dir: str = _text("its Slurm commands' folder, first on PATH (another Slurm release)", "/opt/slurm-25.11/bin")
    host: str = _text("its login node: the Slurm commands over SSH", "gpu-login")
    rest_url: str = _text("its slurmrestd", "https://gpu.example.org:6820")
    rest_token: str = _text("the slurmrestd token's source (as [rest] token)", "env")
    rest_ca_file: str = _text("the CA bundle that signs its slurmrestd's certificate (as [rest] ca_file)")
    slurm_cluster: str = _text("a cluster of the Slurm multi-cluster setup (--clusters)", "gpu2")
    partition: str = _text("the partition of a spec that names none", "a100")
    account: str = _text("the account of a spec that names none")
    qos: str = _text("the QoS of a spec that names none")

    @field_validator("name", "slurm_cluster")
    @classmethod
    def _a_name(cls, v: str, info: ValidationInfo) -> str:
        if (v or info.field_name == "name") and not NAME.fullmatch(v):
            raise ValueError("expected a name: a letter, then up to 31 letters, digits, - or _")
        return v

    @model_validator(mode="after")
    def _one_way(self) -> Cluster:
        ways = [k for k in ("slurm_conf", "host", "rest_url") if getattr(self, k)]
        if len(ways) > 1 or not (ways or self.slurm_cluster):
            why = "give exactly one of slurm_conf (a slurm.conf here), host (an SSH login) or rest_url (slurmrestd)"
            raise ValueError(f"{why}, or slurm_cluster alone (given: {', '.join(ways) or 'none'})")
        if self.slurm_cluster and self.rest_url:
            raise ValueError(
                "slurmrestd serves its own cluster only: give slurm_cluster with slurm_conf, host or alone"
            )
        return self

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


class UserConfig(StrictModel):
    """The whole file; every key is optional."""

    backend: str = Field(
        "", description=f"where submit goes without --backend: {', '.join(NAMED_BACKENDS)}", examples=["rest"]
    )
    remote: RemoteTable = Field(default_factory=RemoteTable, description=RemoteTable.__doc__)
    rest: RestTable = Field(default_factory=RestTable, description=RestTable.__doc__)
    cluster: list[Cluster] = Field(default_factory=list, description=Cluster.__doc__)
    notify: Notifies = Field(
        default_factory=list,
        description=(
            "``[[notify]]``: a job's notifications when its spec has none: url, on, format as the spec's notify:"
            " (docs/notifications.md)"
        ),
    )

    @field_validator("backend")
    @classmethod
    def _a_backend(cls, v: str) -> str:
        if v and v not in NAMED_BACKENDS:
            raise ValueError(f"expected one of: {', '.join(NAMED_BACKENDS)}")
        return v

    @model_validator(mode="after")
    def _names_once(self) -> UserConfig:
        names = [c.name for c in self.cluster]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"two [[cluster]] tables are named {twice!r}")
        return self


def parse_user_config(data: object, path: str) -> UserConfig:
    """A decoded config file as a :class:`UserConfig`; its first problem is one line naming ``path`` and the
    key."""
    try:
        return UserConfig.model_validate(data)
    except ValidationError as exc:
        where = f"user config {path}: "
        raise one_line(
            exc, UserConfig, ConfigError, PAGE, prefix=where, noun="key", whole="cluster", show_tables=False
        ) from None


def read_user_config() -> UserConfig:
    """The user config (all defaults when there is no file)."""
    import tomllib

    path = user_config_path()
    if not os.path.exists(path):
        return UserConfig.model_validate({})
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("user config", path, f"cannot read: {exc}") from None
    return parse_user_config(data, path)
