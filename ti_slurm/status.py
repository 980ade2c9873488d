"""A job's status, from its own record (``status.jsonl``) and the scheduler queue.

The job's record is the source of truth for how it ended; the queue only says
whether it is still pending or running. Pure functions of their inputs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.hostlist import compress

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass
class ComponentStatus:
    name: str
    nodes: list[str]
    state: str = "PENDING"  # PENDING | RUNNING | COMPLETED | FAILED | STOPPED
    exit_code: int | None = None
    node_exits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class JobStatus:
    job_id: str
    name: str
    state: str
    reason: str = ""
    mode: str = ""
    job_dir: str = ""
    failed: dict[str, Any] = field(default_factory=dict)
    components: list[ComponentStatus] = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def node_label(component: str, n: object) -> str:
    """``<component>-<n>``: how logs and commands name the n-th node of a component."""
    return f"{component}-{n}"


def node_log(job_dir: str, component: str, n: object) -> str:
    """That node's log, ``<job dir>/logs/<component>-<n>.log`` (``n`` may be srun's ``%n``)."""
    return os.path.join(job_dir, "logs", f"{node_label(component, n)}.log")


def read_events(backend: Backend, job: JobInfo) -> list[dict[str, Any]]:
    """The job's events from ``<job dir>/status.jsonl``, through whichever backend reaches it."""
    return parse_events(backend.read_text(os.path.join(job.job_dir, "status.jsonl"))) if job.job_dir else []


def parse_events(text: str | None) -> list[dict[str, Any]]:
    events = []
    for line in (text or "").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a line being written right now
    return events


def job_status(job: JobInfo, events: list[dict[str, Any]], queued: JobInfo | None) -> JobStatus:
    """Combine the job's events and its queue entry (``None`` when no longer queued).

    Events of another submission (an earlier job with the same id) are ignored.
    """
    status = JobStatus(job.job_id, job.name, "UNKNOWN", job_dir=job.job_dir)
    if job.submission:
        events = [ev for ev in events if ev.get("submission") == job.submission]
    for ev in events:
        kind = ev.get("event")
        if kind == "start":
            status.mode = ev.get("mode", "")
            status.components = [
                ComponentStatus(c["name"], list(c["nodes"]), "RUNNING") for c in ev.get("components", [])
            ]
            status.state = "RUNNING"
        elif kind == "step-exit":
            for comp in status.components:
                if comp.name == ev.get("component"):
                    code = ev.get("exit_code")
                    comp.exit_code = code
                    comp.node_exits.extend(ev.get("records", []))
                    comp.state = "STOPPED" if ev.get("stopped") else ("COMPLETED" if code == 0 else "FAILED")
        elif kind == "end":
            status.state = ev.get("state", "UNKNOWN")
            status.reason = ev.get("reason", "")
            status.failed = ev.get("failed") or {}
    if not status.final:
        if queued is not None:
            if queued.state != "RUNNING" or not status.components:
                status.state = queued.state
            status.reason = status.reason or queued.reason
            if not status.components and queued.state == "PENDING":
                status.reason = queued.reason or "waiting for resources"
        elif status.state == "RUNNING":
            status.state, status.reason = "FAILED", "the job ended without a final record (killed, or its node failed)"
        else:
            status.reason = "not in the queue and no record in the job directory"
    return status


def format_status(status: JobStatus) -> str:
    """A short table for people."""
    head = f"job {status.job_id}  {status.name}  {status.mode or '-'}  {status.state}"
    if status.reason:
        head += f"  ({status.reason})"
    lines = [head]
    if status.components:
        lines.append(f"  {'component':<10} {'state':<10} {'exit':<5} nodes")
        for comp in status.components:
            code = "" if comp.exit_code is None else str(comp.exit_code)
            lines.append(f"  {comp.name:<10} {comp.state:<10} {code:<5} {compress(comp.nodes) if comp.nodes else '-'}")
            for rec in comp.node_exits:
                if rec.get("exit_code") not in (0, None):
                    lines.append(
                        f"  {'':<10} node {rec.get('node')} (index {rec.get('index')}) exited {rec.get('exit_code')}"
                        f"; its log: ti-slurm logs {status.job_id} --node {node_label(comp.name, rec.get('index'))}"
                    )
    return "\n".join(lines)
