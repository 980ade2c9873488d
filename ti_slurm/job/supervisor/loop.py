"""The supervisor's loop: the one part with state. It starts the launches, takes a snapshot of the
records at each exit and asks :mod:`~ti_slurm.job.supervisor.judge`, hears Slurm's signals, records
every event, and ends the attempt (stopping what runs, recording the end, requeueing).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from ti_slurm.core.files import write_atomic
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.beat import ALIVE_EVERY, SWAP_AFTER
from ti_slurm.job.modes import get_mode
from ti_slurm.job.notify import notifying_log
from ti_slurm.job.supervisor import attempts
from ti_slurm.job.supervisor.blame import failure_evidence
from ti_slurm.job.supervisor.history import AttemptRecord
from ti_slurm.job.supervisor.judge import NodeNames, Outcome
from ti_slurm.job.supervisor.launchers import POLL_SECONDS, Launch, Launcher
from ti_slurm.job.supervisor.liveness import Liveness
from ti_slurm.job.supervisor.records import NodeRecords, StagingNotes, StartNotes
from ti_slurm.job.supervisor.signals import HearsSignals
from ti_slurm.job.supervisor.spares import NodeSet, Replacements
from ti_slurm.job.supervisor.steps import Steps
from ti_slurm.job.supervisor.watchdog import AttemptWatch
from ti_slurm.job.watch import read_progress

HEARTBEAT_SECONDS = 60.0  # an "alive" event this often: followers need not ask the controller while it comes
ADDRESSES_UP_TO = 1024  # larger jobs resolve names on each node (one lookup per name per node)
BACKGROUND_SETTLE = 2.0  # seconds a background exit waits for the required nodes' records (Ray's workers)


class Supervisor(HearsSignals):
    """Runs a plan's nodes through a launcher and decides the job's outcome (hearing Slurm's signals:
    :class:`~ti_slurm.job.supervisor.signals.HearsSignals`)."""

    def __init__(
        self,
        plan: JobPlan,
        job_dir: str,
        launcher: Launcher,
        say: Callable[[str], None] | None = None,
        timeline: dict[str, float] | None = None,
    ):
        self.paths, self.launcher, self.control = JobPaths(job_dir), launcher, launcher.control
        self.timeline = timeline or {}  # this allocation's start so far: its first attempt's start event takes it
        self.rule = get_mode(plan.mode).rule
        self.say = say or (lambda text: print(f"ti-slurm: {text}", flush=True))
        self.log, self.notifier = notifying_log(plan, self.paths)  # the job's record, each event to its webhooks
        self.nodes = NodeSet(plan, launcher)  # the allocation's nodes: those the attempt runs on, its spares
        self.plan, self.names = self.nodes.plan, self.nodes.names  # the attempt's: sized to the nodes it runs on
        self.staging = StagingNotes(self.paths.staging, self.event)  # the nodes' staging copies, for --wait
        self.liveness = Liveness(self.paths, self.names, None)
        self._cancel_signal: int | None = None
        self.history = AttemptRecord(plan, self.paths, self.log, self.control, self.say)
        self.requeues = self.history.requeues = launcher.restart_count  # Slurm's requeues (in place ones add)
        self.in_place = attempts.in_place_restarts(self.log.read())  # so far, in every allocation
        self.signal_timer = attempts.signal_timer(self.control, plan, launcher.times_signal)
        self.begin_attempt(self.requeues + self.in_place)

    def begin_attempt(self, attempt: int) -> None:
        """A new attempt's state: its number (for the launcher and the record), its launches and records."""
        self.attempt = self.history.attempt = self.launcher.attempt = attempt
        self.records = NodeRecords(self.paths)
        self.steps = Steps(self.plan, self.rule, self.launcher, self.records, self.names, self.event)
        self._checkpoint_signal: int | None = None
        self.interrupt: Outcome | None = None  # set when the checkpoint signal came: how the attempt will end
        self.deadline = float("inf")  # ... and when its steps are stopped at the latest (time.time())
        self.attempt_started = time.time()
        self.watch: AttemptWatch | None = None  # stragglers, the job's TensorBoard steps (once its steps started)

    def event(self, kind: str, **data: object) -> None:
        self.log.append(kind, self.attempt, **data)

    def goes_on(self, outcome: Outcome) -> bool:
        """Whether a failed attempt restarts in place: ``restart`` allows it, and the job still gets further."""
        events = self.log.read()
        allowed = attempts.restarts_in_place(
            self.plan, outcome, self.in_place, self.nodes.replacements(outcome), attempts.earlier_causes(events)
        )
        return allowed and not attempts.stalled(outcome, attempts.earlier_steps(events))

    # -- one attempt, start to end ---------------------------------------------
    def run(self) -> Outcome:
        os.makedirs(self.paths.root, exist_ok=True)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        if self.plan.checkpoint_signal:
            signal.signal(getattr(signal, f"SIG{self.plan.checkpoint_signal}"), self._on_checkpoint_signal)
        try:  # never leave steps running behind a broken supervisor (a full disk, a bug)
            outcome = attempts.restart_refused(self.plan, self.history.close_earlier_attempt())
            if outcome is None:  # once for this allocation: restarts in place keep its nodes and its requeues
                if self.plan.restart_max and self.requeues >= self.plan.restart_max and self.control:
                    self.control.disable_requeue()  # the last attempt: preemption ends the job now
                if self.launcher.resolves_names:
                    share_addresses(self.paths, NodeNames(self.nodes.allocated))
                outcome = self.run_attempt()
            while self.goes_on(outcome):
                outcome = self.restart_in_place(outcome)
        except Exception as exc:
            outcome = Outcome(JobState.FAILED, f"ti-slurm supervisor error: {type(exc).__name__}: {exc}")
        return settle(self, outcome)

    def run_attempt(self, replaced: Replacements | None = None) -> Outcome:
        self.liveness.listen(self.say)
        self.steps.start()
        components = start_components(self.plan, self.names)
        spares = self.nodes.start_fields(replaced) | launched_timeline(self)
        self.event("start", mode=self.plan.mode, components=components, **spares, **code_record(self.plan))
        self.say(f"started {len(self.steps.launches)} step(s) for {self.plan.mode} job {self.plan.name}")
        self.start_notes = StartNotes(self.paths.nodes_dir, launched_nodes(self.steps.launches), self.event)
        self.watch = AttemptWatch(self.plan, self.paths, self.steps.launches, self.names, self.attempt, self.event,
                                  self.say)  # fmt: skip
        outcome = self.loop()
        self.start_notes.note(now=True)
        outcome.progress = attempt_progress(self.paths, self.steps.launches, self.attempt_started)
        outcome.progress = outcome.progress or self.watch.progress()
        if outcome.state is JobState.FAILED and not outcome.cause:
            snap = self.records.snapshot()
            lost = self.liveness.lost(self.steps.launches, snap, self.control)
            hung = self.liveness.hung(self.steps.launches, snap, self.plan.watchdog_silence)
            unlaunched = {n: why for launch in self.steps.launches for n, why in launch.launch_failures().items()}
            silence, replaceable = self.plan.watchdog_silence, self.nodes.can_replace
            evidence = failure_evidence(self.plan, self.paths, snap.records, self.steps.launches)
            first_hung = min((r for r in snap.records.values() if r.error.startswith("hung")), key=lambda r: r.ended,
                             default=None)  # fmt: skip
            said = first_hung.error if first_hung else ""
            if first_hung is not None:
                self.watch.show_grouped_stacks(snap.records, first_hung)
            hung = sorted(hung, key=lambda name: name != (first_hung.node if first_hung else ""))  # it first
            outcome = attempts.named_cause(outcome, lost, hung, silence, replaceable, unlaunched, evidence, said)
        return outcome

    def restart_in_place(self, outcome: Outcome) -> Outcome:
        """The attempt failed, hung or lost nodes spares replace: stop what runs (the checkpoint signal first),
        record the end, set its files aside, run the commands again here (spares in lost nodes' places)."""
        replaced = self.nodes.replacements(outcome)
        self.steps.stop_for_restart(outcome.lost_nodes)
        attempts.own_reason(outcome, self.paths.failure(self.plan.outputs))
        outcome.requeue = outcome.in_place = True
        self.history.record_end(outcome)
        self.liveness.close()
        self.history.set_aside(self.attempt)
        self.in_place += 1
        self.say(f"{outcome.state} ({outcome.reason}): restart in place {self.in_place}/{self.plan.restart_in_place}")
        if replaced:
            self.names = self.liveness.names = self.nodes.swap(replaced, self.launcher, self.say)
            self.plan = self.nodes.plan
        self.begin_attempt(self.attempt + 1)
        return self.run_attempt(replaced)

    # -- the loop ----------------------------------------------------------------
    def loop(self) -> Outcome:
        alive_at = next_lost_check = time.monotonic()
        while True:
            self.start_notes.note()
            if time.monotonic() - alive_at >= HEARTBEAT_SECONDS:
                alive_at = time.monotonic()
                self.event("alive")
            if self._checkpoint_signal is None and self.signal_timer and self.signal_timer.due():
                self._checkpoint_signal = self.signal_timer.signum
            if self._checkpoint_signal is not None and self.interrupt is None:
                self.begin_interrupt(self._checkpoint_signal)
            outcome = self.heard_signal() if self._cancel_signal is not None else None
            if outcome is None and self.interrupt is not None:  # saving: exits are expected
                outcome = self.interrupt if self.steps.saved() or time.time() >= self.deadline else None
            elif outcome is None:
                outcome = self.steps.judged_exit()
                outcome = outcome and self.cancelled_meanwhile(outcome)
                if outcome is None and time.monotonic() >= next_lost_check:
                    next_lost_check = time.monotonic() + ALIVE_EVERY
                    if not os.path.isdir(self.paths.root):  # its records and logs would go nowhere: settle() says so
                        return Outcome(JobState.FAILED, "its job directory was deleted while it ran")
                    self.staging.note()
                    outcome = self.watch.look(lambda: self.records.snapshot().records) if self.watch else None
                    # under Slurm, srun and Slurm's node state find a lost node and Slurm requeues the job
                    if outcome is None and self.control is None:
                        outcome = self.liveness.frozen_outcome(self.steps.launches, self.records)
                if outcome is None and self.nodes.outlives_a_loss():  # a node gone: the job goes on within seconds
                    outcome = self.liveness.frozen_outcome(self.steps.launches, self.records, SWAP_AFTER)
            if outcome is not None:
                return outcome
            time.sleep(POLL_SECONDS)


def settle(sup: Supervisor, outcome: Outcome) -> Outcome:
    """The end of a supervisor's run: the outcome recorded (with its requeue, or Slurm told), its steps stopped
    (after the record when Slurm cancels or requeues: the record must land first), and said. A job directory
    deleted while the job ran is made again by nothing: its steps are stopped and the end is only said."""
    if not os.path.isdir(sup.paths.root):
        sup.steps.stop_running()
        sup.liveness.close()
        outcome = Outcome(JobState.FAILED, f"its job directory {sup.paths.root} was deleted while it ran")
        sup.say(f"{outcome.state}: {outcome.reason}; its steps were stopped and nothing more is recorded")
        return outcome
    attempts.own_reason(outcome, sup.paths.failure(sup.plan.outputs))
    events = sup.log.read()
    attempts.decide_requeue(sup.plan, outcome, sup.requeues, sup.control is not None, attempts.earlier_causes(events))
    if outcome.requeue and not outcome.requeued_by_slurm and attempts.stalled(outcome, attempts.earlier_steps(events)):
        outcome.requeue = False
    record_first = sup.launcher.record_before_stop_on_cancel and (
        outcome.state is JobState.CANCELLED or outcome.requeued_by_slurm
    )
    if not record_first:
        sup.steps.stop_running()
    sup.history.record_end(outcome)
    if outcome.requeue:
        sup.history.requeue(outcome)
    else:
        sup.history.settle_in_slurm(outcome)
    if record_first:
        sup.steps.stop_running()
    sup.liveness.close()
    sup.say(f"{outcome.state}: {outcome.reason}" + (" (requeued)" if outcome.requeue else ""))
    sup.notifier.close()  # the outcome is recorded: this only bounds how long the last posts may take
    return outcome


def share_addresses(paths: JobPaths, names: NodeNames) -> None:
    """Resolve every node's name once, here, for every node's contract (and the preflight's check)."""
    every = [name for names in names.per_component for name in names]
    if len(every) <= ADDRESSES_UP_TO:
        from ti_slurm.job.contract import resolve_all

        write_atomic(paths.addresses, resolve_all(every))


def launched_timeline(sup: Supervisor) -> dict[str, object]:
    """The allocation's start timeline (the batch script's start, the supervisor's, and now: its steps launched),
    for its first attempt's start event; nothing for the attempts after it."""
    if not sup.timeline:
        return {}
    timeline, sup.timeline = {k: v for k, v in sup.timeline.items() if v} | {"launched": round(time.time(), 3)}, {}
    return {"timeline": timeline}


def launched_nodes(launches: list[Launch]) -> list[str]:
    """The nodes the attempt's launches serve, as their start notes name them."""
    return [node_label(launch.component, n) for launch in launches for n in launch.nodes]


def start_components(plan: JobPlan, names: NodeNames) -> list[dict[str, object]]:
    """The start event's components: each one's name and its nodes."""
    return [{"name": comp.name, "nodes": names.per_component[c]} for c, comp in enumerate(plan.components)]


def code_record(plan: JobPlan) -> dict[str, object]:
    """The start event's record of the code snapshot the job runs, when it has one."""
    if not plan.code_dir:
        return {}
    code = {"dir": plan.code_dir, "tree": plan.code_tree, "commit": plan.code_commit, "dirty": plan.code_dirty}
    return {"code": code}


def attempt_progress(paths: JobPaths, launches: list[Launch], since: float) -> dict[str, object]:
    """The attempt's training steps as its nodes reported them (``TI_SLURM_PROGRESS_FILE``): the earliest first
    step and the latest last one, each with when ({} when none reported)."""
    found = [read_progress(paths.progress(launch.component, n), since) for launch in launches for n in launch.nodes]
    firsts = [f for f in found if "first_at" in f]
    lasts = [f for f in found if "last_at" in f]
    out: dict[str, object] = {}
    if firsts:
        first = min(firsts, key=lambda f: float(str(f["first_at"])))
        out.update(first=first["first"], first_at=first["first_at"])
    if lasts:
        last = max(lasts, key=lambda f: float(str(f["last_at"])))
        out.update(last=last["last"], last_at=last["last_at"])
    return out
