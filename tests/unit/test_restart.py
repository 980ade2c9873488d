"""Surviving interruptions, through a fake launcher and a fake Slurm: the supervisor's decisions,
the spec's fields, the records of each attempt. The cluster tier shows the same on real Slurm."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from supervisor_fakes import FakeLauncher, events

from tests.factories import job_plan
from ti_slurm.admin.doctor import expedited_requeue_check
from ti_slurm.backends.base import JobInfo
from ti_slurm.core.errors import ConfigError, SpecError
from ti_slurm.core.events import parse_events
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.site import parse_site_config
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import format_status, job_status, recorded_end
from ti_slurm.job.restart import (
    CAUSE_STATES,
    requeue_target,
    should_requeue,
)
from ti_slurm.job.supervisor.loop import Supervisor
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.script import render
from ti_slurm.submitting.spec import parse_spec


class FakeControl:
    """Slurm's side of a requeue, scripted: what ``scontrol show job`` says, and what was asked of it."""

    def __init__(self, job: dict[str, str] | None = None, refuse: str = "", down: tuple[str, ...] = ()) -> None:
        self.job, self.refuse, self.down = job or {}, refuse, down
        self.requeued: list[tuple[list[str], bool]] = []
        self.disabled = 0

    def show_job(self) -> dict[str, str]:
        return self.job

    def unreachable_nodes(self, names: list[str]) -> list[str]:
        return [n for n in names if n in self.down]

    def requeue(self, exclude: list[str], already: bool = False) -> str:
        self.requeued.append((exclude, already))
        return self.refuse

    def disable_requeue(self) -> None:
        self.disabled += 1


def restartable(mode: str = "ddp", nodes: int = 2, **fields: Any) -> JobPlan:
    """A plan that may be requeued twice, on preemption, time limit and node failure."""
    defaults: dict[str, Any] = {"restart_max": 2, "restart_on": ("preempt", "timeout", "node_fail")}
    return job_plan(mode, (mode, nodes), submission="s1", **(defaults | fields))


def supervise(
    plan: JobPlan, tmp_path: Path, script: dict[str, tuple[int | None, int]], control: FakeControl, attempt: int = 0
) -> tuple[Supervisor, FakeLauncher]:
    launcher = FakeLauncher(plan, tmp_path, script, control=control, restart_count=attempt)
    return Supervisor(plan, str(tmp_path), launcher, say=lambda text: None), launcher


# -- the spec --------------------------------------------------------------
def test_restart_defaults_and_the_signal_it_brings() -> None:
    spec = parse_spec({"mode": "ddp", "command": "x", "nodes": 2, "restart": {"max": 3}, "time": "10"})
    plan = make_plan(spec)
    assert (plan.restart_max, plan.restart_on) == (3, ("preempt", "timeout", "node_fail"))
    assert (plan.checkpoint_signal, plan.signal_before) == ("USR2", 120)
    script = render(plan)
    assert '#SBATCH --signal="B:USR2@120"' in script and "#SBATCH --requeue\n" in script
    assert '#SBATCH --open-mode="append"' in script


def test_a_site_that_allows_expedited_requeue_asks_slurm_for_it_on_jobs_with_restarts() -> None:
    site = parse_site_config({"expedited_requeue": True})
    roles: dict[str, Any] = {"mode": "ps-worker", "command": "x", "ps": {"nodes": 1}, "worker": {"nodes": 2}}
    assert "--requeue" not in render(make_plan(parse_spec(roles), site))  # no restarts: nothing to requeue
    restarting = parse_spec(roles | {"restart": {"max": 2}})
    assert render(make_plan(restarting, site)).count('#SBATCH --requeue="expedite"\n') == 2  # each component
    assert "--requeue=expedite" not in render(make_plan(restarting))  # the site's choice, off by default
    with pytest.raises(ConfigError) as err:
        parse_site_config({"expedited_requeue": "yes"})
    assert str(err.value) == "site config: expedited_requeue: 'yes': expected true or false"


@pytest.mark.parametrize(
    ("asked", "parameters", "ok", "words"),
    [
        (True, "preempt_send_user_signal,enable_expedited_requeue", True, "on: a requeued job may start again at once"),
        (True, "preempt_send_user_signal", False, "no SlurmctldParameters=enable_expedited_requeue"),
        (False, "enable_expedited_requeue", True, "allowed by slurm.conf"),
        (False, "", True, "off: a requeued job waits the requeue delay"),
    ],
)
def test_doctor_says_whether_requeues_are_expedited(asked: bool, parameters: str, ok: bool, words: str) -> None:
    check = expedited_requeue_check(asked, parameters)
    assert (check.ok, words in check.detail) == (ok, True), check


def test_without_restart_or_signal_nothing_changes() -> None:
    plan = make_plan(parse_spec({"mode": "ddp", "command": "x", "nodes": 2}))
    assert (plan.restart_max, plan.checkpoint_signal, plan.watchdog_silence) == (0, "", 0)
    assert "--signal" not in render(plan) and "--requeue" not in render(plan)


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"signal": {"name": "TERM"}}, "signal.name", "expected one of USR1, USR2"),
        ({"signal": {"before": 600}, "time": "5"}, "signal.before", "not less than the time limit (5 = 300 s)"),
        ({"restart": {"on": ["reboot"]}}, "restart.on.0", "expected one of: preempt, timeout, node_fail"),
        ({"restart": {"max": -1}}, "restart.max", "greater than or equal to 0"),
        ({"watchdog": {"silence": 1}}, "watchdog.silence", "greater than or equal to 10"),
    ],
)
def test_bad_restart_fields_name_the_field(extra: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"mode": "ddp", "command": "x", "nodes": 2} | extra)
    assert err.value.field == field and words in str(err.value)


def test_signal_names_are_accepted_with_or_without_sig() -> None:
    spec = parse_spec({"mode": "ddp", "command": "x", "nodes": 1, "signal": {"name": "sigusr1", "before": 30}})
    assert make_plan(spec).checkpoint_signal == "USR1"


# -- Slurm's words ------------------------------------------------------------
def test_requeue_names_one_task_of_an_array_not_the_whole_array() -> None:
    assert requeue_target({"SLURM_JOB_ID": "105", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "5"}) == "100_5"
    assert requeue_target({"SLURM_JOB_ID": "105"}) == "105"


def test_requeue_needs_a_listed_cause_and_requeues_left() -> None:
    plan = restartable(restart_max=1, restart_on=("timeout", "failure"))
    assert should_requeue(plan, "timeout", 0) and should_requeue(plan, "failure", 0)
    assert not should_requeue(plan, "timeout", 1)  # used up
    assert not should_requeue(plan, "preempt", 0) and not should_requeue(plan, "", 0)


# -- the supervisor -------------------------------------------------------------
def test_the_checkpoint_signal_reaches_every_node_then_the_job_is_requeued(tmp_path: Path) -> None:
    plan = restartable(checkpoint_signal="USR2", signal_before=60)
    control = FakeControl({"Restarts": "0", "PreemptTime": "None", "EndTime": "Unknown"})
    supervisor, launcher = supervise(plan, tmp_path, {"ddp-0": (0, 30), "ddp-1": (0, 30)}, control)
    supervisor._checkpoint_signal = signal.SIGUSR2  # as Slurm's --signal=B:USR2 sets it
    outcome = supervisor.run()
    assert sorted(launcher.signalled) == [("ddp-0", signal.SIGUSR2), ("ddp-1", signal.SIGUSR2)]
    assert (outcome.state, outcome.cause, outcome.requeue) == (JobState.TIMEOUT, "timeout", True)
    assert control.requeued == [([], False)]
    end = events(tmp_path)[-1]
    assert (end["event"], end["state"], end["requeue"], end["attempt"]) == ("end", "TIMEOUT", True, 0)
    assert [e["event"] for e in events(tmp_path)][:2] == ["start", "signal"]


def test_a_failure_is_requeued_once_then_fails_naming_both_attempts(tmp_path: Path) -> None:
    plan = restartable(restart_max=1, restart_on=("failure",))
    control = FakeControl()
    supervisor, _ = supervise(plan, tmp_path, {"ddp-1": (3, 1)}, control)
    first = supervisor.run()
    assert (first.state, first.cause, first.requeue) == (JobState.FAILED, "unknown", True)  # it said nothing
    (Path(JobPaths(str(tmp_path)).logs_dir)).mkdir()
    (Path(JobPaths(str(tmp_path)).logs_dir) / "ddp-1.log").write_text("first attempt\n")
    supervisor, _ = supervise(plan, tmp_path, {"ddp-1": (3, 1)}, control, attempt=1)
    second = supervisor.run()
    assert (second.state, second.requeue) == (JobState.FAILED, False)
    assert control.disabled == 1 and len(control.requeued) == 1  # the last attempt: no more requeues
    # the first attempt's log and records are kept aside; the history names both attempts
    assert (tmp_path / "attempts" / "0" / "logs" / "ddp-1.log").read_text() == "first attempt\n"
    assert (tmp_path / "attempts" / "0" / "nodes" / "ddp.1.json").is_file()
    info = JobInfo("9", "t", "slurm", str(tmp_path), submission="s1")
    evs = parse_events(Path(JobPaths(str(tmp_path)).status).read_text())
    status = job_status(info, evs, None)
    assert recorded_end(info, evs)
    assert [(a.attempt, a.state, a.requeued) for a in status.attempts] == [(0, "FAILED", True), (1, "FAILED", False)]
    assert status.state is JobState.FAILED and status.reason.endswith("exited 3 (after 2 attempts)")
    assert "FAILED -> requeued" in format_status(status)


def test_a_final_end_before_the_last_attempt_stops_slurm_requeueing_the_job(tmp_path: Path) -> None:
    """Slurm (25.11) requeues a job that ends while a preemption's grace flag is set, a flag that outlives the
    supervisor's own requeue (seen on 25.11: a completed second attempt ran a third time)."""
    plan = restartable(restart_max=2)
    control = FakeControl({"Restarts": "1", "PreemptTime": "None"})
    outcome = supervise(plan, tmp_path, {"ddp-0": (0, 0), "ddp-1": (0, 0)}, control, attempt=1)[0].run()
    assert (outcome.state, outcome.requeue) == (JobState.COMPLETED, False)
    assert control.disabled == 1 and control.requeued == []
    requeued = FakeControl()
    supervise(restartable(restart_on=("failure",)), tmp_path / "r", {"ddp-0": (1, 0)}, requeued)[0].run()
    assert requeued.disabled == 0 and len(requeued.requeued) == 1  # goes on: Slurm's requeue is wanted


def test_a_requeued_attempt_is_not_the_end_while_the_job_waits_again(tmp_path: Path) -> None:
    plan = restartable(restart_on=("failure",))
    supervise(plan, tmp_path, {"ddp-0": (1, 0)}, FakeControl())[0].run()
    info = JobInfo("9", "t", "slurm", str(tmp_path), submission="s1")
    evs = parse_events(Path(JobPaths(str(tmp_path)).status).read_text())
    assert not recorded_end(info, evs)
    status = job_status(info, evs, JobInfo("9", state=JobState.PENDING, reason="BeginTime"))
    assert status.state is JobState.PENDING and not status.settled
    assert status.reason.startswith("requeued after FAILED: ddp node ddp-host0 (index 0) exited 1")


def test_slurm_refusing_the_requeue_ends_the_job_with_its_reason(tmp_path: Path) -> None:
    plan = restartable(restart_on=("failure",))
    control = FakeControl(refuse="Requested operation is presently disabled")
    outcome = supervise(plan, tmp_path, {"ddp-0": (1, 0)}, control)[0].run()
    assert outcome.state is JobState.FAILED and not outcome.requeue
    assert outcome.reason.endswith("Slurm refused to requeue the job: Requested operation is presently disabled")
    assert events(tmp_path)[-1]["requeue"] is False


def test_sigterm_after_slurm_requeued_a_preempted_job_is_not_a_cancel(tmp_path: Path) -> None:
    plan = restartable()
    control = FakeControl({"Restarts": "1", "PreemptTime": "2026-11-30T08:00:00"})
    supervisor, _ = supervise(plan, tmp_path, {"ddp-0": (None, 0), "ddp-1": (None, 0)}, control)
    supervisor._cancel_signal = signal.SIGTERM
    outcome = supervisor.run()
    assert (outcome.state, outcome.requeue, outcome.requeued_by_slurm) == (JobState.PREEMPTED, True, True)
    assert control.requeued == [([], True)]  # Slurm already requeued it: nothing to ask


def test_sigterm_at_preemption_gives_the_grace_time_to_save_then_requeues(tmp_path: Path) -> None:
    """Sites without preempt_send_user_signal: Slurm sends SIGTERM to every process at preemption."""
    control = FakeControl({"Restarts": "0", "PreemptTime": "2026-11-30T08:00:00", "EndTime": "Unknown"})
    plan = restartable(checkpoint_signal="USR2", signal_before=120)
    supervisor, launcher = supervise(plan, tmp_path, {"ddp-0": (0, 20), "ddp-1": (0, 20)}, control)
    supervisor._cancel_signal = signal.SIGTERM
    outcome = supervisor.run()
    assert (outcome.state, outcome.cause, outcome.requeue) == (JobState.PREEMPTED, "preempt", True)
    assert launcher.signalled == [] and launcher.stopped == []  # Slurm signalled the nodes; they saved and exited
    assert control.requeued == [([], False)]
    assert [e["event"] for e in events(tmp_path)][:2] == ["start", "signal"]


def test_slurm_ending_a_preemptions_grace_time_requeues_as_that_preemption(tmp_path: Path) -> None:
    """The commands did not finish saving in the grace time: Slurm requeued the job (Restarts grew, and
    PreemptTime is reset by then): still the preemption, and recorded as requeued."""
    plan = restartable(checkpoint_signal="USR2", signal_before=120)
    control = FakeControl({"Restarts": "0", "PreemptTime": "2026-11-30T08:00:00", "EndTime": "Unknown"})
    supervisor, _ = supervise(plan, tmp_path, {"ddp-0": (None, 0), "ddp-1": (None, 0)}, control)
    supervisor._checkpoint_signal = signal.SIGUSR2
    original = supervisor.begin_interrupt

    def then_slurm_requeues(signum: int, job: dict[str, str] | None = None) -> None:
        original(signum, job)
        control.job = {"Restarts": "1", "PreemptTime": "None"}
        supervisor._cancel_signal = signal.SIGTERM

    supervisor.begin_interrupt = then_slurm_requeues  # type: ignore[method-assign]
    outcome = supervisor.run()
    assert (outcome.state, outcome.cause, outcome.requeued_by_slurm) == (JobState.PREEMPTED, "preempt", True)
    end = events(tmp_path)[-1]
    assert (end["state"], end["requeue"]) == ("PREEMPTED", True)


def test_sigterm_without_a_requeue_is_a_cancel(tmp_path: Path) -> None:
    control = FakeControl({"Restarts": "0", "PreemptTime": "None"})
    supervisor, _ = supervise(restartable(), tmp_path, {"ddp-0": (None, 0)}, control)
    supervisor._cancel_signal = signal.SIGTERM
    outcome = supervisor.run()
    assert (outcome.state, outcome.requeue, control.requeued) == (JobState.CANCELLED, False, [])


def test_a_lost_node_is_named_and_excluded_from_the_next_attempt(tmp_path: Path) -> None:
    plan = restartable()
    control = FakeControl(down=("ddp-host1",))
    # node 1 leaves no exit record (its node died); node 0's rank fails when its peer vanishes
    supervisor, _ = supervise(plan, tmp_path, {"ddp-0": (1, 0), "ddp-1": (None, 0)}, control)
    outcome = supervisor.run()
    assert (outcome.state, outcome.cause, outcome.lost_nodes) == (JobState.NODE_FAIL, "node_fail", ["ddp-host1"])
    assert outcome.reason.startswith("node(s) ddp-host1 lost")
    assert control.requeued == [(["ddp-host1"], False)]


def test_slurm_requeueing_for_a_cause_restart_on_does_not_list_ends_the_job(tmp_path: Path) -> None:
    plan = restartable(restart_on=("failure",))
    status = Path(JobPaths(str(tmp_path)).status)
    earlier = [
        {"event": "start", "submission": "s1", "attempt": 0, "components": [{"name": "ddp", "nodes": ["a", "b"]}]},
        {"event": "end", "submission": "s1", "attempt": 0, "state": "PREEMPTED", "cause": "preempt", "requeue": True},
    ]
    status.write_text("".join(json.dumps(e) + "\n" for e in earlier))
    supervisor, launcher = supervise(plan, tmp_path, {}, FakeControl(), attempt=1)
    outcome = supervisor.run()
    assert outcome.state is JobState.PREEMPTED and "restart.on does not list" in outcome.reason
    assert launcher.stopped == [] and [e["event"] for e in events(tmp_path)][-1] == "end"


def stalled_liveness_files(tmp_path: Path, nodes: range) -> None:
    """The nodes' liveness files as a stalled shared filesystem leaves them: last written a minute ago."""
    from ti_slurm.job.watch import step_alive_file

    paths = JobPaths(str(tmp_path))
    Path(paths.heartbeat("ddp", 0)).parent.mkdir(parents=True, exist_ok=True)
    for i in nodes:
        alive = Path(step_alive_file(paths, "ddp", i))
        alive.write_text("")
        os.utime(alive, (time.time() - 60, time.time() - 60))


@pytest.mark.parametrize("beats", [True, False], ids=["their steps beat: not lost", "silent everywhere: lost"])
def test_nodes_whose_files_are_late_are_lost_only_if_their_beats_stopped_too(tmp_path: Path, beats: bool) -> None:
    from ti_slurm.job.beat import start_beating

    # node 0's command fails after ~2 s; nodes 1 and 2 leave no exit record (srun kills them then), and their
    # liveness files are a minute old, as when the shared filesystem stalls under checkpoint load
    plan = restartable(nodes=3)
    stalled_liveness_files(tmp_path, range(1, 3))
    supervisor, _ = supervise(plan, tmp_path, {"ddp-0": (1, 20), "ddp-1": (None, 0), "ddp-2": (None, 0)}, FakeControl())

    def nodes_beat() -> None:  # what each node's step does, over loopback
        beat = Path(JobPaths(str(tmp_path)).beat)
        while not beat.exists():
            time.sleep(0.01)
        for i in (1, 2):
            start_beating(str(beat), "127.0.0.1", "ddp", i)

    if beats:
        threading.Thread(target=nodes_beat, daemon=True).start()
    outcome = supervisor.run()
    if beats:
        assert (outcome.state, outcome.cause, outcome.lost_nodes) == (JobState.FAILED, "unknown", [])
        assert outcome.reason == "ddp node ddp-host0 (index 0) exited 1"
    else:
        assert (outcome.state, outcome.lost_nodes) == (JobState.NODE_FAIL, ["ddp-host1", "ddp-host2"])


def test_the_beat_listener_takes_only_its_own_datagrams() -> None:
    from ti_slurm.job.beat import BeatListener

    listener = BeatListener()
    token = listener.beat_file_text.split()[1]
    now = time.time()
    listener.note(f"{token} worker 3 {now - 5:.3f}".encode())
    listener.note(f"{token} worker 3 {now - 9:.3f}".encode())  # an older one, arriving late
    listener.note(f"wrong-token worker 4 {now:.3f}".encode())  # another attempt's node, or anyone
    listener.note(f"{token} worker x {now:.3f}".encode())
    listener.note(f"{token} worker 5 {now + 3600:.3f}".encode())  # a clock ahead: no later than now
    listener.note(b"\xff\xfe garbage")
    assert listener.last("worker", 3) == pytest.approx(now - 5, abs=0.01)
    assert listener.last("worker", 4) == 0.0 and listener.last("worker", 5) <= time.time()
    listener.close()


@pytest.mark.parametrize(
    "message,state,refused",
    [
        ("Job is pending execution", "COMPLETING", ""),  # Slurm requeued it a moment before (a node it found down)
        ("Requested operation is presently disabled", "PENDING", ""),
        ("Requested operation is presently disabled", "RUNNING", "Requested operation is presently disabled"),
    ],
    ids=["pending execution", "pending by now", "refused"],
)
def test_a_requeue_slurm_already_made_is_no_refusal(message: str, state: str, refused: str) -> None:
    from ti_slurm.job.restart import SlurmControl

    class Scripted(SlurmControl):  # scontrol requeue refuses; show job says what Slurm did meanwhile
        def run(self, args: list[str]) -> tuple[int, str]:
            if args[:2] == ["scontrol", "requeue"]:
                return 1, message
            if args[:3] == ["scontrol", "-o", "show"]:
                return 0, f"JobId=7 JobName=x JobState={state} Restarts=1"
            return 0, ""

    control = Scripted({"SLURM_JOB_ID": "7"})
    assert control.requeue(["node02"]) == refused


def test_a_requeue_command_killed_by_the_requeue_itself_is_no_refusal() -> None:
    """``scontrol requeue`` ends this batch step, so Slurm's SIGTERM may kill the command (and the next query)
    before the job shows as requeued: asked again, Slurm says it is (seen in CI: the job was followed as
    FAILED while its next attempt was about to run)."""
    from ti_slurm.job.restart import SlurmControl

    class Scripted(SlurmControl):
        answers = iter([(-15, ""), (0, "JobId=7 JobState=RUNNING"), (0, "JobId=7 JobState=PENDING Restarts=1")])

        def run(self, args: list[str]) -> tuple[int, str]:
            if args[:2] == ["scontrol", "requeue"]:
                return -15, ""
            if args[:3] == ["scontrol", "-o", "show"]:
                return next(self.answers)
            return 0, ""

    assert Scripted({"SLURM_JOB_ID": "7"}).requeue([]) == ""


def test_a_requeue_killed_by_its_own_sigterm_excludes_the_blamed_node_before_it_waits() -> None:
    """The requeue's SIGTERM leaves this step KillWait seconds (5 on the test cluster) before SIGKILL: the
    exclusion goes first, before the wait for Slurm to show the job requeued (seen on CI: the wait took the
    whole KillWait and the next attempt ran on the GPU that fell off the bus)."""
    from ti_slurm.job.restart import SlurmControl

    class Scripted(SlurmControl):
        asked: list[list[str]] = []  # noqa: RUF012 (one instance)

        def run(self, args: list[str]) -> tuple[int, str]:
            self.asked.append(args[:2] + args[3:4])
            if args[:2] == ["scontrol", "requeue"]:
                return -15, ""
            if args[:3] == ["scontrol", "-o", "show"]:
                return 0, "JobId=7 JobState=PENDING Restarts=1"
            return 0, ""

    control = Scripted({"SLURM_JOB_ID": "7"})
    assert control.requeue(["node02"]) == ""
    assert control.asked[:3] == [["scontrol", "requeue"], ["scontrol", "update", "ExcNodeList=node02"],
                                 ["scontrol", "-o", "job"]]  # fmt: skip (the exclusion, then the query)


def test_every_restart_cause_has_the_state_its_attempt_ends_in() -> None:
    from ti_slurm.core.choices import RESTART_CAUSES

    assert tuple(CAUSE_STATES) == RESTART_CAUSES


def test_the_supervisors_own_checkpoint_signal_comes_before_the_end_and_follows_a_longer_limit() -> None:
    """Where Slurm cannot be asked for the signal (22.05's slurmrestd), the supervisor times it from EndTime,
    asked again once due: a limit extended meanwhile moves it; a job without an end gets none."""
    from ti_slurm.job.supervisor.attempts import SignalTimer

    def at(seconds: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + seconds))

    class Control:
        end = at(100)
        asked = 0

        def show_job(self) -> dict[str, str]:
            self.asked += 1
            return {"EndTime": self.end}

    control = Control()
    timer = SignalTimer(control, before=120)  # due 20 s ago
    control.end = at(300)  # ... but the limit was extended: due in 3 minutes
    assert not timer.due() and control.asked == 2
    assert not timer.due() and control.asked == 2  # not asked again before then
    timer = SignalTimer(control, before=400)
    assert timer.due() and not timer.due()  # once
    control.end = "Unknown"  # no time limit
    assert SignalTimer(control, before=120).at is None
