"""The supervisor's signals: a cancel (SIGTERM, SIGINT, SIGHUP), Slurm's requeue or a preemption behind a
SIGTERM, and the checkpoint signal before a time limit or a preemption's end, passed to every node."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from types import FrameType

from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.restart import SlurmControl
from ti_slurm.job.supervisor import attempts
from ti_slurm.job.supervisor.judge import Outcome
from ti_slurm.job.supervisor.launchers import POLL_SECONDS, Launcher
from ti_slurm.job.supervisor.liveness import Liveness
from ti_slurm.job.supervisor.records import NodeRecords
from ti_slurm.job.supervisor.steps import Steps
from ti_slurm.slurm.text import preempted

CANCEL_SETTLE = 2.0  # seconds a step killed by a signal waits for the supervisor's own cancel signal


class HearsSignals:
    """The :class:`~ti_slurm.job.supervisor.loop.Supervisor`'s part that hears signals and asks Slurm why."""

    plan: JobPlan
    control: SlurmControl | None
    launcher: Launcher
    steps: Steps
    records: NodeRecords
    liveness: Liveness
    requeues: int
    interrupt: Outcome | None
    deadline: float
    _cancel_signal: int | None
    _checkpoint_signal: int | None
    say: Callable[[str], None]
    event: Callable[..., None]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._cancel_signal = signum

    def _on_checkpoint_signal(self, signum: int, frame: FrameType | None) -> None:
        self._checkpoint_signal = signum

    @property
    def may_restart(self) -> bool:
        """Could a SIGTERM be Slurm requeueing the job (rather than a cancel)? Then Slurm is asked."""
        return (self.plan.restart_max > 0 or bool(self.plan.checkpoint_signal)) and self.control is not None

    def begin_interrupt(self, signum: int, job: dict[str, str] | None = None) -> None:
        """The checkpoint signal came: why (time limit or preemption), until when, and pass it to every node.

        ``job`` (Slurm's view, when already asked) with SIGTERM: a preemption on a site that sends SIGTERM
        to every process instead of the job's signal; the nodes have it already, from Slurm.
        """
        if job is None:
            job = self.control.show_job() if self.control else {}
        name = signal.Signals(signum).name
        self.interrupt, self.deadline = attempts.interruption(self.plan, name, job)
        cause = self.interrupt.cause
        self.event("signal", signal=name.removeprefix("SIG"), cause=cause, deadline=round(self.deadline, 3))
        for launch in self.steps.launches:
            if launch.exit_code is None:
                launch.stopping = True  # its exit is the checkpoint's end, not a failure
                if signum != signal.SIGTERM:
                    self.launcher.pass_signal(launch, signum)
        what = "the job was preempted" if cause == "preempt" else "the time limit is near"
        self.say(f"{what}: every node's command got {name}")

    def heard_signal(self) -> Outcome | None:
        """SIGTERM (or SIGINT, SIGHUP): a cancel, or on a job that may restart, Slurm's requeue (preemption, node
        failure), or a preemption sending SIGTERM, not the signal (None: the commands save in the grace time)."""
        if not self.may_restart:
            return cancelled(self._cancel_signal)
        outcome = self.interrupted_by_slurm()
        if outcome is None:
            self._cancel_signal = None
        return outcome

    def interrupted_by_slurm(self) -> Outcome | None:
        job = self.control.show_job() if self.control else {}
        if not attempts.requeued_by_slurm(job, self.requeues):
            if self.interrupt is not None:
                return self.interrupt  # the time limit or the preemption's grace time came first
            if preempted(job):
                self.begin_interrupt(signal.SIGTERM, job)
                return None
            return cancelled(self._cancel_signal)
        if self.interrupt is not None:  # the preemption (or time limit) whose grace time Slurm ended
            self.interrupt.requeued_by_slurm = True
            return self.interrupt
        lost = [] if preempted(job) else self.liveness.lost(self.steps.launches, self.records.snapshot(), self.control)
        return attempts.slurm_requeue(job, lost)

    def cancelled_meanwhile(self, outcome: Outcome) -> Outcome:
        """A node killed by a signal, or a step that ended with no node's record (srun's own exit: killed while
        its node was still starting), may be the first sign of a cancel: ``scancel`` signals every step and the
        batch script at once, in no set order. Give the supervisor's own signal a moment."""
        code = outcome.failed.get("exit_code")
        recorded = outcome.failed.get("index") is not None
        if outcome.state is not JobState.FAILED or (recorded and isinstance(code, int) and code <= 128):
            return outcome
        deadline = time.monotonic() + CANCEL_SETTLE
        while self._cancel_signal is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 2)
        if self._cancel_signal is None:
            # a loaded machine may signal the batch step after the settle: Slurm's own word decides then
            cancelled_now = self.control is not None and slurm_says_cancelled(self.control.show_job())
            return cancelled(signal.SIGTERM) if cancelled_now else outcome
        if self.may_restart:
            return self.interrupted_by_slurm() or self.interrupt or outcome
        return cancelled(self._cancel_signal)


def slurm_says_cancelled(job: Mapping[str, str]) -> bool:
    """Whether ``scontrol show job`` shows the job cancelled. While its batch script (this supervisor) still runs,
    a cancelled job shows COMPLETING, which hides the state under it; a cancel is the one end of Slurm's that
    gives no reason (a time limit says TimeLimit, a lost node NodeDown: slurmctld's ``job_signal``)."""
    state = job.get("JobState", "")
    return state == "CANCELLED" or (state == "COMPLETING" and job.get("Reason", "None") == "None")


def cancelled(signum: int | None) -> Outcome:
    """The job was cancelled: by ``signum`` (SIGTERM when none was heard)."""
    return Outcome(
        JobState.CANCELLED, f"received signal {signal.Signals(signum or signal.SIGTERM).name}", cause="cancelled"
    )
