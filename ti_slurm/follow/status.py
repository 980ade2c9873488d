"""A job's status, from its own record (``status.jsonl``) and the scheduler queue.

The job's record is the source of truth for how it ended; the queue only says
whether it is still pending or running. Pure functions of their inputs.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.events import own_events
from ti_slurm.core.hostlist import compress
from ti_slurm.core.paths import node_label
from ti_slurm.core.states import JobState

if TYPE_CHECKING:
    from ti_slurm.core.plan import JobPlan

PENDING_FOREVER = {  # Slurm's reasons for a job that cannot start as its partition stands
    "PartitionConfig": "the job asks for more than the partition has",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionTimeLimit": "a time limit above the partition's maximum",
    "BadConstraints": "constraints no node of the partition meets",
}


@dataclass
class ComponentStatus:
    """One component of a job: its nodes, and how its step ended."""

    name: str
    nodes: list[str]
    state: str = "PENDING"  # PENDING | RUNNING | COMPLETED | FAILED | STOPPED
    exit_code: int | None = None
    node_exits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class AttemptStatus:
    """One attempt of a job that may be requeued: when it ran, how it ended, and whether it went on."""

    attempt: int  # its number (TI_SLURM_RESTART_COUNT): 0 for the first, one more per requeue or restart in place
    started: float | None = None
    ended: float | None = None
    state: str = "RUNNING"  # how it ended: COMPLETED FAILED CANCELLED TIMEOUT PREEMPTED NODE_FAIL
    cause: str = ""  # why it ended: a cause of ti_slurm.core.causes.CAUSES ("" when it completed or runs)
    # the log line that named the cause: {cause, node, log, line, text, consequences: [nodes]}
    evidence: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)  # its first and last training step, and when
    reason: str = ""
    requeued: bool = False  # the job went on in a next attempt ...
    in_place: bool = False  # ... in the same allocation (restart.in_place), not through the queue
    nodes: list[str] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)
    # a lost node -> the spare that took its place (None: the job went on without it, its size elastic)
    replaced: dict[str, str | None] = field(default_factory=dict)
    idle: list[str] = field(default_factory=list)  # spare nodes the attempt held idle
    # how it started, seconds since the epoch: ``started`` (its start event), and for an allocation's first attempt
    # ``batch`` (the batch script ran), ``supervisor``, ``launched`` (its steps); then, once the nodes said so,
    # ``steps`` and ``commands`` [first, last] (each node's step began; handed over its command), ``last`` (the
    # node whose command started last) and ``all`` (false: the attempt ended before every node's command ran)
    timeline: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobStatus:
    """A job's state, its components, and the node that failed it (``status --json`` prints this)."""

    job_id: str
    name: str
    state: JobState
    reason: str = ""
    mode: str = ""
    job_dir: str = ""
    failed: dict[str, Any] = field(default_factory=dict)
    components: list[ComponentStatus] = field(default_factory=list)  # of the latest attempt
    attempts: list[AttemptStatus] = field(default_factory=list)
    # a job that ended without its final record: its batch script's output, whose last lines say why
    batch_output: str = ""
    batch_tail: list[str] = field(default_factory=list)
    # the code snapshot the job runs (``dir``, ``tree``, git's ``commit`` and ``dirty``), when it has one
    code: dict[str, Any] = field(default_factory=dict)
    # while nodes copy staged inputs: node -> [bytes done, bytes in all] (empty once none is copying)
    staging: dict[str, list[int]] = field(default_factory=dict)
    waits_for: str = ""  # a pending job's after: as Slurm shows it (afterok:123(unfulfilled))
    sweep: str = ""  # the sweep it is a point of
    undelivered: list[dict[str, Any]] = field(default_factory=list)  # notifications the job could not post
    # nodes stepping 30% slower than the others (watchdog: {progress: true}): attempt, node, seconds_a_step, others
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    submitted: float = 0.0  # when it was submitted (0: not known)
    # where its time went: queued, starting, productive, lost, recomputed, wall (s); effective (a share)
    goodput: dict[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        """Following the job further would learn nothing: it ended, or is neither queued nor recorded."""
        return self.state.is_terminal or (self.state is JobState.UNKNOWN and not self.components)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"state": self.state.value}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


def job_groups(statuses: list[JobStatus]) -> list[list[JobStatus]]:
    """Each job alone and each sweep's points together (at its first point's place), newest first: the rows of
    ``ti-slurm list`` and of the console's job list."""
    groups: dict[str, list[JobStatus]] = {}
    for st in statuses:
        groups.setdefault(st.sweep or st.job_id, []).append(st)
    return list(groups.values())[::-1]


def in_state(group: list[JobStatus], state: str) -> bool:
    """Whether a job (or a sweep: one of its points) is in ``state`` (any case: ``failed``)."""
    return any(str(st.state) == state.upper() for st in group)


def job_status(job: JobInfo, events: list[dict[str, Any]], queued: JobInfo | None) -> JobStatus:
    """Combine the job's events and its queue entry (``None`` when no longer queued).

    Events of another submission (an earlier job with the same id) are ignored.
    A requeued job's events hold every attempt; the components are the latest's.
    """
    status = JobStatus(
        job.ref, job.name, JobState.UNKNOWN, job_dir=job.job_dir, sweep=job.sweep, submitted=job.submitted
    )
    for ev in own_events(events, job.submission):
        kind = ev.get("event")
        if kind == "start":
            _started(status, ev)
        elif kind == "staging":
            status.staging = _staging(ev.get("nodes"))
        elif kind == "step-exit":
            _step_exit(status, ev)
        elif kind == "running":
            _attempt(status, ev).timeline.update(_running(ev))
        elif kind == "straggler":
            status.stragglers.append({k: ev.get(k) for k in ("attempt", "node", "seconds_a_step", "others", "window")})
        elif kind == "notify":
            status.undelivered.append({k: ev.get(k) for k in ("attempt", "notification", "to", "why")})
        elif kind == "end":
            status.staging = {}  # whatever the last report said: no node copies any more
            state = JobState.from_slurm(str(ev.get("state", "")))
            attempt = _attempt(status, ev)
            attempt.ended, attempt.state = _number(ev.get("time")), state.value
            _end_fields(attempt, ev)
            status.failed = _mapping(ev.get("failed"))
            status.state, status.reason = state, attempt.reason
            if not attempt.requeued and len(status.attempts) > 1:
                status.reason += f" (after {len(status.attempts)} attempts)"
    if status.attempts and status.attempts[-1].requeued:  # the latest attempt ended, and the job goes on
        return _requeued_status(status, status.attempts[-1], queued)
    if not status.state.is_terminal:
        if job.state is JobState.CANCELLED and not status.components:  # ti-slurm cancelled it (the registry's)
            status.state, status.reason = JobState.CANCELLED, "cancelled before it started"
        elif queued is not None and queued.reason == NEVER_SATISFIED:  # after: the jobs it needs ended otherwise
            status.state = queued.state
            status.reason = f"never started: the jobs it waited for ended otherwise ({queued.dependency or '?'})"
        elif queued is not None and queued.state.is_terminal:  # Slurm ended it, the job could not record it
            status.state = queued.state
            status.reason = f"the job ended without a final record (Slurm: {queued.state}"
            status.reason += f", {queued.reason})" if queued.reason else ")"
        elif queued is not None:
            if not status.components or queued.state is JobState.SUSPENDED:  # else the job's record is newer
                status.state = queued.state
                status.reason = status.reason or queued.reason
            if not status.components and queued.state is JobState.PENDING:
                status.reason = queued.reason or "waiting for resources"
                status.waits_for = queued.dependency
        elif status.state is JobState.RUNNING:
            status.state = JobState.FAILED
            status.reason = "the job ended without a final record (killed, or its node failed)"
        else:
            status.reason = "not in the queue and no record in the job directory"
    return with_goodput(status)


def with_goodput(status: JobStatus) -> JobStatus:
    """``status`` with where its time went (:mod:`ti_slurm.core.goodput`), once it has started."""
    from ti_slurm.core.goodput import goodput

    if status.attempts:
        status.goodput = goodput(status.submitted, status.attempts, time.time()).as_dict()
    return status


ALLOCATION_STAMPS = ("batch", "supervisor", "launched")  # an allocation's first start event's timeline


def _started(status: JobStatus, ev: dict[str, Any]) -> None:
    """An attempt's start: its components and nodes, the spares that took lost nodes' places, those held idle."""
    status.mode = str(ev.get("mode", ""))
    status.components = [
        ComponentStatus(str(c["name"]), [str(n) for n in c["nodes"]], "RUNNING")
        for c in ev.get("components") or []
        if isinstance(c, dict) and "name" in c and isinstance(c.get("nodes"), list)
    ]
    status.state, status.reason, status.failed = JobState.RUNNING, "", {}
    status.code = _mapping(ev.get("code"))  # the snapshot the job runs, when it has one
    status.staging = {}
    attempt = _attempt(status, ev)
    attempt.started = _number(ev.get("time"))
    attempt.nodes = [n for c in status.components for n in c.nodes]
    attempt.replaced = {str(k): None if v is None else str(v) for k, v in _mapping(ev.get("replaced")).items()}
    attempt.idle = [str(n) for n in ev.get("idle") or [] if isinstance(n, str)]
    stamps = {k: _number(v) for k, v in _mapping(ev.get("timeline")).items() if k in ALLOCATION_STAMPS}
    attempt.timeline = {k: v for k, v in stamps.items() if v} | {"started": attempt.started}


def _running(ev: dict[str, Any]) -> dict[str, Any]:
    """A ``running`` event's part of the attempt's timeline (what is well formed of it)."""
    said: dict[str, Any] = {"all": ev.get("all") is not False}
    for key in ("steps", "commands"):
        pair = ev.get(key)
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, int | float) for x in pair):
            said[key] = [float(x) for x in pair]
    if isinstance(ev.get("last"), str):
        said["last"] = ev["last"]
    return said


def _staging(nodes: object) -> dict[str, list[int]]:
    """A ``staging`` event's report: node -> [bytes done, bytes in all]."""
    return {
        str(k): [int(x) for x in v]
        for k, v in (nodes.items() if isinstance(nodes, dict) else ())
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
    }


def _step_exit(status: JobStatus, ev: dict[str, Any]) -> None:
    """A component's nodes ended: its exit code, its nodes' records, its state."""
    for comp in status.components:
        if comp.name == ev.get("component"):
            code = ev.get("exit_code")
            comp.exit_code = code if isinstance(code, int) else None
            stopped = {"stopped": True} if ev.get("stopped") else {}  # ti-slurm stopped them: no failure
            comp.node_exits.extend(r | stopped for r in ev.get("records") or [] if isinstance(r, dict))
            comp.state = "STOPPED" if ev.get("stopped") else ("COMPLETED" if code == 0 else "FAILED")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _attempt(status: JobStatus, ev: dict[str, Any]) -> AttemptStatus:
    """The attempt an event belongs to (events before attempts were recorded belong to attempt 0)."""
    number = ev.get("attempt")
    number = number if isinstance(number, int) else 0
    if not status.attempts or status.attempts[-1].attempt != number:
        status.attempts.append(AttemptStatus(number))
    return status.attempts[-1]


def _requeued_status(status: JobStatus, last: AttemptStatus, queued: JobInfo | None) -> JobStatus:
    """A job whose latest attempt ended requeued: pending (or starting) again, as the queue says; or
    restarting in place (its next attempt's start not recorded yet), unless Slurm has ended it."""
    why = f"{'restarting in place' if last.in_place else 'requeued'} after {last.state}: {last.reason}"
    if last.in_place and (queued is None or not queued.state.is_terminal):
        status.state, status.reason = JobState.RUNNING, why
    elif queued is None:
        status.state = JobState.UNKNOWN
        status.reason = f"{why}; no longer in the queue"
    elif queued.state.is_terminal:
        status.state = queued.state
        status.reason = f"{why}; then Slurm ended it ({queued.state}{', ' + queued.reason if queued.reason else ''})"
    else:
        status.state = queued.state if queued.state is not JobState.UNKNOWN else JobState.PENDING
        status.reason = why if status.state is not JobState.PENDING else f"{why}; waiting ({queued.reason or 'queued'})"
    return status


NEVER_SATISFIED = "DependencyNeverSatisfied"  # Slurm's reason: an after: that can no longer be met


def recorded_end(job: JobInfo, events: list[dict[str, Any]]) -> bool:
    """Whether the job's own record has its final event (then the queue need not be asked):
    an ``end`` that was not requeued, with no attempt after it."""
    mine = [ev for ev in own_events(events, job.submission) if ev.get("event") in ("start", "end")]
    return bool(mine) and mine[-1].get("event") == "end" and mine[-1].get("requeue") is not True


MIB = 1 << 20


def progress_line(status: JobStatus) -> str:
    """One line on where a job is: its state, why, and each component's state while it runs."""
    line = status.state.value
    if status.reason and not status.state.is_terminal:
        line += f" ({status.reason})"
        if status.waits_for:
            line += f": waits for {status.waits_for}"
        forever = PENDING_FOREVER.get(status.reason) if status.state is JobState.PENDING else None
        if forever:
            line += f": {forever}; it cannot start as the partition stands"
    if status.state is JobState.RUNNING and status.components:
        line += " on " + "; ".join(f"{c.name}: {c.state.lower()}" for c in status.components)
    if status.state is JobState.RUNNING and status.staging:
        done, total = (sum(v[i] for v in status.staging.values()) for i in (0, 1))
        line += f"; staging inputs on {len(status.staging)} node(s): {done / MIB:.0f} of {total / MIB:.0f} MiB"
    return line


def _end_fields(attempt: AttemptStatus, ev: dict[str, Any]) -> None:
    """What an ``end`` event says of its attempt: the cause and its evidence, the reason, whether it went on."""
    attempt.cause, attempt.reason = str(ev.get("cause") or ""), str(ev.get("reason", ""))
    attempt.evidence = _mapping(ev.get("evidence"))
    attempt.progress = _mapping(ev.get("progress"))
    attempt.requeued = ev.get("requeue") is True
    attempt.in_place = attempt.requeued and ev.get("in_place") is True
    lost = ev.get("lost_nodes")
    attempt.lost_nodes = [str(n) for n in lost] if isinstance(lost, list) else []


def cause_line(attempt: AttemptStatus) -> str:
    """An ended attempt's cause in one line: the class, the node, and the evidence with its log and line number
    (``cause: gpu_oom on node02: logs/ddp-1.log:57: torch.OutOfMemoryError: CUDA out of memory...``)."""
    if not attempt.cause or not attempt.ended:
        return ""
    found = attempt.evidence
    if not found:
        return f"cause: {attempt.cause}"
    where = f"{found.get('log')}:{found.get('line')}" if found.get("line") else str(found.get("log") or "")
    said = ": ".join(x for x in (where, str(found.get("text", ""))[:200]) if x)
    line = f"cause: {attempt.cause} on {found.get('node') or '?'}: {said}"
    after = found.get("consequences")
    if isinstance(after, list) and after:
        line += f" (then {', '.join(str(n) for n in after)} failed as a consequence)"
    return line


def _goodput_lines(status: JobStatus) -> list[str]:
    """Where an ended job's time went (a running one's shows in --json and the console as it goes)."""
    from ti_slurm.core.goodput import Goodput

    if not status.goodput or not status.state.is_terminal:
        return []
    return [f"  {Goodput(**{k: v for k, v in status.goodput.items()}).line()}"]


def _cause_lines(status: JobStatus) -> list[str]:
    """The latest attempt's cause, when it ended by one."""
    said = cause_line(status.attempts[-1]) if status.attempts else ""
    return [f"  {said}"] if said else []


def _attempt_lines(attempts: list[AttemptStatus]) -> list[str]:
    """The attempts' table (when the job went on after one), each lost node's fate, and what spares cost."""
    cost = [spare_cost_line(attempts, time.time())] if any(a.idle for a in attempts) else []
    if len(attempts) < 2 and not any(a.requeued for a in attempts):
        return cost
    lines = [f"  {'attempt':<8} {'started':<19} {'ended':<19} {'state':<10} {'cause':<10} reason"]
    for a in attempts:
        end = a.state if a.ended else "RUNNING"
        end += (" -> restarted in place" if a.in_place else " -> requeued") if a.requeued else ""
        row = f"  {a.attempt:<8} {_clock(a.started):<19} {_clock(a.ended):<19} {end:<10} {a.cause or '-':<10}"
        lines.append(f"{row} {a.reason}")
        for lost, spare in a.replaced.items():
            if spare:
                lines.append(f"  {'':<8} spare {spare} took the place of lost node {lost}")
            else:
                lines.append(f"  {'':<8} went on without lost node {lost}, on {len(a.nodes)} nodes")
    return lines + cost


def start_line(submitted: float, timeline: dict[str, Any], ended: float | None) -> str:
    """How an attempt started, for people: the queue wait (an allocation's first attempt), then each step of the
    start after the batch script's (or the attempt's) own: ``queued 3.1 s, supervisor +0.08 s, steps launched
    +0.11 s, node steps +0.30..0.42 s, commands +0.51..0.63 s (last: worker-1)``."""
    zero = timeline.get("batch") or timeline.get("supervisor") or timeline.get("started")
    if not zero or not ("commands" in timeline or any(k in timeline for k in ALLOCATION_STAMPS)):
        return ""  # a record from before ti-slurm kept the timeline
    parts = [f"queued {_seconds(zero - submitted)}"] if submitted and zero >= submitted else []
    for key, what in (("supervisor", "supervisor"), ("launched", "steps launched")):
        if timeline.get(key) and timeline[key] != zero:
            parts.append(f"{what} +{_seconds(timeline[key] - zero)}")
    for key, what in (("steps", "node steps"), ("commands", "commands")):
        if key in timeline:
            first, last = (max(0.0, t - zero) for t in timeline[key])
            if last - first < 0.005:
                parts.append(f"{what} +{_seconds(first)}")
            else:
                both = f"{first:.2f}..{last:.2f} s" if last < 10 else f"{_seconds(first)}..{_seconds(last)}"
                parts.append(f"{what} +{both}")
    if "last" in timeline and "commands" in timeline:
        parts[-1] += f" (last: {timeline['last']})"
    if ended and not timeline.get("all", "commands" in timeline):
        parts.append("ended before every node's command ran")
    elif "commands" not in timeline:
        parts.append("waiting for the nodes' commands")
    return ", ".join(parts)


def _seconds(span: float) -> str:
    span = max(0.0, span)
    if span >= 120:
        return f"{span / 60:.1f} min"
    return f"{span:.2f} s" if span < 10 else f"{span:.1f} s"


def _start_lines(status: JobStatus) -> list[str]:
    """Each attempt's start line (``start:``; with its number when there were several)."""
    lines = []
    for a in status.attempts:
        line = start_line(status.submitted if a is status.attempts[0] else 0.0, a.timeline, a.ended)
        if line:
            lines.append(f"  start{f' (attempt {a.attempt})' if len(status.attempts) > 1 else ''}: {line}")
    return lines


def spare_cost_line(attempts: list[AttemptStatus], now: float) -> str:
    """What holding spare nodes cost: their idle node-hours, against the job's (a running attempt up to ``now``)."""
    idle = held = 0.0
    for a in attempts:
        hours = 0.0 if a.started is None else max(0.0, ((a.ended or now) - a.started) / 3600)
        idle += hours * len(a.idle)
        held += hours * (len(a.nodes) + len(a.idle))
    most = max(len(a.idle) for a in attempts)
    share = f" ({idle / held:.0%} of the job's {held:.2f})" if held else ""
    return f"  spare nodes: up to {most} held idle, {idle:.2f} node-hours{share}"


def format_status(status: JobStatus) -> str:
    """A short table for people."""
    head = f"job {status.job_id}  {status.name}  {status.mode or '-'}  {status.state}"
    if status.reason:
        head += f"  ({status.reason})"
    if status.waits_for:
        head += f"  waits for {status.waits_for}"
    lines = [head, *_cause_lines(status), *_code_lines(status.code), *_start_lines(status), *_goodput_lines(status)]
    lines += _attempt_lines(status.attempts)
    if status.components:
        lines.append(f"  {'component':<10} {'state':<10} {'exit':<5} nodes")
        for comp in status.components:
            code = "" if comp.exit_code is None else str(comp.exit_code)
            lines.append(f"  {comp.name:<10} {comp.state:<10} {code:<5} {compress(comp.nodes) if comp.nodes else '-'}")
            for rec in comp.node_exits:
                if rec.get("exit_code") not in (0, None) and not rec.get("stopped"):
                    lines.append(
                        f"  {'':<10} node {rec.get('node')} (index {rec.get('index')}) exited {rec.get('exit_code')}"
                        f"; its log: ti-slurm logs {status.job_id} --node {node_label(comp.name, rec.get('index'))}"
                    )
    for slow in status.stragglers:
        lines.append(
            f"  straggler: node {slow['node']} took {slow['seconds_a_step']} s a step over {slow['window']} s,"
            f" the other nodes {slow['others']} s (attempt {slow['attempt']})"
        )
    for note in status.undelivered:
        lines.append(f"  notification not delivered: {note['notification']} to {note['to']}: {note['why']}")
    if status.batch_tail:
        lines.append(f"  last {len(status.batch_tail)} lines of {status.batch_output}:")
        lines.extend(f"  | {line}" for line in status.batch_tail)
    return "\n".join(lines)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _code_lines(shot: dict[str, Any]) -> list[str]:
    """The code snapshot's line of ``status``: its hash, git's commit (and uncommitted changes), where it is."""
    if not shot:
        return []
    changes = " with changes" if shot.get("dirty") else ""
    git = f", git {str(shot.get('commit'))[:12]}{changes}" if shot.get("commit") else ""
    return [f"  code: snapshot {str(shot.get('tree'))[:12]}{git} in {shot.get('dir')}"]


def _clock(when: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "-"


def ran_plan(backend: Any, job_dir: str) -> JobPlan:
    """The plan a job ran, read from its directory through ``backend``; a :class:`ValueError` saying why when
    there is none (the directory is not known, or holds none) or another ti-slurm wrote it, a
    :class:`PermissionError` when it is not the caller's own. A plan is what resubmit runs again as the caller:
    only the caller's own plan, in their own private job directory (no link followed), is read."""
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.core.plan import JobPlan

    if not job_dir:
        raise ValueError("its plan is gone (its directory is not known)")
    data, why_not = backend.read_own(JobPaths(job_dir).plan)
    if data is None:
        if "No such file" in why_not:
            raise ValueError(f"its plan is gone (its directory {job_dir} holds none)")
        raise PermissionError(f"it is not a job of yours ({why_not})")
    try:
        return JobPlan.from_json(data.decode(errors="replace"))
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"its plan was written by another ti-slurm ({str(exc)[:200]})") from None
