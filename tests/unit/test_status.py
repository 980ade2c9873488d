"""A job's status from its event list and its queue entry (pure), and job states."""

from __future__ import annotations

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.events import parse_events
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import format_status, job_status, progress_line

JOB = JobInfo("12", "demo", "slurm", "/jobs/12", submission="s1")
START = {"event": "start", "submission": "s1", "mode": "ps-worker", "components": [
    {"name": "ps", "nodes": ["n1"]}, {"name": "worker", "nodes": ["n2", "n3"]}]}  # fmt: skip
WORKER_FAILED = {"event": "step-exit", "submission": "s1", "component": "worker", "exit_code": 3, "stopped": False,
                 "records": [{"index": 1, "node": "n3", "exit_code": 3}]}  # fmt: skip
END_FAILED = {"event": "end", "submission": "s1", "state": "FAILED", "reason": "worker node n3 (index 1) exited 3",
              "failed": {"component": "worker", "node": "n3", "index": 1, "exit_code": 3}}  # fmt: skip


def queued(state: str, reason: str = "") -> JobInfo:
    return JobInfo("12", state=JobState.from_slurm(state), reason=reason)


def test_pending_in_the_queue_and_no_record_yet() -> None:
    status = job_status(JOB, [], queued("PENDING", "Resources"))
    assert (status.state, status.reason, status.settled) == (JobState.PENDING, "Resources", False)


def test_running_shows_each_component() -> None:
    status = job_status(JOB, [START], queued("RUNNING"))
    assert status.state is JobState.RUNNING and [c.nodes for c in status.components] == [["n1"], ["n2", "n3"]]
    assert progress_line(status) == "RUNNING on ps: running; worker: running"


def test_the_end_record_decides_and_names_the_failed_node() -> None:
    status = job_status(JOB, [START, WORKER_FAILED, END_FAILED], None)
    assert status.state is JobState.FAILED and status.settled
    assert status.failed["node"] == "n3" and status.components[1].state == "FAILED"
    assert "node n3 (index 1) exited 3; its log: ti-slurm logs 12 --node worker-1" in format_status(status)
    assert status.as_dict()["state"] == "FAILED"


def test_a_job_that_left_the_queue_without_an_end_record_failed() -> None:
    status = job_status(JOB, [START], None)
    assert status.state is JobState.FAILED and "without a final record" in status.reason


def test_events_of_an_earlier_job_with_the_same_id_are_ignored() -> None:
    old = [{**START, "submission": "old"}, {**END_FAILED, "submission": "old"}]
    assert job_status(JOB, old, queued("PENDING")).state is JobState.PENDING


def test_unknown_when_neither_queued_nor_recorded() -> None:
    status = job_status(JOB, [], None)
    assert status.state is JobState.UNKNOWN and status.settled


def test_broken_lines_are_skipped() -> None:
    text = '{"event": "start"\n[1, 2]\n"text"\n{"event": "end", "state": "COMPLETED"}\n'
    assert parse_events(text) == [{"event": "end", "state": "COMPLETED"}]


@pytest.mark.parametrize(
    "text,state,terminal",
    [
        ("PENDING", JobState.PENDING, False),
        ("RUNNING", JobState.RUNNING, False),
        ("COMPLETING", JobState.RUNNING, False),
        ("COMPLETED", JobState.COMPLETED, True),
        ("CANCELLED by 0", JobState.CANCELLED, True),
        ("TIMEOUT", JobState.TIMEOUT, True),
        ("NODE_FAIL", JobState.NODE_FAIL, True),
        ("BOOT_FAIL", JobState.NODE_FAIL, True),
        ("REQUEUE_HOLD", JobState.PENDING, False),
        ("SOMETHING_NEW", JobState.UNKNOWN, False),
    ],
)
def test_slurm_states(text: str, state: JobState, terminal: bool) -> None:
    assert JobState.from_slurm(text) is state and state.is_terminal is terminal


def test_a_restart_in_place_is_running_and_shows_as_an_attempt() -> None:
    start = {"event": "start", "submission": "s1", "attempt": 0, "time": 1.0, "mode": "ddp",
             "components": [{"name": "ddp", "nodes": ["n1", "n2"]}]}  # fmt: skip
    end = {"event": "end", "submission": "s1", "attempt": 0, "time": 2.0, "state": "FAILED",
           "reason": "ddp node n2 (index 1) exited 3", "cause": "failure",
           "requeue": True, "in_place": True}  # fmt: skip
    between = job_status(JOB, [start, end], queued("RUNNING"))
    assert between.state is JobState.RUNNING and not between.settled
    assert between.reason == "restarting in place after FAILED: ddp node n2 (index 1) exited 3"
    status = job_status(JOB, [start, end, {**start, "attempt": 1}], queued("RUNNING"))
    assert status.state is JobState.RUNNING
    assert [(a.attempt, a.in_place) for a in status.attempts] == [(0, True), (1, False)]
    row = next(line for line in format_status(status).splitlines() if "FAILED -> restarted in place" in line)
    assert row.split()[-8:] == ["failure", "ddp", "node", "n2", "(index", "1)", "exited", "3"]


def test_spare_nodes_held_idle_show_what_they_cost() -> None:
    """3 nodes and a spare for an hour, the spare then takes a lost node's place for half an hour more."""
    start = {"event": "start", "submission": "s1", "attempt": 0, "time": 0.0, "mode": "ddp",
             "components": [{"name": "ddp", "nodes": ["n1", "n2", "n3"]}], "idle": ["n4"]}  # fmt: skip
    end = {"event": "end", "submission": "s1", "attempt": 0, "time": 3600.0, "state": "NODE_FAIL",
           "cause": "node_fail", "requeue": True, "in_place": True}  # fmt: skip
    again = {**start, "attempt": 1, "time": 3600.0, "replaced": {"n2": "n4"}, "idle": [],
             "components": [{"name": "ddp", "nodes": ["n1", "n4", "n3"]}]}  # fmt: skip
    done = {**end, "attempt": 1, "time": 5400.0, "state": "COMPLETED", "requeue": False, "in_place": False}
    status = job_status(JOB, [start, end, again, done], None)
    assert [a.idle for a in status.attempts] == [["n4"], []]
    # idle: 1 node x 1 h; the job's: 4 nodes x 1 h + 3 x 0.5 h
    assert "  spare nodes: up to 1 held idle, 1.00 node-hours (18% of the job's 5.50)" in format_status(status)
    assert "spare nodes" not in format_status(job_status(JOB, [START, END_FAILED], None))


def test_the_start_timeline_shows_the_queue_wait_and_each_step_of_the_start() -> None:
    """From submit to the last node's command: queued until the batch script ran, then the supervisor, the
    steps launched, the nodes' steps and their commands, each after the batch script's start."""
    job = JobInfo("12", "demo", "slurm", "/jobs/12", submission="s1", submitted=1000.0)
    timeline = {"batch": 1003.0, "supervisor": 1003.08, "launched": 1003.11}
    start = START | {"time": 1003.12, "attempt": 0, "timeline": timeline}
    running = {"event": "running", "submission": "s1", "attempt": 0, "steps": [1003.30, 1003.42],
               "commands": [1003.51, 1003.63], "last": "worker-1", "all": True}  # fmt: skip
    status = job_status(job, [start], queued("RUNNING"))
    assert "  start: queued 3.00 s, supervisor +0.08 s, steps launched +0.11 s, waiting for the nodes' commands" in (
        format_status(status)
    )
    status = job_status(job, [start, running], queued("RUNNING"))
    line = next(line for line in format_status(status).splitlines() if "start:" in line)
    assert line == (
        "  start: queued 3.00 s, supervisor +0.08 s, steps launched +0.11 s, node steps +0.30..0.42 s, "
        "commands +0.51..0.63 s (last: worker-1)"
    )
    assert status.attempts[0].timeline["commands"] == [1003.51, 1003.63]  # status --json has it too


def test_an_attempt_that_ended_before_every_command_ran_says_so_and_old_records_show_no_start() -> None:
    start = START | {"time": 50.0, "attempt": 0, "timeline": {"supervisor": 49.9, "launched": 50.0}}
    partial = {"event": "running", "submission": "s1", "attempt": 0, "steps": [50.2, 50.2], "commands": [50.3, 50.3],
               "last": "ps-0", "all": False}  # fmt: skip
    status = job_status(JOB, [start, partial, WORKER_FAILED, END_FAILED | {"time": 51.0}], None)
    line = next(line for line in format_status(status).splitlines() if "start:" in line)
    assert line.endswith("commands +0.40 s (last: ps-0), ended before every node's command ran"), line
    assert "start:" not in format_status(job_status(JOB, [START, WORKER_FAILED, END_FAILED], None))


def test_each_attempt_has_its_start_line_a_restart_in_place_from_its_own_start() -> None:
    first = START | {"time": 10.0, "attempt": 0, "timeline": {"batch": 9.0, "launched": 10.0}}
    ran = {"event": "running", "submission": "s1", "steps": [10.2, 10.3], "commands": [10.5, 10.6], "last": "ps-0"}
    again = START | {"time": 20.0, "attempt": 1}
    ran_again = {"event": "running", "submission": "s1", "attempt": 1, "steps": [20.1, 20.1],
                 "commands": [20.2, 20.2], "last": "worker-0"}  # fmt: skip
    ended = END_FAILED | {"time": 15.0, "attempt": 0, "requeue": True, "in_place": True}
    status = job_status(JOB, [first, ran | {"attempt": 0}, ended, again, ran_again], queued("RUNNING"))
    lines = [line for line in format_status(status).splitlines() if "start" in line and ":" in line]
    assert lines[0].startswith("  start (attempt 0): steps launched +1.00 s, node steps +1.20..1.30 s")
    assert lines[1] == "  start (attempt 1): node steps +0.10 s, commands +0.20 s (last: worker-0)"
