"""Where a job's time went: its wall time split into queued, starting, productive, lost to failures and
recomputed, and the effective training time (productive over the time since the first start), as Meta and
ByteDance report theirs. Read from the job's own record (pure): each attempt's start, the start timeline (its
commands' start), its end, and the training steps the nodes reported (``TI_SLURM_PROGRESS_FILE``).

- queued: from the submit to the first attempt's start;
- starting: from an attempt's start to its first step (else to its commands' start);
- productive: from there to the attempt's end, or for an attempt that failed (or was interrupted) to its last
  step (without steps reported, nothing of a failed attempt is counted productive);
- lost: from a failed attempt's last step (or its start of work) to its end, and the wait until the next attempt;
- recomputed: the steps an attempt did again after resuming from an earlier checkpoint (its first step at or
  below the last step before), at its own pace: taken out of productive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUCKETS = ("queued", "starting", "productive", "lost", "recomputed")


@dataclass
class Goodput:
    queued: float = 0.0
    starting: float = 0.0
    productive: float = 0.0
    lost: float = 0.0
    recomputed: float = 0.0
    wall: float = 0.0  # from the submit to the end (or now)
    effective: float | None = None  # productive over the time since the first start

    def add(self, other: Goodput) -> Goodput:
        """The sum of two jobs' (a sweep's, a time range's): the effective time over their time since starting."""
        fields = {k: getattr(self, k) + getattr(other, k) for k in (*BUCKETS, "wall")}
        total = Goodput(**fields)
        ran = total.wall - total.queued
        total.effective = round(total.productive / ran, 3) if ran > 0 else None
        return total

    def as_dict(self) -> dict[str, Any]:
        return {k: round(getattr(self, k), 3) for k in (*BUCKETS, "wall")} | {"effective": self.effective}

    def line(self, buckets: tuple[str, ...] = BUCKETS) -> str:
        """``time: 2.0 h wall: queued 3 min, starting 41 s, productive 1.8 h, lost 6 min, recomputed 2 min;
        effective 93%``."""
        parts = ", ".join(f"{k} {span(getattr(self, k))}" for k in buckets)
        effective = f"; effective {self.effective:.0%}" if self.effective is not None else ""
        return f"time: {span(self.wall)} wall: {parts}{effective}"


@dataclass
class AttemptTimes:
    """What :func:`goodput` reads of an attempt (as :class:`~ti_slurm.follow.status.AttemptStatus` has it)."""

    started: float = 0.0
    ended: float | None = None
    state: str = ""
    progress: dict[str, Any] = field(default_factory=dict)
    timeline: dict[str, Any] = field(default_factory=dict)


def attempts_of(events: list[dict[str, Any]]) -> list[AttemptTimes]:
    """Each attempt's times from a job's own events (``start``, ``running``, ``end``): in the job, where its end
    notification says where its time went."""
    found: dict[int, AttemptTimes] = {}
    for ev in events:
        number, kind = ev.get("attempt"), ev.get("event")
        attempt = found.setdefault(number if isinstance(number, int) else 0, AttemptTimes())
        if kind == "start":
            attempt.started = _float(ev.get("time")) or 0.0
        elif kind == "running" and isinstance(ev.get("commands"), list):
            attempt.timeline["commands"] = ev["commands"]
        elif kind == "end":
            attempt.ended, attempt.state = _float(ev.get("time")), str(ev.get("state", ""))
            attempt.progress = ev["progress"] if isinstance(ev.get("progress"), dict) else {}
    return [found[k] for k in sorted(found)]


def span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _float(value: object) -> float | None:
    try:
        return float(str(value)) if value is not None and value != "" else None
    except ValueError:
        return None


def goodput(submitted: float, attempts: list[Any], now: float) -> Goodput:
    """The split of a job's time (``attempts``: its :class:`~ti_slurm.follow.status.AttemptStatus` list, or
    :func:`attempts_of`'s; ``submitted`` 0: not known, counted from the first start)."""
    started = [a for a in attempts if a.started]
    out = Goodput()
    if not started:
        out.queued = out.wall = max(0.0, now - submitted) if submitted else 0.0
        return out
    first = started[0].started
    out.queued = max(0.0, first - submitted) if submitted else 0.0
    end = started[-1].ended or now
    out.wall = end - (submitted or first)
    last_step: float | None = None
    for k, a in enumerate(started):
        work = _work_start(a)
        steps = a.progress or {}
        first_at, last_at = _float(steps.get("first_at")), _float(steps.get("last_at"))
        out.starting += max(0.0, (first_at or work) - a.started)
        ended = a.ended or now
        if a.ended is None or a.state == "COMPLETED":
            out.productive += max(0.0, ended - (first_at or work))
        else:
            done = last_at if last_at is not None and last_at >= (first_at or work) else None
            out.productive += max(0.0, done - (first_at or work)) if done is not None else 0.0
            out.lost += max(0.0, ended - (done if done is not None else first_at or work))
        if k + 1 < len(started):
            out.lost += max(0.0, started[k + 1].started - ended)  # the wait for the next attempt
        out.recomputed += _redone(steps, last_step)
        last = _float(steps.get("last"))
        last_step = last if last is not None else last_step
    out.recomputed = min(out.recomputed, out.productive)
    out.productive -= out.recomputed
    ran = end - first
    out.effective = round(out.productive / ran, 3) if ran > 0 else None
    return out


def _work_start(attempt: Any) -> float:
    """When an attempt's commands started (its last node's), else its start."""
    commands = (attempt.timeline or {}).get("commands")
    if isinstance(commands, list) and len(commands) == 2 and _float(commands[1]) is not None:
        return float(commands[1])
    return float(attempt.started)


def _redone(steps: dict[str, Any], before: float | None) -> float:
    """The time an attempt spent redoing steps up to ``before`` (the last step before it), at its own pace."""
    first, last = _float(steps.get("first")), _float(steps.get("last"))
    first_at, last_at = _float(steps.get("first_at")), _float(steps.get("last_at"))
    if None in (first, last, first_at, last_at, before) or last <= first:  # type: ignore[operator]
        return 0.0
    assert first is not None and last is not None and first_at is not None and last_at is not None
    assert before is not None
    if first > before:
        return 0.0
    pace = (last_at - first_at) / (last - first)
    return max(0.0, (min(before, last) - first + 1) * pace)
