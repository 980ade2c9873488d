"""A failed attempt's cause, read from the failed nodes' logs (:mod:`ti_slurm.core.causes`'s signatures): each
failed node's last lines, and what Slurm said on srun's stderr (its cgroup's OOM kill); the root is the first
node to fail whose cause is no cascade, the others its consequences."""

from __future__ import annotations

import os

from ti_slurm.core.causes import Evidence, classify, compiled, root_of
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.job.watch import settled

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ti_slurm.core.events import NodeExit
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.supervisor.launchers import Launch

KILLED = 128  # an exit code above: the command was killed by a signal (srun's kill of a failed job's other tasks)
TAIL_BYTES = 64 * 1024  # a failure's evidence is in the last lines of a log
COUNT_LINES_UP_TO = 256 << 20  # a longer log's evidence line is numbered from its end (counting would take long)


def log_tail(path: str) -> tuple[list[str], int]:
    """The last lines of a log and the number of the first of them (counted from 1; from the end, negative, for a
    log over :data:`COUNT_LINES_UP_TO`); ([], 1) when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BYTES)
            fh.seek(start)
            tail = fh.read(TAIL_BYTES)
            before = 0
            if start and size <= COUNT_LINES_UP_TO:
                fh.seek(0)
                while fh.tell() < start:
                    before += fh.read(min(1 << 20, start - fh.tell())).count(b"\n")
    except OSError:
        return [], 1
    lines = tail.decode(errors="replace").splitlines()
    if start:  # the first line may be cut: leave it out
        lines, before = lines[1:], before + 1
    if start and size > COUNT_LINES_UP_TO:
        return lines, -len(lines)
    return lines, before + 1


def failure_evidence(
    plan: JobPlan, paths: JobPaths, records: Mapping[tuple[str, int], NodeExit], launches: Sequence[Launch] = ()
) -> tuple[Evidence | None, list[Evidence]]:
    """The failed attempt's root cause and its consequences, from the failed nodes' logs (and srun's stderr for
    their launch: Slurm's OOM kill of a step is said there); (None, []) when no log says anything known."""
    from ti_slurm.job.modes import get_mode

    rule = get_mode(plan.mode).rule
    signatures = compiled(plan.failure_signatures)
    found: list[tuple[float, Evidence | None]] = []
    failed = [r for r in records.values() if r.exit_code != 0]
    settled([paths.node_log(r.component, r.index) for r in failed])
    for record in records.values():
        if record.exit_code == 0:
            continue
        label = node_label(record.component, record.index)
        lines, first = log_tail(paths.node_log(record.component, record.index))
        evidence = classify(lines, signatures, first)
        said = [line for launch in launches if launch.component == record.component for line in launch.said]
        from_slurm = classify(said, signatures)
        if from_slurm is not None and (evidence is None or from_slurm.cause == "host_oom"):
            evidence, label = from_slurm, f"{label} (srun)"
            evidence.number = 0
        if evidence is not None and evidence.cause == "user_error" and rule.runs_runtime_only(record.component):
            evidence.cause = "unknown"  # the runtime's traceback (a Ray daemon's), not the user's bug
        if evidence is not None:
            evidence.node, evidence.log = record.node, f"logs/{node_label(record.component, record.index)}.log"
            if label.endswith("(srun)"):
                evidence.log = "srun"
        if evidence is not None or record.exit_code <= KILLED:  # killed silent (srun's kill on a bad exit): no root
            found.append((record.ended, evidence))
    return root_of(found)


def said_line(evidence: Evidence, consequences: Sequence[Evidence]) -> str:
    """The cause in one line for a reason: the class, the node, where and what the evidence says."""
    where = f"{evidence.log}:{evidence.number}" if evidence.number else evidence.log
    line = f"{evidence.cause} on {evidence.node} ({where}: {evidence.line[:160]})"
    if consequences:
        nodes = sorted({e.node for e in consequences if e.node and e.node != evidence.node})
        if nodes:
            line += f"; then {', '.join(nodes)} failed as a consequence"
    return line
