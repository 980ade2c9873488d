"""How far a running training is and when it ends: its step and the total it said (rank 0's
``TI_SLURM_PROGRESS_FILE`` holding ``STEP TOTAL``, else its TensorBoard steps and a ``total_steps`` scalar), its
pace as a follower saw the step advance, the estimated finish, and whether that passes the job's time limit
(then what ``restart:`` will do). Pure but for the clock the caller passes in."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

PACE_WINDOW = 300.0  # seconds of observed steps the pace is taken over (the latest)
SAMPLES_AT_MOST = 512
TOTAL_TAG = "total_steps"  # a TensorBoard scalar whose value is the training's total steps (any prefix: train/...)


@dataclass(frozen=True)
class Progress:
    """Where the training stands: its step, the total (None: not said), its pace (steps a second; None: not yet
    seen to move), the seconds left and when it would end (None: unknown), and the warning when that passes
    the time limit."""

    step: float
    total: float | None = None
    rate: float | None = None
    left: float | None = None
    finish_at: float | None = None
    warning: str = ""

    def as_dict(self) -> dict[str, Any]:
        share = min(1.0, self.step / self.total) if self.total else None
        return {"step": self.step, "total": self.total, "fraction": share, "rate": self.rate, "left": self.left,
                "finish_at": self.finish_at, "warning": self.warning}  # fmt: skip


def reported(text: str) -> tuple[float | None, float | None]:
    """A progress file's step and total (``1200`` or ``1200 10000``: the step, then the total if said)."""
    words = text.split()
    try:
        step = float(words[0]) if words else None
    except ValueError:
        return None, None
    try:
        total = float(words[1]) if len(words) > 1 else None
    except ValueError:
        total = None
    return step, total if total and total > 0 else None


def tensorboard_progress(scalars: dict[str, list[tuple[int, float]]]) -> tuple[float | None, float | None]:
    """The training's step as its TensorBoard scalars say (the latest step of any tag) and the total a
    ``total_steps`` scalar gives."""
    steps = [points[-1][0] for tag, points in scalars.items() if points and not is_total(tag)]
    totals = [points[-1][1] for tag, points in scalars.items() if points and is_total(tag)]
    total = totals[0] if totals and isinstance(totals[0], int | float) and totals[0] > 0 else None
    return (float(max(steps)) if steps else None), total


def is_total(tag: str) -> bool:
    return tag == TOTAL_TAG or tag.endswith("/" + TOTAL_TAG)


class PaceSeen:
    """The steps a follower saw and when: the pace over the latest :data:`PACE_WINDOW` seconds."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=SAMPLES_AT_MOST)

    def note(self, step: float, now: float) -> None:
        if self.samples and step < self.samples[-1][1]:  # a restart went back to its checkpoint: a new run of steps
            self.samples.clear()
        if not self.samples or step != self.samples[-1][1]:
            self.samples.append((now, step))

    def rate(self) -> float | None:
        recent = [s for s in self.samples if s[0] >= self.samples[-1][0] - PACE_WINDOW] if self.samples else []
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return None
        return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])


def estimate(step: float, total: float | None, rate: float | None, now: float, deadline: float | None,
             at_limit: str) -> Progress:  # fmt: skip
    """The finish ``rate`` gives from ``step`` to ``total``; a warning when it passes ``deadline`` (the time
    limit, seconds since the epoch), saying ``at_limit`` (what restart will do then)."""
    if total is None or not rate or rate <= 0 or step >= total:
        return Progress(step, total, rate)
    left = (total - step) / rate
    finish = now + left
    warning = ""
    if deadline is not None and finish > deadline:
        late, limit_in = clock(finish - deadline), clock(deadline - now)
        warning = f"at this pace the training ends {late} after the job's time limit (in {limit_in}): {at_limit}"
    return Progress(step, total, rate, left, finish, warning)


def at_the_limit(plan: Any, requeues: int) -> str:
    """What happens to the job at its time limit, as its plan says."""
    if plan is not None and plan.checkpoint_signal and plan.restart_max > requeues and "timeout" in plan.restart_on:
        left = plan.restart_max - requeues
        return (f"every node gets SIG{plan.checkpoint_signal} {plan.signal_before} s before it to save, and the job"
                f" is requeued to go on ({left} requeue(s) left)")  # fmt: skip
    return "it is cut off there (TIMEOUT): ask for more time (time:), or save and requeue (restart: with signal:)"


def clock(seconds: float) -> str:
    """Seconds as ``2 h 05 min``, ``12 min``, ``40 s``."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds)} s"


def time_limit_at(status: Any, plan: Any) -> float | None:
    """When the job's allocation meets its time limit (seconds since the epoch): its start (the first attempt
    of the latest allocation: restarts in place share it) plus the plan's ``time``; None when not known."""
    from ti_slurm.slurm.text import time_seconds

    if plan is None or not status.attempts:
        return None
    try:
        limit = time_seconds(plan.time)
    except ValueError:
        return None
    first = status.attempts[-1]
    for earlier in reversed(status.attempts[:-1]):
        if not earlier.in_place:
            break
        first = earlier
    start = first.timeline.get("batch") or first.started
    return start + limit if limit and start else None
