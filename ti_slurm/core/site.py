"""Site config: the file cluster admins own (``/etc/ti-slurm/config.toml``).

``TI_SLURM_CONFIG`` points elsewhere. Example::

    rdma_partitions = ["rdma"]
    rdma_min_nodes = 2              # rdma: auto needs a job this large ...
    rdma_min_gpus_per_node = 8      # ... on whole GPU machines (the TI platform's rule)
    port_min = 61000
    port_max = 65535
    python = "/opt/ti-slurm/bin/python"
    rendezvous_timeout = 300
    container_runtime = "pyxis"     # or "oci": for specs whose container names no runtime
    npu_gres = "npu"                # the GRES name of Ascend NPUs (npus_per_node)
    hccn_conf = "/etc/hccn.conf"    # each node's NPU device IPs, for the rank table
    stage_dir = "/tmp"              # node-local disk for input channels with stage: local
    backend = "slurm"               # or "pyslurm": how submit, status, list and cancel reach Slurm

    [nccl.rdma]            # overrides of the seed's NCCL values on one partition
    NCCL_IB_GID_INDEX = "5"

``KEY_DOCS`` says what each key does (docs/reference/site-config.md is made from it); hooks.py uses the
Prolog/Epilog ones.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from ti_slurm.core.choices import CONTAINER_RUNTIMES, SITE_BACKENDS
from ti_slurm.core.errors import ConfigError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing in job steps
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/etc/ti-slurm/config.toml"
MAX_CONFIG_BYTES = 1 << 20  # a site config is a few hundred bytes
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARTITION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*|\*")
_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class SiteConfig:
    """Admin settings; every key is optional."""

    rdma_partitions: tuple[str, ...] = ()
    # the TI platform's rule: RDMA for multi-node jobs on whole 8-GPU machines
    rdma_min_nodes: int = 2
    rdma_min_gpus_per_node: int = 8
    nccl: dict[str, dict[str, str]] = field(default_factory=dict)
    port_min: int = 61000
    port_max: int = 65535
    python: str | None = None
    rendezvous_timeout: int = 300
    container_runtime: str = "pyxis"  # pyxis | oci: for a spec's container without a runtime
    backend: str = "slurm"  # slurm | pyslurm | rest: the default of submit --backend
    rest_url: str = ""  # slurmrestd: http://host:6820, https://..., unix:/path (the rest backend)
    rest_token: str = "auto"  # where the rest backend's tokens come from: auto | env | file:PATH | command:ARGV
    rest_ca_file: str = ""  # the CA bundle that signs an https slurmrestd's certificate (else the system's)
    # Slurm 25.11's expedited requeue (slurm.conf: SlurmctldParameters=enable_expedited_requeue): requeueable
    # jobs ask for --requeue=expedite, so a requeued one may start again at once, first in the queue
    expedited_requeue: bool = False
    notify: bool = True  # false: jobs post no notifications (compute nodes with no way out)
    notify_proxy: str = ""  # an http(s) proxy the notifications go through ("": straight)
    slurm_bin_dir: str | None = None  # Slurm's commands on the nodes, for jobs whose PATH lacks them (REST)
    failure_signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)  # cause -> regexes, before ours
    # Prolog / Epilog
    job_dir_base: str = "/var/lib/ti-slurm/jobs"
    rdma_devices: tuple[str, ...] = ()
    rdma_check: str = "log"  # log | drain
    drain_blamed_nodes: bool = False  # the Epilog drains a node a job's failure blamed (a GPU fault, ...)
    sysfs_root: str = "/sys"  # "{node}" is replaced by the node's name (for test clusters)
    npu_gres: str = "npu"  # the GRES name Slurm gives Ascend NPUs
    hccn_conf: str = "/etc/hccn.conf"  # each node's NPU device IPs; "{node}" as in sysfs_root
    stage_dir: str = "/tmp"  # node-local storage staged input channels are copied to
    hook_timeout: int = 30
    log_file: str | None = None

    def plan_fields(self) -> dict[str, Any]:
        """The job plan's fields this config decides, alike for specs and hand-written scripts."""
        return {
            "rdma_partitions": tuple(self.rdma_partitions),
            "rdma_min_nodes": self.rdma_min_nodes,
            "rdma_min_gpus_per_node": self.rdma_min_gpus_per_node,
            "nccl_overrides": {k: dict(v) for k, v in self.nccl.items()},
            "port_range": (self.port_min, self.port_max),
            "sysfs_root": self.sysfs_root,
            "npu_gres": self.npu_gres,
            "hccn_conf": self.hccn_conf,
            "stage_dir": self.stage_dir,
            "expedited_requeue": self.expedited_requeue,
            "notify_proxy": self.notify_proxy,
            "failure_signatures": tuple((c, p) for c, patterns in self.failure_signatures.items() for p in patterns),
        }


KEY_DOCS = {  # each key of SiteConfig: what it does (docs/reference/site-config.md is made from this)
    "rdma_partitions": "partitions whose jobs get the RDMA NCCL variables (with `rdma: auto`)",
    "rdma_min_nodes": "... when the job has at least this many nodes (the TI platform: 2)",
    "rdma_min_gpus_per_node": "... each with at least this many GPUs (the TI platform: whole 8-GPU machines)",
    "nccl": 'per-partition overrides of the seed\'s NCCL values: `[nccl.rdma]` then `NCCL_IB_HCA = "mlx5_0"`'
    ' (`"*"`: every partition)',
    "port_min": "the low end of the range jobs derive their ports from (at least 64 ports)",
    "port_max": "the high end of that range",
    "python": "the Python with ti-slurm on every node (default: the submitter's)",
    "rendezvous_timeout": "default seconds DDP workers wait for the master (Ray nodes for the head)",
    "container_runtime": "`pyxis` (enroot) or `oci` (oci.conf's RunTimeRun): for specs whose container names none",
    "backend": "`slurm` (the Slurm commands), `pyslurm` or `rest` (slurmrestd): the default of `submit --backend`",
    "rest_url": "slurmrestd's address for the rest backend: `http://host:6820`, `https://...` or `unix:/path`",
    "rest_token": "where the rest backend's JWTs come from: `auto` (`SLURM_JWT`, else `scontrol token`), `env`,"
    " `file:PATH` (re-read when it expires) or `command:ARGV` (run again before it expires,"
    " e.g. `command:ssh login scontrol token lifespan=3600`)",
    "rest_ca_file": "the CA bundle (PEM) that signs an `https://` slurmrestd's certificate (default: the system's,"
    " or `SSL_CERT_FILE`); the rest backend goes through `https_proxy` unless `no_proxy` names the host",
    "expedited_requeue": "true: jobs with restarts ask for `--requeue=expedite` (Slurm 25.11 with"
    " `SlurmctldParameters=enable_expedited_requeue`)",
    "notify": "false: jobs post no notifications (compute nodes with no way out)",
    "notify_proxy": "the http(s) proxy notifications go through (default: none; the nodes' `http_proxy` is not used)",
    "slurm_bin_dir": "the folder of Slurm's commands (`srun`, `scontrol`) on the compute nodes, for a job whose"
    " PATH lacks them (submitted through slurmrestd from a host without Slurm); default: `/usr/bin`,"
    " `/usr/local/bin`, `/opt/slurm/bin`",
    "failure_signatures": "the site's own log signatures of a failure's cause, tried before ti-slurm's:"
    ' `[failure_signatures]` then `gpu_fault = ["my-health-check: GPU [0-9]+ failed"]` (a cause of'
    " docs/failures.md, a list of Python regular expressions)",
    "job_dir_base": "where the Prolog makes each job's private directory (root-owned, 0755)",
    "rdma_devices": "HCAs whose ports must be ACTIVE on RDMA partitions (the Prolog's check)",
    "rdma_check": "`log`, or `drain`: a port not ACTIVE drains the node",
    "drain_blamed_nodes": "true: the Epilog drains a node a job's failure blamed (`gpu_fault`, `launch`, `filesystem`,"
    " the root of an `nccl` cascade: docs/failures.md), with `ti-slurm: <cause> in job <id>` as Slurm's reason",
    "sysfs_root": "where `class/infiniband` lives (`{node}` is the node's name)",
    "npu_gres": "the GRES name of Ascend NPUs (`npus_per_node` asks for `gres <name>:N`)",
    "hccn_conf": "each node's NPU device IPs (`address_<id>=`), for the rank table (`{node}` as above)",
    "stage_dir": "node-local disk that input channels with `stage: local` are copied to",
    "hook_timeout": "seconds the Prolog or Epilog may take",
    "log_file": "where the hooks log (default: syslog); only a regular file is written",
}


def load_site_config(path: str | None = None) -> SiteConfig:
    """Read the site config; a missing default file means defaults."""
    explicit = path or os.environ.get("TI_SLURM_CONFIG")
    p = Path(explicit or DEFAULT_PATH)
    if not p.exists():
        if explicit:
            raise ConfigError("site config", str(p), "no such file")
        return SiteConfig()
    import stat
    import tomllib  # only when there is a file: this runs in every job step

    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang a job step or a Prolog
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError("site config", str(p), "not a regular file")
            data = tomllib.loads(fh.read(MAX_CONFIG_BYTES + 1)[:MAX_CONFIG_BYTES].decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("site config", str(p), f"cannot read: {exc}") from None
    return parse_site_config(data, str(p))


def parse_site_config(data: dict[str, object], where: str = "site config") -> SiteConfig:
    """Validate a decoded site config; every problem is one line naming the key."""
    known = {f.name for f in fields(SiteConfig)}
    for key in data:
        if key not in known:
            import difflib

            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}?" if near else f"known keys: {', '.join(sorted(known))}"
            raise ConfigError(f"{where}: {key}", data[key], f"unknown key; {hint} (see docs/reference/site-config.md)")
    get = _Keys(data, where)
    lo, hi = get.integer("port_min", 1024, 65535, 61000), get.integer("port_max", 1024, 65535, 65535)
    if lo + 63 > hi:
        raise ConfigError(f"{where}: port_max", hi, "the port range needs at least 64 ports")
    return SiteConfig(
        rdma_partitions=get.names("rdma_partitions", _PARTITION),
        rdma_min_nodes=get.integer("rdma_min_nodes", 1, 65536, 2),
        rdma_min_gpus_per_node=get.integer("rdma_min_gpus_per_node", 0, 64, 8),
        nccl=get.nccl(),
        port_min=lo,
        port_max=hi,
        python=get.path("python", None),
        rendezvous_timeout=get.integer("rendezvous_timeout", 1, 86400, 300),
        container_runtime=get.choice("container_runtime", CONTAINER_RUNTIMES),
        backend=get.choice("backend", SITE_BACKENDS),
        rest_url=get.rest_url("rest_url"),
        rest_token=get.token_source("rest_token"),
        rest_ca_file=get.path("rest_ca_file", None) or "",
        expedited_requeue=get.boolean("expedited_requeue", False),
        notify=get.boolean("notify", True),
        notify_proxy=get.url("notify_proxy"),
        slurm_bin_dir=get.path("slurm_bin_dir", None),
        failure_signatures=get.signatures("failure_signatures"),
        job_dir_base=get.path("job_dir_base", SiteConfig.job_dir_base) or SiteConfig.job_dir_base,
        rdma_devices=get.names("rdma_devices", _DEVICE),
        rdma_check=get.choice("rdma_check", ("log", "drain")),
        drain_blamed_nodes=get.boolean("drain_blamed_nodes", False),
        sysfs_root=get.path("sysfs_root", "/sys") or "/sys",
        npu_gres=get.word("npu_gres", "npu"),
        hccn_conf=get.path("hccn_conf", "/etc/hccn.conf") or "/etc/hccn.conf",
        stage_dir=get.path("stage_dir", "/tmp") or "/tmp",
        hook_timeout=get.integer("hook_timeout", 1, 600, 30),
        log_file=get.path("log_file", None),
    )


class _Keys:
    """Typed values of a decoded site config; a wrong one is a ConfigError naming its key."""

    def __init__(self, data: dict[str, object], where: str) -> None:
        self.data, self.where = data, where

    def names(self, key: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) and pattern.fullmatch(x) for x in value):
            raise ConfigError(f"{self.where}: {key}", value, "expected a list of names")
        return tuple(value)

    def integer(self, key: str, lo: int, hi: int, default: int) -> int:
        value = self.data.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise ConfigError(f"{self.where}: {key}", value, f"expected a whole number from {lo} to {hi}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {key}", value, "expected true or false")
        return value

    def path(self, key: str, default: str | None) -> str | None:
        value = self.data.get(key, default)
        if value is not None and (not isinstance(value, str) or not value.startswith("/") or "\x00" in value):
            raise ConfigError(f"{self.where}: {key}", value, "expected an absolute path")
        return value

    def url(self, key: str) -> str:
        """An http(s) URL, or "" for none."""
        value = self.data.get(key, "")
        if not isinstance(value, str) or (value and not re.fullmatch(r"https?://[^\s/?#]+/?", value)):
            raise ConfigError(f"{self.where}: {key}", value, "expected an http:// or https:// proxy URL (host[:port])")
        return value

    def rest_url(self, key: str) -> str:
        """slurmrestd's address: ``http(s)://host[:port][/path]`` or ``unix:/path``; "" for none."""
        value = self.data.get(key, "")
        if not isinstance(value, str) or (value and not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?|unix:/\S+", value)):
            raise ConfigError(f"{self.where}: {key}", value, "expected http://host:6820, https://... or unix:/path")
        return value

    def token_source(self, key: str) -> str:
        """Where tokens come from: ``auto``, ``env``, ``file:PATH`` or ``command:ARGV``."""
        value = self.data.get(key, "auto")
        if not isinstance(value, str) or not re.fullmatch(r"auto|env|file:\S.*|command:\S.*", value):
            raise ConfigError(f"{self.where}: {key}", value, 'expected "auto", "env", "file:PATH" or "command:ARGV"')
        return value

    def word(self, key: str, default: str) -> str:
        """A Slurm name (a GRES name): letters, digits, ``_``, ``.``, ``-``."""
        value = self.data.get(key, default)
        if not isinstance(value, str) or not _DEVICE.fullmatch(value):
            raise ConfigError(f"{self.where}: {key}", value, "expected a name (letters, digits, . _ -)")
        return value

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` (the first is the default)."""
        value = self.data.get(key, choices[0])
        if value not in choices:
            raise ConfigError(f"{self.where}: {key}", value, "expected " + " or ".join(f'"{c}"' for c in choices))
        return str(value)

    def signatures(self, key: str) -> dict[str, tuple[str, ...]]:
        """``[failure_signatures]``: a cause of :data:`~ti_slurm.core.causes.CAUSES` -> regular expressions."""
        from ti_slurm.core.causes import CAUSES

        table = self.data.get(key, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.where}: {key}", table, 'expected a table: gpu_fault = ["pattern", ...]')
        for cause, patterns in table.items():
            if cause not in CAUSES or cause == "unknown":
                raise ConfigError(f"{self.where}: {key}.{cause}", cause, f"expected a cause: {', '.join(CAUSES)}")
            if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
                raise ConfigError(f"{self.where}: {key}.{cause}", patterns, "expected a list of regular expressions")
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(
                        f"{self.where}: {key}.{cause}", pattern, f"not a regular expression: {exc}"
                    ) from None
        return {cause: tuple(patterns) for cause, patterns in table.items()}

    def nccl(self) -> dict[str, dict[str, str]]:
        nccl = self.data.get("nccl", {})
        if not isinstance(nccl, dict):
            raise ConfigError(f"{self.where}: nccl", nccl, "expected a table of partitions")
        for part, table in nccl.items():
            if not _PARTITION.fullmatch(part) or not isinstance(table, dict):
                why = 'expected [nccl.<partition>] with NAME = "value" lines'
                raise ConfigError(f"{self.where}: nccl.{part}", table, why)
            for name, value in table.items():
                if not _ENV_NAME.fullmatch(name) or not isinstance(value, str) or "\x00" in value:
                    raise ConfigError(f"{self.where}: nccl.{part}.{name}", value, 'expected NAME = "string value"')
        return {k: dict(v) for k, v in nccl.items()}
