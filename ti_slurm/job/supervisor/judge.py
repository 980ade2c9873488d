"""The mode's rule applied to what happened: pure functions of the launches and one snapshot of the records.

The rule (see :class:`ti_slurm.job.modes.base.Rule`): a required component's non-zero exit fails
the job at once; when every required component has exited 0 (and every one of its nodes has its
own exit record: ``srun`` can exit 0 when a task failed to launch), the job succeeds; a background
component (parameter servers, Ray workers) that exits before then fails the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ti_slurm.core.events import NodeExit
from ti_slurm.core.states import JobState
from ti_slurm.job.modes.base import Rule
from ti_slurm.job.supervisor.launchers import Launch

NodeKey = tuple[str, int]  # (component name, node index within it)


@dataclass
class Outcome:
    """How a job (or one attempt of it) ended."""

    state: JobState  # COMPLETED | FAILED | CANCELLED | TIMEOUT | PREEMPTED | NODE_FAIL
    reason: str = ""
    failed: dict[str, object] = field(default_factory=dict)
    cause: str = ""  # why the attempt ended: a cause of ti_slurm.core.causes.CAUSES ("" when it completed)
    evidence: dict[str, object] = field(default_factory=dict)  # the log line that named the cause, and where
    progress: dict[str, object] = field(default_factory=dict)  # the attempt's first and last training step, when
    lost_nodes: list[str] = field(default_factory=list)
    requeue: bool = False  # the job goes on in a next attempt
    requeued_by_slurm: bool = False  # ... which Slurm has already queued (preemption, node failure)
    in_place: bool = False  # ... in the same allocation: the commands restarted, no requeue (restart.in_place)

    @property
    def exit_code(self) -> int:
        if self.state is JobState.COMPLETED:
            return 0
        code = self.failed.get("exit_code")
        return code if isinstance(code, int) and 0 < code < 256 else 1


@dataclass(frozen=True)
class Snapshot:
    """What the job's files said at one moment: every node's exit record so far, and whether the job
    directory's filesystem is full (then no node could record its exit: ``disk_full`` says so)."""

    records: Mapping[NodeKey, NodeExit]
    job_dir: str
    disk_full: str = ""


def judge(rule: Rule, launches: Sequence[Launch], launch: Launch, snap: Snapshot, names: NodeNames) -> Outcome | None:
    """The job's outcome once ``launch`` has exited, or ``None``: it goes on."""
    required = rule.is_required(launch.component)
    if required and launch.exit_code != 0:
        return failure(launch, snap, names)
    missing_indexes = [i for i in launch.nodes if (launch.component, i) not in snap.records]
    if required and missing_indexes:
        missing = names.labels(launch, missing_indexes)
        why = snap.disk_full or f"the command never ran, or {snap.job_dir} is not on a filesystem every node shares"
        reason = f"{launch.component} step exited {launch.exit_code} but node(s) {missing} left no exit record ({why})"
        return Outcome(JobState.FAILED, reason, {"component": launch.component, "node": missing, "exit_code": None})
    if not required and not launch.stopping:
        if required_commands_done(rule, launches, snap):
            return None  # shutting down after the command (Ray workers leave when the head stops)
        outcome = failure(launch, snap, names, any_exit=True)
        outcome.reason = f"{outcome.reason} while the job was still running"
        return outcome
    if all(x.exit_code == 0 for x in launches if rule.is_required(x.component)):
        return Outcome(JobState.COMPLETED, "every required step exited 0")
    return None


def failure(launch: Launch, snap: Snapshot, names: NodeNames, any_exit: bool = False) -> Outcome:
    """The outcome naming the first node of ``launch`` that failed (or, with ``any_exit``, that exited)."""
    own = [snap.records[(launch.component, i)] for i in launch.nodes if (launch.component, i) in snap.records]
    bad = sorted((r for r in own if any_exit or r.exit_code), key=lambda r: r.ended)
    if not bad:
        nodes = names.labels(launch, launch.nodes)
        failed: dict[str, object] = {
            "component": launch.component,
            "node": nodes,
            "index": None,
            "exit_code": launch.exit_code,
        }
        reason = f"{launch.component} step on {nodes} exited {launch.exit_code}"
        return Outcome(JobState.FAILED, reason + (f" ({snap.disk_full})" if snap.disk_full else ""), failed)
    first = bad[0]
    failed = {"component": launch.component, "node": first.node, "index": first.index, "exit_code": first.exit_code}
    what = f"failed {first.error}" if first.error else f"exited {first.exit_code}"
    return Outcome(JobState.FAILED, f"{launch.component} node {first.node} (index {first.index}) {what}", failed)


def required_commands_done(rule: Rule, launches: Sequence[Launch], snap: Snapshot) -> bool:
    """Every node of every required component has recorded exit 0."""
    records = snap.records
    for launch in launches:
        if rule.is_required(launch.component):
            for i in launch.nodes:
                record = records.get((launch.component, i))
                if record is None or record.exit_code != 0:
                    return False
    return True


class NodeNames:
    """The job's node names, per component (as the launcher named them when the job started)."""

    def __init__(self, per_component: Sequence[Sequence[str]]) -> None:
        self.per_component = [list(names) for names in per_component]

    def of(self, launch: Launch, index: int) -> str | None:
        names = self.per_component[launch.component_index]
        return names[index] if index < len(names) else None

    def labels(self, launch: Launch, indexes: Sequence[int]) -> str:
        """The nodes' names, comma-separated (an index for a node without a name)."""
        names = self.per_component[launch.component_index]
        return ",".join(names[i] if i < len(names) else str(i) for i in indexes)
