"""The user's job spec: pydantic models, loading and one-line validation errors.

A spec names a training mode, a start command and the nodes of each role::

    name: demo
    mode: ddp            # ddp | mpi | horovod | ps-worker | ray
    command: python train.py --epochs 1
    nodes: 2
    gpus_per_node: 8

Multi-role modes give each role its own resources (``ps``/``worker`` for
ps-worker, ``head``/``worker_groups`` for ray); top-level ``gpus_per_node``,
``cpus_per_node`` and ``mem`` are then defaults for every role.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ti_slurm.core.choices import (
    AUTO_CLUSTER,
    CLUSTER_NAME_PATTERN,
    CONTAINER_RUNTIMES,
    DEFAULT_RESTART_ON,
    IN_PLACE_CAUSES,
    NOTIFY_EVENTS,
    NOTIFY_FORMATS,
    RESTART_CAUSES,
)
from ti_slurm.core.environ import MAX_ENV_STRING
from ti_slurm.core.errors import MISSING, InputError, SpecError
from ti_slurm.core.plan import Component
from ti_slurm.job.modes import get_mode, mode_names
from ti_slurm.slurm.request import refusal
from ti_slurm.slurm.text import time_seconds

# the spec fields that give a role its own resources, in any mode (each mode takes some of them)
ROLE_FIELDS = ("ps", "worker", "head", "worker_groups")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_CLUSTER_NAME = re.compile(CLUSTER_NAME_PATTERN)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLURM_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")  # partition, account, qos
_MEM = re.compile(r"[0-9]+[KMGT]?")  # ASCII digits: Python's \d takes '٥', which sbatch does not
_TIME = re.compile(r"([0-9]+-)?[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+|UNLIMITED|INFINITE")
_SBATCH_OPTION = re.compile(r"[a-z][a-z0-9-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MOUNT_UNSAFE = re.compile(r"[\s:\x00-\x1f\x7f]")  # enroot's --mount splits on ':' and then on spaces


REFERENCE = "docs/reference/spec.md"  # every field, generated from FIELD_DOCS and the models


def page_of(field: str) -> str:
    """The page of docs/ that explains a top-level field; the reference for a field there is none of."""
    return f"docs/{FIELD_DOCS[field][0]}.md" if field in FIELD_DOCS else REFERENCE


def doc(field: str) -> Any:
    """A top-level spec field's documentation (``FIELD_DOCS``), for its ``Annotated``: the reference,
    ``ti-slurm schema`` and the field's errors read it from there."""
    _, text, example = FIELD_DOCS[field]
    return Field(description=text, examples=[example], json_schema_extra={"page": page_of(field)})


def _matching(pattern: re.Pattern[str], value: str | None, why: str) -> str | None:
    """``value`` when it is None or matches ``pattern``; else a ValueError saying ``why``."""
    if value is not None and not pattern.fullmatch(value):
        raise ValueError(why)
    return value


def check_channels(inputs: dict[str, InputSpec]) -> None:
    """Each channel a variable of its own: ``TI_SLURM_INPUT_<NAME>`` (so no two names alike but for case)."""
    seen: dict[str, str] = {}
    for name in inputs:
        where = f"inputs.{name}"
        if not _ENV_NAME.fullmatch(name):
            raise SpecError(where, name, "a channel name is letters, digits and _ (it names TI_SLURM_INPUT_<NAME>)")
        if name.upper() in seen:
            why = f"is channel {seen[name.upper()]!r} again (both are TI_SLURM_INPUT_{name.upper()})"
            raise SpecError(where, name, why)
        seen[name.upper()] = name


def leaves_the_contract_its_own(mode: str, platform: str, env: dict[str, str]) -> None:
    """A spec's ``env:`` may not set what the job's nodes get from the contract: the mode's variables, the
    common ones, Slurm's and ti-slurm's own, the platform's (ModelArts' ``MA_*``); they would override it."""
    from ti_slurm.job.contract import contract_setter

    for key, value in env.items():
        who = contract_setter(mode, platform, key)
        if who:
            raise SpecError(f"env.{key}", value, f"{who} on every node (a job's env: cannot change it)")


def _reject_control(field: str, value: str, allow_newline: bool = False) -> str:
    bad = _CONTROL.search(value.replace("\n", "").replace("\t", "") if allow_newline else value)
    if bad:
        raise ValueError(
            f"holds the control character {bad.group()!r}; names, paths and options must be one plain line"
        )
    return value


MAX_SPEC_ENV = 1 << 20  # bytes of `env:` in all: half of Linux's usual ARG_MAX (2 MiB), the rest for everything else


class StrictModel(BaseModel):
    """A document's mapping: unknown keys refused, frozen, ``true`` never taken for a number (the spec's models, the
    user config's tables)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, v: object, info: ValidationInfo) -> object:
        """``nodes: true`` is not 1: a true/false where the field takes no true/false is refused."""
        if isinstance(v, bool) and info.field_name is not None:
            kinds = _kinds(cls.model_fields[info.field_name].annotation)
            if bool not in kinds and kinds & {int, float}:
                raise ValueError("expected a number, not true/false")
        return v


def _kinds(annotation: object) -> set[object]:
    """The types a field's annotation admits, through unions and ``Annotated``."""
    args = get_args(annotation)
    if get_origin(annotation) is Annotated:
        return _kinds(args[0])
    if args and get_origin(annotation) in (Union, UnionType):
        return {kind for arg in args for kind in _kinds(arg)}
    return {annotation}


_MOUNT_OPTIONS = ("ro", "rw")


class ContainerSpec(StrictModel):
    """``container: {image, runtime, mounts, workdir}``: the nodes run the command inside a training image."""

    image: str = Field(min_length=1)  # a squashfs file or enroot-importable reference (pyxis), a bundle dir (oci)
    runtime: str | None = None  # one of CONTAINER_RUNTIMES; default: the site's (container_runtime), else pyxis
    mounts: list[str] = Field(default_factory=list)  # SRC:DST[:ro|rw], besides the job directory
    workdir: str | None = None  # where the command starts in the image; default: the job's workdir, mounted

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return _reject_control("image", v)

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, v: str | None) -> str | None:
        if v is not None and v not in CONTAINER_RUNTIMES:
            raise ValueError(f"expected one of: {', '.join(CONTAINER_RUNTIMES)}")
        return v

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for mount in v:
            parse_mount(mount)
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or _MOUNT_UNSAFE.search(v)):
            raise ValueError("expected an absolute path inside the image, without spaces or ':'")
        return v


def parse_mount(text: str) -> tuple[str, str, str]:
    """``SRC:DST[:ro|rw]`` as (source, destination, option); a ValueError says what is wrong."""
    from ti_slurm.job.container import split_mount

    src, dst, option = split_mount(text)
    if option not in _MOUNT_OPTIONS:
        raise ValueError(f"{text!r}: the option is ro or rw, not {option!r}")
    if not dst.startswith("/"):
        raise ValueError(f"{text!r}: the destination {dst!r} is not an absolute path")
    if _MOUNT_UNSAFE.search(src + dst):
        raise ValueError(f"{text!r}: mount paths may not hold spaces or control characters")
    return src, dst, option


class NodeRange(StrictModel):
    """``nodes: {min: 6, max: 8}``: elastic size. Slurm gives the job what it can in the range
    (``--nodes=6-8``), and a job that loses a node with no spare left goes on with fewer, down to ``min``."""

    min: int = Field(ge=1, le=65536)
    max: int = Field(ge=1, le=65536)

    @model_validator(mode="after")
    def _ordered(self) -> NodeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        return self


def _number_or_range(v: object) -> str:
    return "range" if isinstance(v, dict | NodeRange) else "number"


# `nodes: 4` or `nodes: {min: 2, max: 4}`; the form decides which is checked (an error says that form's fault)
NodeCount = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=65536)], Tag("number")] | Annotated[NodeRange, Tag("range")],
    Discriminator(_number_or_range),
]


class ComponentSpec(StrictModel):
    """Resources of one role's nodes (a Slurm heterogeneous job component)."""

    nodes: NodeCount = 1
    gpus_per_node: int | None = Field(default=None, ge=0, le=64)
    npus_per_node: int | None = Field(default=None, ge=0, le=64)
    cpus_per_node: float | None = Field(default=None, gt=0, le=4096)
    mem: str | None = None
    partition: str | None = None
    container: ContainerSpec | None = None  # this role's own image (e.g. CPU-only parameter servers)

    @field_validator("mem")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        return _matching(_MEM, v, "expected a Slurm memory size such as 16G or 4096M")

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str | None) -> str | None:
        return _matching(_SLURM_WORD, v, "expected a Slurm partition name (letters, digits, . _ : + -)")


class PreflightSpec(StrictModel):
    """``preflight: {allreduce: true}``: the checks, then a tiny collective across every node."""

    allreduce: bool = False


# signals a command may be given to checkpoint: not those that stop a job (TERM, INT, HUP, KILL) or that
# Slurm and the shell use themselves (CONT, STOP, ALRM, CHLD)
CHECKPOINT_SIGNALS = ("USR1", "USR2", "URG", "WINCH", "PWR", "XCPU", "IO", "VTALRM", "PROF")
DEFAULT_SIGNAL = "USR2"  # not USR1, which NCCL and others already catch
DEFAULT_SIGNAL_BEFORE = 120


def _restart_cause(v: str) -> str:
    if v not in RESTART_CAUSES:
        raise ValueError(f"expected one of: {', '.join(RESTART_CAUSES)}")
    return v


RestartCause = Annotated[str, AfterValidator(_restart_cause)]


class RestartSpec(StrictModel):
    """``restart: {max: 3, on: [preempt, timeout, node_fail], in_place: 0}``: requeue the job under the same id
    (up to ``max`` times); a failure or a hang first restarts the commands inside the allocation (up to
    ``in_place`` times)."""

    max: int = Field(default=3, ge=0, le=1000)
    on: list[RestartCause] = Field(default_factory=lambda: list(DEFAULT_RESTART_ON), min_length=1)
    in_place: int = Field(default=0, ge=0, le=1000)

    def check_in_place(self, outlives_a_loss: bool) -> None:
        """Restarts in place follow a failure or a hang, and a lost node when a spare can take its place or
        the job may go on with fewer nodes (elastic size)."""
        causes = (*IN_PLACE_CAUSES, "node_fail") if outlives_a_loss else IN_PLACE_CAUSES
        if self.in_place and not set(self.on) & set(causes):
            raise SpecError(
                "restart.in_place",
                self.in_place,
                f"restarts in place follow {' or '.join(causes)}, which restart.on does not list "
                f"({', '.join(self.on)}); add them, e.g. on: [{', '.join(dict.fromkeys((*self.on, *causes)))}]",
            )


def _one_of(choices: tuple[str, ...]) -> AfterValidator:
    def check(v: str) -> str:
        if v not in choices:
            raise ValueError(f"expected one of: {', '.join(choices)}")
        return v

    return AfterValidator(check)


class NotifySpec(StrictModel):
    """``notify: {url: https://..., on: [failed, hung], format: slack}``: the job posts each of those events
    there as it happens (docs/notifications.md)."""

    url: str = Field(max_length=4096)
    on: list[Annotated[str, _one_of(NOTIFY_EVENTS)]] = Field(default_factory=lambda: list(NOTIFY_EVENTS), min_length=1)
    format: Annotated[str, _one_of(NOTIFY_FORMATS)] = "json"

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[^\s\x00-\x1f\x7f/?#]+[^\s\x00-\x1f\x7f]*", v):
            raise ValueError("expected an http:// or https:// URL (no spaces or control characters)")
        if "@" in re.split(r"[/?#]", v.partition("://")[2], maxsplit=1)[0]:
            why = "a user:password@ in the URL is not sent; put the token in the path or query, as chat hooks do"
            raise ValueError(why)
        return v

    def as_plan(self) -> dict[str, object]:
        return {"url": self.url, "on": list(dict.fromkeys(self.on)), "format": self.format}


def _one_or_many(v: object) -> object:
    return [v] if isinstance(v, dict) else v


Notifies = Annotated[list[NotifySpec], BeforeValidator(_one_or_many)]


class SignalSpec(StrictModel):
    """``signal: {name: USR2, before: 120}``: every node's command gets it this long before the time limit."""

    name: str = DEFAULT_SIGNAL
    before: int = Field(default=DEFAULT_SIGNAL_BEFORE, ge=10, le=86400)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        name = v.upper().removeprefix("SIG")
        if name not in CHECKPOINT_SIGNALS:
            raise ValueError(
                f"expected one of {', '.join(CHECKPOINT_SIGNALS)}; TERM, INT and HUP stop a job, "
                "KILL, STOP, CONT, ALRM and CHLD cannot be caught or are Slurm's own"
            )
        return name


STRAGGLER_WINDOW = 300  # seconds a node steps 30% slower than the others before it is called a straggler


class WatchdogSpec(StrictModel):
    """``watchdog: {silence: 900}``: a node whose command prints nothing (and touches no heartbeat) is hung;
    ``progress: true``: a node whose training step (written to ``TI_SLURM_PROGRESS_FILE``) stops advancing for
    max(3x its usual step interval, 60 s) is hung, however much it prints; and a node whose steps take 30% longer
    than the other nodes' for ``straggler`` seconds (300 unless given; 0: never) is a straggler, said as a warning
    event (docs/failures.md)."""

    silence: int | None = Field(None, ge=10, le=7 * 86400)
    progress: bool = False
    straggler: int | None = Field(None, ge=0, le=7 * 86400)

    @model_validator(mode="after")
    def _something(self) -> WatchdogSpec:
        if self.silence is None and not self.progress:
            raise ValueError("give silence: SECONDS, progress: true, or both")
        if self.straggler and not self.progress:
            raise ValueError("straggler: SECONDS needs progress: true (the steps each node writes)")
        return self

    def straggler_window(self) -> int:
        """Seconds a node must step 30% slower than the others to be a straggler (0: not judged)."""
        if not self.progress:
            return 0
        return STRAGGLER_WINDOW if self.straggler is None else self.straggler


class InputSpec(StrictModel):
    """A data channel: ``TI_SLURM_INPUT_<CHANNEL>`` on every node (``/opt/ml/input/data/<channel>`` in an image)."""

    path: str = Field(min_length=1)
    stage: Literal["none", "local"] = "none"  # local: copied to each node's local disk before the command

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _reject_control("path", v)


def _plain_channels(v: object) -> object:
    """``train: /data`` is ``train: {path: /data}``: one model, so one check, for both forms."""
    if isinstance(v, dict):
        return {name: {"path": c} if isinstance(c, str) else c for name, c in v.items()}
    return v


Channels = Annotated[dict[str, InputSpec], BeforeValidator(_plain_channels)]


class RemoteSpec(StrictModel):
    """Where ``--host`` submission goes by default (docs/remote.md)."""

    host: str
    workdir: str | None = None


AFTER_WHEN = {"ok": "afterok", "failed": "afternotok", "any": "afterany"}  # when: -> Slurm's dependency type


def _job_ids(v: object) -> object:
    """``after: {jobs: 5631001}`` is ``[5631001]``; ids as text (``123``, an array task ``123_4``, a whole array
    ``123_*``)."""
    items = v if isinstance(v, list) else [v]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | str) or not re.fullmatch(r"\d+(_(\d+|\*))?", str(item)):
            raise ValueError(f"{item!r} is not a Slurm job id (123, an array task 123_4, or 123_*)")
    return [str(item) for item in items]


class AfterSpec(StrictModel):
    """``after: {jobs: [5631001], when: ok}``: the job waits for those jobs to end so (Slurm's ``--dependency``:
    ok = afterok, failed = afternotok, any = afterany); one that cannot end so any more ends this job."""

    jobs: Annotated[list[str], BeforeValidator(_job_ids)] = Field(min_length=1)
    when: Literal["ok", "failed", "any"] = "ok"

    @property
    def dependency(self) -> str:
        return ":".join((AFTER_WHEN[self.when], *self.jobs))


FIELD_DOCS: dict[str, tuple[str, str, object]] = {  # field: (its page of docs/, what it does, an example)
    "name": ("specs", "The job's name in Slurm: letters, digits, `._-`.", "bert-pretrain"),
    "mode": ("modes", "The training mode: the Slurm job's shape, each node's variables, the success rule.", "ddp"),
    "command": (
        "modes",
        "The start command, run with `bash -c` on the nodes the mode says.",
        "python train.py --epochs 1",
    ),
    "nodes": ("modes", "Nodes of a one-group mode, or `{min, max}`: elastic size (see survive.md).", 2),
    "gpus_per_node": ("modes", "GPUs per node (`--gres=gpu:N`); a default for every role.", 8),
    "npus_per_node": ("modelarts", "Ascend NPUs per node (GRES npu) and the job's rank table on every node.", 8),
    "cpus_per_node": ("modes", "CPUs per node (`--cpus-per-task`).", 4),
    "mem": ("modes", "Memory per node (`--mem`), a Slurm size.", "64G"),
    "ps": ("modes", "ps-worker: the parameter servers' nodes and resources.", {"nodes": 2, "cpus_per_node": 2}),
    "worker": ("modes", "ps-worker: the workers' nodes and resources.", {"nodes": 2, "gpus_per_node": 1}),
    "head": ("modes", "ray: the head node's resources.", {"cpus_per_node": 2}),
    "worker_groups": (
        "modes",
        "ray: 0 to 5 groups of worker nodes, each with its resources.",
        [{"nodes": 1, "cpus_per_node": 2}],
    ),
    "partition": ("specs", "The Slurm partition; default: the cluster's.", "debug"),
    "account": ("specs", "The Slurm account to charge.", "ml-team"),
    "qos": ("specs", "The Slurm QOS.", "normal"),
    "time": ("specs", "The time limit: `MM`, `HH:MM:SS`, `D-HH:MM` or `UNLIMITED`.", "4:00:00"),
    "sbatch": (
        "specs",
        "More sbatch options by long name; not those ti-slurm sets itself.",
        {"exclusive": True, "constraint": "a100"},
    ),
    "output_dir": ("running", "Where the job's directory `<output_dir>/<job id>/` goes (shared).", "/lustre/me/jobs"),
    "workdir": ("code-and-data", "The command's working directory (with `code`: a folder of it).", "examples/ddp"),
    "code": ("code-and-data", "A directory whose snapshot, taken at submit, every node runs.", "."),
    "code_ignore": ("code-and-data", "Patterns left out of the code snapshot.", ["*.ckpt", "wandb"]),
    "inputs": (
        "code-and-data",
        "Data channels: `TI_SLURM_INPUT_<NAME>` on every node; `stage: local` copies them.",
        {"train": "/lustre/datasets/imagenet"},
    ),
    "outputs": ("code-and-data", "Each job's `model/` and `output/` go to `<outputs>/<job id>/`.", "/lustre/me/runs"),
    "env": (
        "specs",
        "More variables for the command (not the contract's own: those are ti-slurm's).",
        {"OMP_NUM_THREADS": "4"},
    ),
    "python": (
        "specs",
        "The Python environment that runs ti-slurm on the nodes; its `bin` is first on the command's PATH.",
        "/opt/envs/ms/bin/python",
    ),
    "rdma": ("modes", "The RDMA NCCL variables: `auto` (RDMA partitions, whole 8-GPU nodes), `on`, `off`.", "off"),
    "platform": (
        "modelarts",
        "Whose variables the nodes also get: `ti`, or `modelarts` (`MA_*`, `VC_*`).",
        "modelarts",
    ),
    "processes": (
        "modelarts",
        "`one` command per node, or `per-npu`: one per NPU, each with `DEVICE_ID`, `RANK_ID`.",
        "per-npu",
    ),
    "master_port": ("modes", "A fixed DDP master port; default: derived from the job id.", 29500),
    "rendezvous_timeout": (
        "modes",
        "Seconds DDP workers wait for the master (Ray nodes for the head); site default 300.",
        600,
    ),
    "preflight": ("running", "Each node's checks before the command: `on`, `off`, or `{allreduce: true}`.", "off"),
    "restart": (
        "survive",
        "Requeue under the same id (`max`), on these causes, after restarts in place.",
        {"max": 3, "on": ["preempt", "timeout", "node_fail"]},
    ),
    "after": ("pipelines", "Start once these jobs ended `ok`, `failed` or `any`.", {"jobs": [5631001], "when": "ok"}),
    "notify": (
        "notifications",
        "Webhooks the job posts its events to; default: the user config's.",
        {"url": "https://hooks.example.com/t", "on": ["failed"]},
    ),
    "spare_nodes": ("survive", "Idle nodes allocated beside the job's: a lost node's place goes to one.", 1),
    "signal": (
        "survive",
        "The checkpoint signal and how long before the time limit; with restart: USR2, 120 s.",
        {"name": "USR2", "before": 120},
    ),
    "watchdog": ("survive", "A node whose command prints nothing this long is hung.", {"silence": 900}),
    "checkpoint_dir": (
        "survive",
        "`TI_SLURM_CHECKPOINT_DIR`, kept across requeues; default: `<job dir>/checkpoint`.",
        "/lustre/me/ckpt",
    ),
    "container": ("images", "Run the commands inside a training image.", {"image": "/shared/images/pytorch.sqsh"}),
    "remote": ("remote", "Where `--host` submission goes by default.", {"host": "login", "workdir": "/share/me/proj"}),
    "cluster": (
        "clusters",
        "Which of your user config's clusters runs the job (or a cluster of Slurm's multi-cluster setup, as"
        " `sbatch -M` names it), or `auto`: the one that would start it first (a sweep: each point's).",
        "auto",
    ),
}


class JobSpec(StrictModel):
    """A whole training job, as a user writes it."""

    name: Annotated[str, doc("name")] = "ti-slurm"
    mode: Annotated[str, doc("mode")]
    command: Annotated[str, doc("command")] = Field(min_length=1)
    nodes: Annotated[NodeCount | None, doc("nodes")] = None
    gpus_per_node: Annotated[int, doc("gpus_per_node")] = Field(0, ge=0, le=64)
    npus_per_node: Annotated[int, doc("npus_per_node")] = Field(0, ge=0, le=64)
    cpus_per_node: Annotated[float, doc("cpus_per_node")] = Field(1, gt=0, le=4096)
    mem: Annotated[str | None, doc("mem")] = None
    ps: Annotated[ComponentSpec | None, doc("ps")] = None
    worker: Annotated[ComponentSpec | None, doc("worker")] = None
    head: Annotated[ComponentSpec | None, doc("head")] = None
    worker_groups: Annotated[list[ComponentSpec] | None, doc("worker_groups")] = None
    partition: Annotated[str | None, doc("partition")] = None
    account: Annotated[str | None, doc("account")] = None
    qos: Annotated[str | None, doc("qos")] = None
    time: Annotated[str | None, doc("time")] = None
    sbatch: Annotated[dict[str, str | int | bool], doc("sbatch")] = Field(default_factory=dict)
    output_dir: Annotated[str, doc("output_dir")] = "ti-slurm-jobs"
    workdir: Annotated[str | None, doc("workdir")] = None
    code: Annotated[str | None, doc("code")] = None
    code_ignore: Annotated[list[str], doc("code_ignore")] = Field(default_factory=list)
    inputs: Annotated[Channels, doc("inputs")] = Field(default_factory=dict)
    outputs: Annotated[str | None, doc("outputs")] = None
    env: Annotated[dict[str, str], doc("env")] = Field(default_factory=dict)
    python: Annotated[str | None, doc("python")] = None
    rdma: Annotated[Literal["auto", "on", "off"], doc("rdma")] = "auto"
    platform: Annotated[str, doc("platform")] = "ti"
    processes: Annotated[Literal["one", "per-npu"], doc("processes")] = "one"
    master_port: Annotated[int | None, doc("master_port")] = Field(None, ge=1024, le=65535)
    rendezvous_timeout: Annotated[int | None, doc("rendezvous_timeout")] = Field(None, ge=1, le=86400)
    preflight: Annotated[bool | Literal["on", "off"] | PreflightSpec, doc("preflight")] = True
    restart: Annotated[RestartSpec | None, doc("restart")] = None
    after: Annotated[AfterSpec | None, doc("after")] = None
    notify: Annotated[Notifies, doc("notify")] = Field(default_factory=list)
    spare_nodes: Annotated[int, doc("spare_nodes")] = Field(0, ge=0, le=1024)
    signal: Annotated[SignalSpec | None, doc("signal")] = None
    watchdog: Annotated[WatchdogSpec | None, doc("watchdog")] = None
    checkpoint_dir: Annotated[str | None, doc("checkpoint_dir")] = None
    container: Annotated[ContainerSpec | None, doc("container")] = None
    remote: Annotated[RemoteSpec | None, doc("remote")] = None
    cluster: Annotated[str | None, doc("cluster")] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError("a job name is 1-128 of letters, digits, '.', '_', '-', starting with a letter or digit")
        return v

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str | None) -> str | None:
        why = f"expected `{AUTO_CLUSTER}`, a [[cluster]] name of your user config or a Slurm cluster's name"
        why += " (a letter, then letters, digits, _-)"
        return _matching(_CLUSTER_NAME, v, why)

    @field_validator("mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v not in mode_names():
            raise ValueError(f"expected one of: {', '.join(mode_names())}")
        return v

    @field_validator("platform")
    @classmethod
    def _platform(cls, v: str) -> str:
        from ti_slurm.job.platforms import platform_names

        if v not in platform_names():
            raise ValueError(f"expected one of: {', '.join(platform_names())}")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the start command is empty")
        if len(v.encode()) >= MAX_ENV_STRING:  # it is one argument of bash -c
            raise ValueError(f"longer than Linux's {MAX_ENV_STRING}-byte limit for one argument; put it in a script")
        return _reject_control("command", v, allow_newline=True)

    @field_validator("mem")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        return ComponentSpec._mem(v)

    @field_validator("partition", "account", "qos")
    @classmethod
    def _slurm_word(cls, v: str | None) -> str | None:
        return _matching(_SLURM_WORD, v, "expected a Slurm name (letters, digits, . _ : + -)")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return _matching(_TIME, v, "expected a Slurm time limit: MM, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED")

    @field_validator("output_dir", "workdir", "python", "checkpoint_dir", "code", "outputs")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v:
            raise ValueError("an empty path")
        return _reject_control("path", v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if "\x00" in value:
                raise ValueError(f"the value of {key} holds a NUL byte")
            if len(key.encode()) + len(value.encode()) + 2 > MAX_ENV_STRING:
                why = f"{key} is over Linux's {MAX_ENV_STRING}-byte limit for one variable (E2BIG at exec)"
                raise SpecError(f"env.{key}", value, why)
        total = sum(len(key.encode()) + len(value.encode()) + 2 for key, value in v.items())
        if total > MAX_SPEC_ENV:
            raise ValueError(
                f"{total} bytes in all, over the {MAX_SPEC_ENV} a node's command can be given beside the contract "
                "and Slurm's own variables (Linux's ARG_MAX); pass large values in a file"
            )
        return v

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        # what ti-slurm asks Slurm for, and what would undo it or break the job: every such key named at once
        refused = {key: why for key in v if _SBATCH_OPTION.fullmatch(key) and (why := refusal(key))}
        if len(refused) == 1:
            key, why = next(iter(refused.items()))
            raise SpecError(f"sbatch.{key}", v[key], why)
        if refused:
            raise SpecError("sbatch", {key: v[key] for key in refused}, "; ".join(refused.values()))
        for key, value in v.items():
            if not _SBATCH_OPTION.fullmatch(key):
                raise ValueError(f"{key!r} is not an sbatch long option name (write it without '--')")
            if isinstance(value, str):
                _reject_control(f"sbatch.{key}", value)
            if key in ("exclude", "nodelist"):  # a restarted job adds the nodes it lost to its own exclude
                from ti_slurm.core.errors import HostlistError
                from ti_slurm.core.hostlist import expand

                try:
                    expand(str(value))
                except HostlistError as exc:  # raised as SpecError (not ValueError): the message names the key
                    raise SpecError(f"sbatch.{key}", value, str(exc)) from None
        return v

    @model_validator(mode="after")
    def _roles_fit_mode(self) -> JobSpec:
        # Raised as SpecError (not ValueError) so the message names the exact field.
        mode = get_mode(self.mode)
        for key in ROLE_FIELDS:
            if getattr(self, key) is not None and key not in mode.role_fields:
                raise SpecError(key, self.mode, f"{key!r} belongs to another mode; mode {self.mode} does not take it")
        if not mode.role_fields and self.nodes is None:
            raise SpecError("nodes", None, f"mode {self.mode} needs 'nodes' (how many nodes run the command)")
        if mode.role_fields and self.nodes is not None:
            raise SpecError("nodes", self.nodes, f"mode {self.mode} sets nodes per role, not at the top level")
        mode.check_spec(self)
        check_sizes(self)
        check_signal_fits_time(self)
        leaves_the_contract_its_own(self.mode, self.platform, self.env)
        check_channels(self.inputs)
        if self.processes == "per-npu" and not any(c.npus_per_node for c in mode.components(self)):
            raise SpecError("processes", self.processes, "one process per NPU needs npus_per_node")
        for where, cpus in self.cpu_counts():
            if cpus != int(cpus):
                raise SpecError(where, cpus, "Slurm allocates whole CPUs; use an integer")
        return self

    def checkpoint_signal(self) -> SignalSpec | None:
        """The signal the nodes get before the time limit: the spec's, USR2 when only ``restart`` is set."""
        if self.signal is not None:
            return self.signal
        restarts = self.restart is not None and (self.restart.max > 0 or self.restart.in_place > 0)
        return SignalSpec() if restarts else None

    def cpu_counts(self) -> list[tuple[str, float]]:
        """Every CPU count in the spec, with the field it is in."""
        counts = [("cpus_per_node", self.cpus_per_node)]
        for key in ("ps", "worker", "head"):
            part = getattr(self, key)
            if part is not None and part.cpus_per_node is not None:
                counts.append((f"{key}.cpus_per_node", part.cpus_per_node))
        for i, part in enumerate(self.worker_groups or []):
            if part.cpus_per_node is not None:
                counts.append((f"worker_groups.{i}.cpus_per_node", part.cpus_per_node))
        return counts


def check_signal_fits_time(spec: JobSpec) -> None:
    """The checkpoint signal comes before the time limit, not at or after it."""
    limit = time_seconds(spec.time)
    signal = spec.checkpoint_signal()
    if limit is not None and signal is not None and signal.before >= limit:
        raise SpecError("signal.before", signal.before, f"is not less than the time limit ({spec.time} = {limit} s)")


def check_sizes(spec: JobSpec) -> None:
    """Spare nodes take lost nodes' places in restarts in place; they, and a range of nodes (elastic size),
    go to the one component the mode lets change in number."""
    mode = get_mode(spec.mode)
    comps = mode.components(spec)
    if spec.restart is not None:
        spec.restart.check_in_place(bool(spec.spare_nodes) or any(c.elastic for c in comps))
    if spec.spare_nodes and (spec.restart is None or not spec.restart.in_place or "node_fail" not in spec.restart.on):
        raise SpecError(
            "spare_nodes",
            spec.spare_nodes,
            "a spare takes a lost node's place when the job restarts in place; "
            "set restart.in_place and list node_fail in restart.on",
        )
    resizable = mode.resizable_component(comps)
    fields = node_fields(spec)
    for c, comp in enumerate(comps):
        if comp.elastic and resizable is None:
            raise SpecError(fields[c], _plain_range(comp), mode.fixed_size)
        if comp.elastic and c != resizable:
            only = fields[resizable or 0]
            why = f"the {comp.name} nodes of mode {spec.mode} are fixed in number; only {only} may be a range"
            raise SpecError(fields[c], _plain_range(comp), why)
    if spec.spare_nodes and resizable is None:
        raise SpecError("spare_nodes", spec.spare_nodes, mode.fixed_size)


def node_fields(spec: JobSpec) -> list[str]:
    """The spec field that sizes each component, in the components' order: ``nodes``, ``worker.nodes``,
    ``worker_groups.0.nodes``."""
    mode = get_mode(spec.mode)
    if not mode.role_fields:
        return ["nodes"]
    fields = []
    for key in mode.role_fields:
        value = getattr(spec, key)
        if isinstance(value, list):
            fields += [f"{key}.{i}.nodes" for i in range(len(value))]
        else:
            fields.append(f"{key}.nodes")
    return fields


def _plain_range(comp: Component) -> dict[str, int]:
    return {"min": comp.fewest, "max": comp.nodes}


MAX_DEPTH = 16  # a spec nests three levels; anything far deeper is not a spec


def check_document(value: object, where: str = "", depth: int = 0) -> None:
    """Refuse what no field can hold before validating: deep nesting, text that is not Unicode."""
    if depth > MAX_DEPTH:
        raise SpecError(where or "spec", "...", f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecError(where or "spec", value, "holds a lone surrogate (not Unicode text)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_document(key, where, depth + 1)
            check_document(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_document(item, f"{where}.{i}" if where else str(i), depth + 1)


def parse_spec(data: object) -> JobSpec:
    """Validate a decoded spec document; raise :class:`SpecError` naming the field."""
    if not isinstance(data, dict):
        raise SpecError("", data, "a job spec is a mapping of fields (YAML or JSON object)")
    check_document(data)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise _one_line(exc) from None


def with_after(spec: JobSpec, jobs: list[str], when: str) -> JobSpec:
    """``spec`` waiting for ``jobs`` to end ``when`` (``submit --after``, ``submit(after=...)``), in place of its own
    ``after:``; a bad id or ``when`` is one line naming ``after.jobs`` or ``after.when``."""
    try:
        after = AfterSpec.model_validate({"jobs": jobs, "when": when})
    except ValidationError as exc:
        raise _one_line(exc, within=("after",)) from None
    return spec.model_copy(update={"after": after})


_FORMS = ("number", "range")


def _one_line(exc: ValidationError, within: tuple[str, ...] = ()) -> SpecError:
    """pydantic's first complaint about a spec as one line (:func:`one_line`), with an example of the right
    shape and the page of docs/ to read."""
    parts = complaint_where(exc, within)
    page = page_of(str(parts[0]) if parts else "")
    example = ""
    if len(parts) == 1 and parts[0] in FIELD_DOCS:
        example = f", e.g. {parts[0]}: {flow_yaml(FIELD_DOCS[str(parts[0])][2])}"
    return one_line(exc, JobSpec, SpecError, page, within=within, example=example)  # type: ignore[return-value]


def complaint_where(exc: ValidationError, within: tuple[str, ...] = ()) -> list[object]:
    """Where pydantic's first complaint is (an unknown field before a missing one: a typo makes both), without
    the tag of the form a ``nodes`` field took (a number or a range)."""
    err = _first_complaint(exc)
    loc = err["loc"]
    return [*within, *(p for i, p in enumerate(loc) if not (i and loc[i - 1] == "nodes" and p in _FORMS))]


def _first_complaint(exc: ValidationError) -> Any:
    errors = exc.errors(include_url=False)
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def one_line(
    exc: ValidationError,
    root: type[BaseModel],
    error: type[InputError],
    page: str,
    *,
    within: tuple[str, ...] = (),
    prefix: str = "",
    example: str = "",
    noun: str = "field",
    whole: str = "spec",
    show_tables: bool = True,
) -> InputError:
    """pydantic's first complaint about a document of model ``root`` (the spec, the user config) as one
    ``error``: the key (after ``prefix``: the file), the value, why (an unknown key with the nearest valid name;
    a value of the wrong kind in a writer's words, with ``example``), and the ``page`` of docs/ to read. Without
    ``show_tables``, a rule of a whole mapping is said without the mapping (the key says which)."""
    err = _first_complaint(exc)
    parts = complaint_where(exc, within)
    where = prefix + (".".join(str(p) for p in parts) or whole)  # ``whole``: a complaint about the document
    if err["type"] == "extra_forbidden":
        return error(where, err.get("input"), f"{_unknown_field(parts, root, noun)} (see {page})")
    if err["type"] == "missing":
        return error(where, MISSING, f"required, and not given (see {page})")
    msg = _SHAPES.get(err["type"]) or err["msg"].removeprefix("Value error, ")
    if err["type"] in _SHAPES:
        msg += example
    shown = err.get("input")
    if err["type"] == "value_error" and isinstance(shown, dict) and not show_tables:
        shown = MISSING
    return error(where, shown, f"{msg} (see {page})")


_SHAPES = {  # pydantic's error types for a value of the wrong kind, in a spec author's words
    "dict_type": "expected a mapping",
    "list_type": "expected a list",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "string_type": "expected text",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}


def _unknown_field(parts: Sequence[object], root: type[BaseModel], noun: str = "field") -> str:
    """``unknown field; did you mean 'command'?``: the nearest name the enclosing model has."""
    import difflib

    model: type[BaseModel] | None = root
    for part in parts[:-1]:  # list indices and channel names stay at the model they index
        if model is not None and isinstance(part, str) and part in model.model_fields:
            model = _model_in(model.model_fields[part].annotation)
    names = list(model.model_fields) if model is not None else []
    near = difflib.get_close_matches(str(parts[-1]), names, n=1, cutoff=0.6)
    if near:
        return f"unknown {noun}; did you mean {near[0]!r}?"
    return f"unknown {noun}; the {noun}s here: {', '.join(names)}" if len(names) <= 8 else f"unknown {noun}"


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The model a field holds, through ``Optional``, ``Annotated``, lists and mappings."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def flow_yaml(value: object) -> str:
    """An example value as a user would write it in a YAML spec, on one line."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow_yaml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and (not re.fullmatch(r"[A-Za-z_./][\w./:@ -]*", value) or value[-1] == " "):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def load_spec(path: str | os.PathLike[str]) -> JobSpec:
    """Load a YAML or JSON spec file."""
    from ti_slurm.submitting.specfile import read_document, read_text_file  # imports yaml: not for specs given as dicts

    p = Path(path)
    text = read_text_file(p, "spec")
    try:
        data = read_document(text, p, JobSpec)  # nesting too deep is read_document's one line
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise SpecError("spec", str(p), f"invalid value: {str(exc).splitlines()[0][:100]}") from None
    return parse_spec(data)
