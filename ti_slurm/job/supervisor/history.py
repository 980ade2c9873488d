"""The job's record across attempts: the earlier attempt closed (its files aside, its end recorded when it
could not write its own), this attempt's end, and the requeue asked of Slurm."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable

from ti_slurm.core.causes import blamed_node
from ti_slurm.core.events import EventLog
from ti_slurm.core.hostlist import expand
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.supervisor import attempts
from ti_slurm.job.supervisor.attempts import Control
from ti_slurm.job.supervisor.judge import Outcome


class AttemptRecord:
    """One attempt's part of the job's record (``attempt``: its number, TI_SLURM_RESTART_COUNT: Slurm's
    restart count, ``requeues``, plus the restarts in place before; set by the supervisor)."""

    def __init__(
        self, plan: JobPlan, paths: JobPaths, log: EventLog, control: Control | None, say: Callable[[str], None]
    ) -> None:
        self.plan, self.paths, self.log, self.control, self.say = plan, paths, log, control, say
        self.attempt = self.requeues = 0
        self.earlier_lost: list[str] = []  # the nodes earlier attempts lost (kept out of the next one)

    def record_end(self, outcome: Outcome) -> None:
        extra: dict[str, object] = {}
        if outcome.cause or outcome.requeue:  # a requeued attempt is not the job's end, whatever its cause
            extra = {"cause": outcome.cause, "requeue": outcome.requeue}
        if outcome.lost_nodes:
            extra["lost_nodes"] = outcome.lost_nodes
        if outcome.evidence:
            extra["evidence"] = outcome.evidence
        if outcome.progress:
            extra["progress"] = outcome.progress
        if outcome.in_place:
            extra["in_place"] = True
        try:
            self.log.append(
                "end", self.attempt, state=outcome.state.value, reason=outcome.reason, failed=outcome.failed, **extra
            )
        except OSError as exc:  # the outcome still reaches the job's output (and the exit code)
            self.say(f"cannot record the job's end in {self.paths.status}: {exc.strerror}")

    def close_earlier_attempt(self) -> dict[str, object] | None:
        """On a requeued job: keep the earlier attempt's logs and records aside, and its end recorded.

        Returns the earlier attempt's end event (written here when it could not write its own: its
        batch node was lost, or Slurm killed it), or None on a first attempt.
        """
        events = self.log.read()
        self.earlier_lost += attempts.lost_earlier(events)
        start = attempts.last_start(events)
        if start is None:
            shutil.rmtree(self.paths.nodes_dir, ignore_errors=True)  # a first attempt starts clean
            return None
        k = start.get("attempt") or 0
        self.set_aside(k)
        recorded = attempts.end_after(events, start)
        if recorded is not None:
            return dict(recorded)
        nodes = attempts.started_nodes(start)
        lost = self.control.unreachable_nodes(nodes) if self.control else []
        end = attempts.unrecorded_end(lost)
        self.log.append("end", k, failed={}, **end)
        self.earlier_lost += lost
        return end

    def set_aside(self, k: int) -> None:
        """Move attempt ``k``'s logs and exit records to ``attempts/<k>/`` (the next attempt starts clean)."""
        aside = self.paths.attempt(k)
        os.makedirs(aside.root, exist_ok=True)
        for here, there in zip(self.paths.per_attempt, aside.per_attempt, strict=True):
            with contextlib.suppress(OSError):
                os.replace(here, there)

    def requeue(self, outcome: Outcome) -> None:
        """Requeue this job (Slurm may have already); a refusal ends the job, with Slurm's reason."""
        assert self.control is not None
        blamed = blamed_node(outcome.cause, outcome.evidence)  # left out of the next attempt, as a lost node is
        exclude = set(self.earlier_lost) | set(outcome.lost_nodes) | ({blamed} if blamed else set())
        own = self.plan.sbatch.get("exclude")  # the user's own sbatch: {exclude: ...} stays excluded
        exclude |= set(expand(own)) if isinstance(own, str) and own else set()
        refusal = self.control.requeue(sorted(exclude), already=outcome.requeued_by_slurm)
        if refusal:
            outcome.requeue, outcome.state = False, JobState.FAILED
            outcome.reason = f"{outcome.reason}; Slurm refused to requeue the job: {refusal}"
            self.record_end(outcome)

    def settle_in_slurm(self, outcome: Outcome) -> None:
        """A requeueable job's final end: Slurm must not run it again. Slurm (25.11, seen) requeues a batch job
        that ends while a preemption's grace flag is set, and keeps that flag through a requeue the
        supervisor asked for during the grace time, so a completed later attempt would run once more."""
        last = self.requeues >= self.plan.restart_max  # the last attempt turned requeue off as it started
        if self.control is not None and self.plan.restart_max and not last and outcome.state is not JobState.CANCELLED:
            self.control.disable_requeue()
