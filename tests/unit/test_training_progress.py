"""A running training's progress and estimated finish, as the console shows it (follow/progress.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ti_slurm.follow.progress import (
    PaceSeen,
    at_the_limit,
    estimate,
    reported,
    tensorboard_progress,
    time_limit_at,
)


def test_a_progress_file_says_its_step_and_maybe_its_total() -> None:
    assert reported("1200\n") == (1200.0, None)
    assert reported("1200 10000\n") == (1200.0, 10000.0)
    assert reported("1200 total?") == (1200.0, None)  # a second word that is no number: no total
    assert reported("") == (None, None) and reported("step") == (None, None)


def test_tensorboard_steps_and_a_total_steps_scalar() -> None:
    scalars = {"train/loss": [(0, 1.0), (40, 0.5)], "lr": [(30, 0.1)], "train/total_steps": [(0, 1000.0)]}
    assert tensorboard_progress(scalars) == (40.0, 1000.0)
    assert tensorboard_progress({"loss": [(3, 1.0)]}) == (3.0, None)
    assert tensorboard_progress({}) == (None, None)


def test_the_pace_is_taken_over_the_steps_seen_and_starts_again_after_a_restart() -> None:
    pace = PaceSeen()
    assert pace.rate() is None
    for k in range(6):
        pace.note(100 + 5 * k, 1000.0 + 2 * k)  # 5 steps every 2 s
        pace.note(100 + 5 * k, 1000.5 + 2 * k)  # the same step seen again: no sample
    assert pace.rate() == 2.5
    pace.note(50, 1020.0)  # back to a checkpoint: its pace is learnt anew
    assert pace.rate() is None


def test_a_finish_past_the_time_limit_is_a_warning_saying_what_restart_will_do() -> None:
    plan = SimpleNamespace(checkpoint_signal="USR2", signal_before=120, restart_max=2, restart_on=("timeout",))
    fits = estimate(1000, 10000, 10.0, now=0.0, deadline=3600.0, at_limit=at_the_limit(plan, 0))
    assert (fits.left, fits.finish_at, fits.warning) == (900.0, 900.0, "")
    late = estimate(1000, 10000, 1.0, now=0.0, deadline=3600.0, at_limit=at_the_limit(plan, 0))
    assert late.left == 9000.0 and late.as_dict()["fraction"] == 0.1
    assert late.warning == (
        "at this pace the training ends 1 h 30 min after the job's time limit (in 1 h 00 min): every node gets"
        " SIGUSR2 120 s before it to save, and the job is requeued to go on (2 requeue(s) left)"
    )
    plain = SimpleNamespace(checkpoint_signal="", signal_before=0, restart_max=0, restart_on=())
    assert "it is cut off there (TIMEOUT)" in estimate(0, 100, 0.01, 0.0, 60.0, at_the_limit(plain, 0)).warning
    assert estimate(5, None, 1.0, 0.0, 60.0, "").left is None  # no total: no finish to estimate


def test_the_time_limit_counts_from_the_allocations_start_across_restarts_in_place() -> None:
    def attempt(started: float, in_place: bool = False, batch: float | None = None) -> SimpleNamespace:
        return SimpleNamespace(started=started, in_place=in_place, timeline={"batch": batch} if batch else {})

    plan = SimpleNamespace(time="1:00:00")
    status = SimpleNamespace(attempts=[attempt(100.0, batch=90.0), attempt(500.0, in_place=True), attempt(900.0)])
    status.attempts[0].in_place = True  # attempt 0 went on in place: attempts 1 and 2 share its allocation
    status.attempts[1].in_place = True
    assert time_limit_at(status, plan) == 90.0 + 3600
    requeued = SimpleNamespace(attempts=[attempt(100.0), attempt(2000.0)])  # a requeue: a new allocation
    assert time_limit_at(requeued, plan) == 2000.0 + 3600
    assert time_limit_at(requeued, SimpleNamespace(time=None)) is None
