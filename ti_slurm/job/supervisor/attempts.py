"""Attempts of a requeued job, and whether this one goes on in a next: pure decisions over the job's
events and Slurm's view of the job (``scontrol show job``'s fields).

Surviving interruptions (the spec's ``restart``, ``signal`` and ``watchdog``; see
:mod:`ti_slurm.job.restart`): on the checkpoint signal the supervisor passes it to every node's
command, lets the commands save and exit (until just before the time limit or the preemption's end),
then ends the attempt as TIMEOUT or PREEMPTED. An attempt that failed, hung or lost a node ends the
same way. Each such end is recorded with its cause and, when ``restart.on`` lists the cause and
requeues are left, the job is requeued, under the same id, away from the lost nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ti_slurm.core.causes import Evidence, no_progress, restart_allowed, restart_word
from ti_slurm.core.choices import IN_PLACE_CAUSES
from ti_slurm.core.hostlist import compress
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.preflight import PREFLIGHT_EXIT
from ti_slurm.job.restart import CAUSE_STATES, should_requeue
from ti_slurm.job.supervisor.blame import said_line
from ti_slurm.job.supervisor.judge import Outcome
from ti_slurm.slurm.text import clock_time, preempted

REQUEUE_MARGIN = 10.0  # seconds before the time limit (after stopping the steps) the requeue is asked for


class Control(Protocol):
    """What the supervisor asks of Slurm (:class:`ti_slurm.job.restart.SlurmControl`; None: a local run)."""

    def show_job(self) -> dict[str, str]: ...
    def unreachable_nodes(self, names: Sequence[str]) -> list[str]: ...
    def requeue(self, exclude: list[str], already: bool = False) -> str: ...
    def disable_requeue(self) -> None: ...


def lost_earlier(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every node the ends of earlier attempts name as lost."""
    return [str(n) for e in events if e.get("event") == "end" for n in e.get("lost_nodes") or []]


def last_start(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The start of the latest attempt recorded (None: this is the first)."""
    starts = [e for e in events if e.get("event") == "start"]
    return starts[-1] if starts else None


def end_after(events: Sequence[Mapping[str, Any]], start: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The end recorded after ``start`` (None: that attempt could not write its own)."""
    ends = [e for e in events[list(events).index(start) :] if e.get("event") == "end"]
    return ends[-1] if ends else None


def started_nodes(start: Mapping[str, Any]) -> list[str]:
    """The node names an attempt's start event lists."""
    return [str(n) for c in start.get("components") or [] for n in c.get("nodes") or []]


def unrecorded_end(lost: list[str]) -> dict[str, object]:
    """The end of an attempt that wrote none (its batch node was lost, or Slurm killed it)."""
    if lost:
        state, cause, reason = JobState.NODE_FAIL, "node_fail", f"node(s) {','.join(lost)} lost; Slurm requeued the job"
    else:
        state, cause, reason = JobState.FAILED, "", "ended without a final record; Slurm requeued the job"
    return {"state": state.value, "reason": reason, "cause": cause, "requeue": True, "lost_nodes": lost}


def restart_refused(plan: JobPlan, earlier_end: Mapping[str, Any] | None) -> Outcome | None:
    """Slurm requeued the job for a cause ``restart.on`` does not list: end it here, saying so."""
    if earlier_end is None:
        return None
    cause = str(earlier_end.get("cause") or "")
    if not cause or earlier_end.get("requeue") is False or {cause, restart_word(cause)} & set(plan.restart_on):
        return None
    return Outcome(
        CAUSE_STATES.get(cause, JobState.FAILED),
        f"not restarted: the earlier attempt ended by {cause}, which restart.on does not list "
        f"({', '.join(plan.restart_on) or 'nothing'})",
    )


def earlier_causes(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The causes of the attempts recorded so far, oldest first."""
    return [str(e.get("cause") or "") for e in events if e.get("event") == "end"]


def earlier_steps(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The last step each attempt recorded so far reported, oldest first ("" for none)."""
    ends = [e for e in events if e.get("event") == "end"]
    return [str(e["progress"].get("last", "")) if isinstance(e.get("progress"), dict) else "" for e in ends]


def stalled(outcome: Outcome, steps_before: Sequence[str]) -> str:
    """Why the job stops for want of progress (``no progress in 3 attempts``), else ""; said in its reason."""
    why = no_progress([*steps_before, str(outcome.progress.get("last", ""))])
    if why and outcome.cause and why not in outcome.reason:
        outcome.reason += f"; not restarted: {why}"
    return why


def in_place_restarts(events: Sequence[Mapping[str, Any]]) -> int:
    """How often the job's commands were restarted inside an allocation so far (``restart.in_place``)."""
    return sum(1 for e in events if e.get("event") == "end" and e.get("in_place") is True)


def restarts_in_place(
    plan: JobPlan,
    outcome: Outcome,
    used: int,
    replaced: Mapping[str, str | None] | None,
    earlier: Sequence[str] = (),
) -> bool:
    """Whether an attempt that ended so goes on in the same allocation: a failure or a hang that
    ``restart.on`` lists, or a lost node when ``replaced`` says what becomes of each lost node (a spare takes
    its place, or an elastic component goes on without it), with in-place restarts left. A lost node with
    neither, a time limit or a preemption end the allocation's use (those requeue); so does a cancel, which
    has no cause."""
    cause = outcome.cause
    if restart_word(cause) == "node_fail" and not replaced:
        return False
    causes = (*IN_PLACE_CAUSES, "node_fail")
    allowed, _ = restart_allowed(cause, plan.restart_on, earlier)
    return restart_word(cause) in causes and allowed and used < plan.restart_in_place


def decide_requeue(
    plan: JobPlan, outcome: Outcome, requeues: int, can_requeue: bool, earlier: Sequence[str] = ()
) -> None:
    """Whether the attempt goes on in a next one (then its end is recorded as requeued); ``requeues``: how
    often the job was requeued so far (Slurm's restart count); ``earlier``: the causes of the attempts before."""
    if outcome.requeued_by_slurm:
        outcome.requeue = True
        return
    allowed = should_requeue(plan, outcome.cause, requeues, earlier)
    why = restart_allowed(outcome.cause, plan.restart_on, earlier)[1]
    if why:
        outcome.reason += f"; not restarted: {why}"
    if allowed and not can_requeue:
        outcome.reason += "; a local run is not requeued"
    outcome.requeue = allowed and can_requeue


def own_reason(outcome: Outcome, failure_file: str) -> None:
    """A failed job's reason starts with what its command wrote to ``output/failure`` (the TI platform's
    convention for a failure reason), ti-slurm's own after it in brackets."""
    from ti_slurm.core.files import open_regular

    if outcome.state is not JobState.FAILED:
        return
    try:
        with open_regular(failure_file) as fh:
            text = " ".join(fh.read(4096).decode(errors="replace").split())
    except OSError:
        return
    if text:
        outcome.reason = f"{text[:500]} ({outcome.reason})" if outcome.reason else text[:500]


def named_cause(
    outcome: Outcome,
    lost: list[str],
    hung: list[str],
    silence: int,
    replaceable: Callable[[Outcome], bool],
    unlaunched: Mapping[str, str] | None = None,
    evidence: tuple[Evidence | None, list[Evidence]] = (None, []),
    hung_said: str = "",
) -> Outcome:
    """A failed attempt's cause: nodes Slurm could not start a step on (``unlaunched``: node -> Slurm's words)
    or a lost node (both the nodes' failure, not the training's), a hung command, a node whose preflight
    failed that a spare (or a smaller size) can do without (``replaceable``: as a lost node), or a command's
    failure: the cause its logs say (``evidence``: the root and its consequences, :mod:`.blame`), else
    ``unknown``. ``hung_said``: the first hung node's own words (its watchdog's: silent, or no step)."""
    if unlaunched:
        by_reason: dict[str, list[str]] = {}
        for name, why in sorted(unlaunched.items()):
            by_reason.setdefault(why, []).append(name)
        said = "; ".join(f"{compress(names)} ({why})" for why, names in by_reason.items())
        outcome.cause, outcome.lost_nodes = "launch", sorted(set(unlaunched) | set(lost))
        outcome.evidence = {"cause": "launch", "node": sorted(unlaunched)[0], "log": "srun", "line": 0, "text": said}
        outcome.state = JobState.NODE_FAIL
        outcome.reason = f"Slurm could not start the step on node(s) {said}; {outcome.reason}"
        return outcome
    node = outcome.failed.get("node")
    bad = replace(outcome, cause="node_fail", lost_nodes=[str(node)])  # taken out, as a lost node is
    if not lost and outcome.failed.get("exit_code") == PREFLIGHT_EXIT and node and replaceable(bad):
        return bad
    if lost:
        outcome.cause, outcome.lost_nodes = "node_fail", lost
        outcome.state = JobState.NODE_FAIL
        outcome.reason = f"node(s) {','.join(lost)} lost (its step stopped answering); {outcome.reason}"
    elif hung:
        said = hung_said.removeprefix("hung: ") or f"printed nothing for {silence} s"
        outcome.cause = "hang"
        outcome.reason = f"HUNG: node(s) {','.join(hung)} {said}"
        text = f"{said}; its stacks are in its log"
        outcome.evidence = {"cause": "hang", "node": hung[0], "log": "", "line": 0, "text": text}
    elif outcome.failed:
        root, consequences = evidence
        outcome.cause = root.cause if root is not None else "unknown"
        if root is not None:
            outcome.evidence = root.fields() | {"consequences": sorted({e.node for e in consequences} - {root.node})}
            outcome.reason = f"{outcome.reason}; cause: {said_line(root, consequences)}"
    return outcome


def interruption(plan: JobPlan, signal_name: str, job: Mapping[str, str]) -> tuple[Outcome, float]:
    """The checkpoint signal came: how the attempt will end (time limit or preemption), and until when
    (``time.time()``) its commands may save."""
    cause = "preempt" if preempted(job) else "timeout"
    end_time = clock_time(job.get("EndTime", ""))
    if end_time is not None:
        deadline = end_time - plan.stop_grace - REQUEUE_MARGIN
    else:  # the limit is at least signal.before away (Slurm may signal up to a minute early)
        deadline = time.time() + max(plan.signal_before - plan.stop_grace - REQUEUE_MARGIN, 0)
    what = "the job was preempted" if cause == "preempt" else "the time limit is near"
    return Outcome(CAUSE_STATES[cause], f"{what}: every node got {signal_name}", cause=cause), deadline


def requeued_by_slurm(job: Mapping[str, str], requeues: int) -> bool:
    """Whether Slurm's view shows the job restarted more often than the ``requeues`` this run of the batch
    script is (a SIGTERM was its requeue)."""
    restarts = job.get("Restarts", "")
    return restarts.isdigit() and int(restarts) > requeues


def slurm_requeue(job: Mapping[str, str], lost: list[str]) -> Outcome:
    """Slurm requeued the job itself: for a preemption, a lost node, or an administrator's requeue."""
    if preempted(job):
        outcome = Outcome(JobState.PREEMPTED, "the job was preempted; Slurm requeued it", cause="preempt")
    elif lost:
        outcome = Outcome(JobState.NODE_FAIL, f"node(s) {','.join(lost)} lost; Slurm requeued the job")
        outcome.cause, outcome.lost_nodes = "node_fail", lost
    else:
        outcome = Outcome(JobState.FAILED, "requeued by Slurm or an administrator")
    outcome.requeued_by_slurm = True
    return outcome


class SignalTimer:
    """The checkpoint signal timed by the supervisor itself, ``before`` seconds ahead of the job's end, for a job
    Slurm was not asked to signal (Slurm 22.05's slurmrestd cannot say ``--signal=B:...``). The end is Slurm's
    (``EndTime``), read at the start and again once due: a time limit changed meanwhile moves the signal too.
    A preemption still comes as Slurm's SIGTERM (see :meth:`~ti_slurm.job.supervisor.loop.Supervisor.heard_signal`)."""

    def __init__(self, control: Control, before: float, signum: int = 0) -> None:
        self.control, self.before, self.signum = control, before, signum
        self.at = self.when()

    def when(self) -> float | None:
        """When the signal is due (``time.time()``); None when the job has no end (no time limit)."""
        end = clock_time(self.control.show_job().get("EndTime", ""))
        return None if end is None else end - self.before

    def due(self) -> bool:
        """Whether the signal is due now (once: then never again in this run of the batch script)."""
        if self.at is None or time.time() < self.at:
            return False
        self.at = self.when()  # asked again: an extended limit moved the end
        if self.at is not None and time.time() < self.at:
            return False
        self.at = None
        return True


def signal_timer(control: Control | None, plan: JobPlan, times_signal: bool) -> SignalTimer | None:
    """The supervisor's own checkpoint signal: when Slurm was not asked for it (``times_signal``) and there is one."""
    if not (times_signal and control and plan.checkpoint_signal):
        return None
    import signal

    return SignalTimer(control, plan.signal_before, int(getattr(signal, f"SIG{plan.checkpoint_signal}")))
