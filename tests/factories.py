"""Shared factories for tests: plans (from a spec, or as plain records), the smallest valid spec of each mode,
and the variables Slurm gives a node (so a contract is built without Slurm)."""

from __future__ import annotations

from typing import Any

from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.site import SiteConfig
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.spec import parse_spec

# the smallest spec of each mode, two nodes (or roles) each
MODE_SPECS: dict[str, dict[str, Any]] = {
    "ddp": {"mode": "ddp", "nodes": 2},
    "mpi": {"mode": "mpi", "nodes": 2},
    "horovod": {"mode": "horovod", "nodes": 2},
    "mindspore": {"mode": "mindspore", "nodes": 2},
    "ps-worker": {"mode": "ps-worker", "ps": {"nodes": 1}, "worker": {"nodes": 2}},
    "ray": {"mode": "ray", "head": {}, "worker_groups": [{"nodes": 2}]},
}


def spec_doc(mode: str = "ddp", **fields: Any) -> dict[str, Any]:
    """A valid spec document of ``mode`` (its smallest, with ``command: train``), ``fields`` on top."""
    return {"command": "train", **MODE_SPECS[mode], **fields}


def plan_from(doc: dict[str, Any], site: SiteConfig | None = None, submission: str = "", **fields: Any) -> JobPlan:
    """The plan submit makes of spec document ``doc`` (``command: train`` unless it has one); ``fields``
    replace the plan's own afterwards."""
    plan = make_plan(parse_spec({"command": "train", **doc}), site, submission=submission)
    return plan.replace(**fields) if fields else plan


def job_plan(mode: str = "ddp", *components: Component | tuple[str, int], **fields: Any) -> JobPlan:
    """A plan as a plain record, no spec: command ``true``, each component a :class:`Component` or
    ``(name, nodes)`` (none given: one of two nodes named after the mode)."""
    made = tuple(c if isinstance(c, Component) else Component(c[0], c[1], 0, 1) for c in components or [(mode, 2)])
    return JobPlan("t", mode, "true", made, **fields)


def single(nodelist: str, nodeid: int, job_id: int = 4242, **extra: str) -> dict[str, str]:
    """What Slurm gives node ``nodeid`` of a job on ``nodelist``."""
    return {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_NODELIST": nodelist, "SLURM_NODEID": str(nodeid), **extra}


def het(lists: list[str], nodeid: int, job_id: int = 777, **extra: str) -> dict[str, str]:
    """What Slurm gives node ``nodeid`` of a component of a heterogeneous job on ``lists`` (one per component)."""
    env = {"SLURM_JOB_ID": str(job_id + 1), "SLURM_HET_JOB_ID": str(job_id), "SLURM_HET_SIZE": str(len(lists))}
    env.update({f"SLURM_JOB_NODELIST_HET_GROUP_{g}": text for g, text in enumerate(lists)})
    return {**env, "SLURM_NODEID": str(nodeid), **extra}


def slurm_env(plan: JobPlan, node: int = 0) -> dict[str, str]:
    """What Slurm gives node ``node`` of each component of ``plan`` (names ``n<component>-<i>``)."""
    lists = [f"n{c}-[0-{comp.nodes - 1}]" for c, comp in enumerate(plan.components)]
    return single(lists[0], node) if len(lists) == 1 else het(lists, node)
