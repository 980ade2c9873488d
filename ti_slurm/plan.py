"""The job plan: what a spec becomes once decided, as plain data.

``make_plan(spec, site)`` is pure. The plan travels into the job as JSON and is
read back with :meth:`JobPlan.from_json` in every job step, so the classes
are :class:`~ti_slurm.record.Record`s (frozen dataclasses without importing
``dataclasses``) and this module imports nothing heavy at run time.
"""

from __future__ import annotations

import sys

from ti_slurm.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from typing import Any

    from ti_slurm.site import SiteConfig
    from ti_slurm.spec import GroupSpec, JobSpec

PLAN_VERSION = 1


class Component(Record):
    """One role group of nodes; a heterogeneous job component when there are several."""

    name: str  # ddp | mpi | horovod | ps | worker | head | worker1..worker5
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    mem: str | None = None
    partition: str | None = None
    command: str = ""  # this role's own start command; "" runs the job's

    @property
    def slots(self) -> int:
        """Processes per node for hostfiles and NODE_IP_SLOT_LIST: one per GPU, at least one."""
        return max(self.gpus_per_node, 1)


class JobPlan(Record):
    """Everything the job needs, decided before submission."""

    name: str
    mode: str
    command: str
    components: tuple[Component, ...]
    env: dict[str, str] = {}  # noqa: RUF012 (Record copies it per instance)
    rdma: str = "auto"  # auto | on | off
    rdma_partitions: tuple[str, ...] = ()
    rdma_min_nodes: int = 2
    rdma_min_gpus_per_node: int = 8
    nccl_overrides: dict[str, dict[str, str]] = {}  # noqa: RUF012 (copied per instance); partition or "*" -> vars
    master_port: int | None = None
    port_range: tuple[int, int] = (61000, 65535)
    rendezvous_timeout: int = 300
    stop_grace: int = 10
    output_dir: str = "ti-slurm-jobs"
    workdir: str | None = None
    python: str = sys.executable
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    sbatch: dict[str, str | int | bool] = {}  # noqa: RUF012 (Record copies it per instance)
    submission: str = ""  # unique per submit: tags the job's events and its Slurm comment
    version: int = PLAN_VERSION

    def command_of(self, group: int) -> str:
        """The start command the nodes of component ``group`` run."""
        return self.components[group].command or self.command

    @property
    def heterogeneous(self) -> bool:
        return len(self.components) > 1

    @property
    def total_nodes(self) -> int:
        return sum(c.nodes for c in self.components)

    def to_json(self) -> str:
        """One line of JSON (no raw newlines, so it is safe inside a quoted heredoc)."""
        import json

        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True, ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> JobPlan:
        from ti_slurm import lightjson  # the job path: json itself would import re and enum

        data: dict[str, Any] = lightjson.loads(text)
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')} is not {PLAN_VERSION}")
        data["components"] = tuple(Component(**c) for c in data["components"])
        data["rdma_partitions"] = tuple(data["rdma_partitions"])
        data["port_range"] = tuple(data["port_range"])
        return cls(**data)


def _component(name: str, group: GroupSpec | None, spec: JobSpec) -> Component:
    def pick(attr: str) -> Any:
        value = getattr(group, attr, None) if group is not None else None
        return getattr(spec, attr) if value is None else value

    return Component(
        name=name,
        nodes=group.nodes if group is not None else (spec.nodes or 1),
        gpus_per_node=int(pick("gpus_per_node")),
        cpus_per_node=int(pick("cpus_per_node")),
        mem=pick("mem"),
        partition=pick("partition"),
        command=role_command(spec, name),
    )


def role_command(spec: JobSpec, name: str) -> str:
    """A role's own start command, "" where it runs the job's.

    Only ModelArts makes one: it appends the hyperparameter ``--task_name=ps|worker``
    to each PS-Worker task's command.
    """
    if spec.platform == "modelarts" and spec.mode == "ps-worker":
        return f"{spec.command} --task_name={name}"
    return ""


def components_for(spec: JobSpec) -> tuple[Component, ...]:
    """The role groups of a spec, in heterogeneous-component order."""
    if spec.mode == "ps-worker":
        return (_component("ps", spec.ps, spec), _component("worker", spec.worker, spec))
    if spec.mode == "ray":
        head = _component("head", spec.head, spec)
        workers = [_component(f"worker{i + 1}", g, spec) for i, g in enumerate(spec.worker_groups or [])]
        return (head, *workers)
    return (_component(spec.mode, None, spec),)


def site_plan_fields(site: SiteConfig) -> dict[str, Any]:
    """The plan fields the site config decides, alike for specs and hand-written scripts."""
    return {
        "rdma_partitions": tuple(site.rdma_partitions),
        "rdma_min_nodes": site.rdma_min_nodes,
        "rdma_min_gpus_per_node": site.rdma_min_gpus_per_node,
        "nccl_overrides": {k: dict(v) for k, v in site.nccl.items()},
        "port_range": (site.port_min, site.port_max),
    }


def make_plan(
    spec: JobSpec, site: SiteConfig | None = None, *, python: str | None = None, submission: str = ""
) -> JobPlan:
    """Decide a job from a validated spec and the site config. Pure."""
    from ti_slurm.site import SiteConfig

    site = site or SiteConfig()
    return JobPlan(
        name=spec.name,
        mode=spec.mode,
        command=spec.command,
        components=components_for(spec),
        env=dict(spec.env),
        rdma=spec.rdma,
        master_port=spec.master_port,
        **site_plan_fields(site),
        rendezvous_timeout=spec.rendezvous_timeout or site.rendezvous_timeout,
        output_dir=spec.output_dir,
        workdir=spec.workdir,
        python=spec.python or python or site.python or sys.executable,
        partition=spec.partition,
        account=spec.account,
        qos=spec.qos,
        time=spec.time,
        sbatch=dict(spec.sbatch),
        submission=submission,
    )
