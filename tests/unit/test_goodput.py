"""Where a job's time went, from its record: the buckets of a job interrupted once by a lost node and once by a
time limit, resumed each time from a checkpoint, against the timeline that made it."""

from __future__ import annotations

from ti_slurm.core.goodput import Goodput, goodput
from ti_slurm.follow.status import AttemptStatus

T = 1_800_000_000.0  # the submit's time: the timelines below are seconds after it


def shifted(a: AttemptStatus) -> AttemptStatus:
    """``a`` with its times after :data:`T`."""
    a.started = T + a.started if a.started is not None else None
    a.ended = T + a.ended if a.ended is not None else None
    a.timeline = {k: [T + t for t in v] for k, v in a.timeline.items()}
    a.progress = {k: T + v if k.endswith("_at") else v for k, v in a.progress.items()}
    return a


def test_a_job_interrupted_by_a_lost_node_and_a_time_limit() -> None:
    # submitted at 0; attempt 0 starts at 30, its commands at 35, steps 1..100 from 40 to 139 (one a second),
    # a node is lost at 150; requeued, attempt 1 starts at 180, commands at 183, resumes at step 91 (checkpoint
    # at 90) at 190, step 200 at 299, the time limit at 310; attempt 2 starts at 340, commands at 342, resumes
    # at step 201 at 345 and completes at step 300 at 444, ending at 450.
    attempts = [
        AttemptStatus(0, 30.0, 150.0, "NODE_FAIL", cause="node_fail", requeued=True,
                      timeline={"commands": [34.0, 35.0]},
                      progress={"first": "1", "first_at": 40.0, "last": "100", "last_at": 139.0}),
        AttemptStatus(1, 180.0, 310.0, "TIMEOUT", cause="timeout", requeued=True,
                      timeline={"commands": [182.0, 183.0]},
                      progress={"first": "91", "first_at": 190.0, "last": "200", "last_at": 299.0}),
        AttemptStatus(2, 340.0, 450.0, "COMPLETED", timeline={"commands": [341.0, 342.0]},
                      progress={"first": "201", "first_at": 345.0, "last": "300", "last_at": 444.0}),
    ]  # fmt: skip
    spent = goodput(T, [shifted(a) for a in attempts], now=T + 1000.0)
    assert spent.queued == 30.0
    assert spent.starting == (40 - 30) + (190 - 180) + (345 - 340)
    # lost: 139 -> 150 and the wait 150 -> 180; 299 -> 310 and 310 -> 340
    assert spent.lost == (150 - 139) + (180 - 150) + (310 - 299) + (340 - 310)
    # attempt 1 redid steps 91..100 (10 steps at ~1 s each, from its own pace 109 s / 109 steps)
    assert abs(spent.recomputed - 10.0) < 0.01
    productive = (139 - 40) + (299 - 190) + (450 - 345) - 10
    assert abs(spent.productive - productive) < 0.01
    assert spent.wall == 450.0 and spent.effective == round(productive / (450 - 30), 3)
    assert sum(getattr(spent, k) for k in ("queued", "starting", "productive", "lost", "recomputed")) <= spent.wall
    said = "time: 8 min wall: queued 30 s, starting 25 s, productive 5 min, lost 82 s, recomputed 10 s; effective 72%"
    assert spent.line() == said


def test_without_steps_a_failed_attempt_counts_as_lost_and_a_running_one_as_productive() -> None:
    failed = AttemptStatus(0, 10.0, 70.0, "FAILED", cause="unknown", requeued=True, timeline={"commands": [11, 12]})
    running = AttemptStatus(1, 100.0, None, "RUNNING", timeline={"commands": [101.0, 102.0]})
    spent = goodput(T, [shifted(failed), shifted(running)], now=T + 200.0)
    assert (spent.queued, spent.starting, spent.lost, spent.productive) == (10.0, 2.0 + 2.0, 58.0 + 30.0, 98.0)
    assert goodput(T, [], now=T + 60.0).queued == 60.0  # not started yet: all of it queued
    both = spent.add(goodput(T, [shifted(AttemptStatus(0, 0.0, 10.0, "COMPLETED"))], now=T + 10.0))
    assert both.productive == 108.0 and both.wall == 210.0 and isinstance(both, Goodput)
