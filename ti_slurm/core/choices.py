"""The lists of choices several parts offer, each in one place: the spec, the site config, the CLI,
``doctor`` and the job path take theirs from here (the modes' list is their files: see
:func:`ti_slurm.job.modes.mode_names`)."""

from __future__ import annotations

CONTAINER_RUNTIMES = ("pyxis", "oci")  # how a node runs its command in a training image; the first is the default
RESTART_CAUSES = (  # why an attempt ended (`restart.on`): the causes of core/causes.py, and `failure` for any exit
    *("preempt", "timeout", "node_fail", "failure", "hang"),
    *("launch", "gpu_fault", "nccl", "filesystem", "host_oom", "user_error", "gpu_oom", "nan"),
)
DEFAULT_RESTART_ON = ("preempt", "timeout", "node_fail")
IN_PLACE_CAUSES = ("failure", "hang")  # the causes a restart inside the allocation follows (`restart.in_place`)
BACKENDS = ("slurm", "pyslurm", "rest", "local", "ssh")  # where jobs go (ssh: chosen by giving a host)
NAMED_BACKENDS = ("slurm", "pyslurm", "rest", "local")  # those a user names (`--backend`, `backend=`)
SITE_BACKENDS = ("slurm", "pyslurm", "rest")  # those a site config may make the default (the Slurm ones, from here)
NOTIFY_EVENTS = ("running", "completed", "failed", "cancelled", "requeued", "hung")  # what `notify.on` may list
NOTIFY_FORMATS = ("json", "slack", "wecom", "dingtalk", "feishu")  # the body a `notify` URL is posted
# a [[cluster]]'s name (user config; the spec's `cluster:`, `--cluster`), as in job ids like `gpu:123`; or AUTO
CLUSTER_NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_-]{0,31}"
AUTO_CLUSTER = "auto"  # the cluster that would start the job first

CONSOLE_PORT = 8642  # `ti-slurm ui`: the first port tried (the next free one when another console holds it)
